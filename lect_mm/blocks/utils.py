"""Config helpers shared by the blocks and backbones that build sub-blocks.

A block that builds a swappable sub-block (``attn_cfg=dict(type=...)``) has
block-level arguments such as ``num_heads`` or ``attn_drop_rate``; they are
filled into the sub-block's config only where the config leaves them unset
and the target type's ``__init__`` accepts them, so any registered type can
be named without passing it arguments it does not know.
"""
import copy
import inspect
from typing import Optional

from mmpretrain.registry import MODELS


def accepted_args(type_) -> Optional[set]:
    """Names accepted by the ``__init__`` of a registered type.

    Args:
        type_ (str | type): A registered name or the class itself.

    Returns:
        set | None: The argument names, or None when ``__init__`` takes
        ``**kwargs`` (it accepts anything).
    """
    cls = MODELS.get(type_) if isinstance(type_, str) else type_
    if cls is None:
        raise KeyError(f'{type_!r} is not in the mmpretrain::model registry; '
                       'did you import lect_mm (custom_imports)?')
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None
    return set(params) - {'self'}


def set_defaults(cfg: dict, **defaults) -> dict:
    """Fill ``defaults`` into a copy of ``cfg`` where accepted and unset.

    Entries already in ``cfg`` win; a default reaches the config only if the
    ``__init__`` of ``cfg['type']`` accepts it (or takes ``**kwargs``).

    Args:
        cfg (dict): A config with a ``type`` (not modified).
        **defaults: Candidate arguments.

    Returns:
        dict: A new config.
    """
    if 'type' not in cfg:
        raise KeyError(f'The config {cfg} names no "type".')
    cfg = copy.deepcopy(dict(cfg))
    accepted = accepted_args(cfg['type'])
    for key, value in defaults.items():
        if accepted is None or key in accepted:
            cfg.setdefault(key, value)
    return cfg
