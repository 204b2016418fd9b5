"""Checkpoints between lect_mm's mmpretrain models and their timm models.

A :class:`~lect_mm.timm.model.ZooTimmModel` names its parameters as the
mmpretrain ``ImageClassifier`` of the same config (``backbone.*``,
``head.fc.*``; LeViT ``head.head.{bn,linear}.*``), so the state dicts are the
same in both directions. :func:`checkpoint_filter_fn` is what timm applies
to a checkpoint before loading it (``pretrained=True``,
``timm.models.load_checkpoint(..., filter_fn=...)``): it takes a checkpoint
of ``tools/train.py`` (the state dict under ``'state_dict'``), the bare
state dict of either model, or a classifier in the layout of a backbone's
authors (the backbone's
:meth:`~lect_mm.models.backbones.ZooBackbone.convert_foreign`: the LeCT
author's reference code, SHI-Labs' CCT, FAIR's LeViT), and refuses, naming
both, a checkpoint of another backbone than the model's.

A checkpoint of mmengine's runner also records the config it was trained
with (``meta.cfg``). :func:`config_differences` compares its model with the
model a checkpoint is loaded into, so that a file trained with other
architecture arguments (a config's ``sr_ratio``) is refused rather than
loaded strictly into a model that computes something else.
"""
import copy
import inspect
from typing import Dict, List, Optional

import torch
from mmengine.config import Config

from lect_mm.models.backbones import ZooBackbone
from .model import backbone_class

#: Prefixes of what an mmpretrain model saves beside its layers.
_DROPPED = ('data_preprocessor.', )
#: Wrappers of a model's keys: DDP and torch.compile.
_WRAPPERS = ('module.', '_orig_mod.')


def _model_name(model) -> str:
    name = getattr(model, 'pretrained_cfg', {}).get('architecture')
    backbone = type(model.backbone).__name__
    return f'{name} ({backbone})' if name else backbone


def _lect_mm_backbone(state_dict: dict) -> Optional[type]:
    """The zoo backbone whose image convolution a lect_mm-layout state dict
    holds."""
    for cls in ZooBackbone.zoo_classes():
        conv = cls.first_conv(None)
        conv = conv if isinstance(conv, str) else conv[0]
        if f'backbone.{conv}.weight' in state_dict:
            return cls
    return None


def _convert_foreign(state_dict: dict, cls: Optional[type], model=None):
    """``state_dict`` (no ``backbone.*`` key) converted by ``cls``, or, with
    no class, by the zoo backbone whose authors' layout it is."""
    held = ZooBackbone.foreign_layout_of(state_dict)
    if held is not None and cls in (None, held):
        return held.convert_foreign(state_dict)
    if held is not None:
        raise ValueError(
            f'The checkpoint holds a {held.__name__} classifier in '
            f'{held.FOREIGN_LAYOUT}, but the model asked for is '
            f'{_model_name(model)}.')
    layouts = sorted(c.FOREIGN_LAYOUT for c in ZooBackbone.zoo_classes()
                     if c.FOREIGN_LAYOUT)
    raise ValueError(
        'The checkpoint is neither a lect_mm classifier (no backbone.* key) '
        f'nor in a layout a zoo backbone converts ({"; ".join(layouts)}); '
        f'its first keys: {list(state_dict)[:5]}.')


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor],
                         model=None) -> Dict[str, torch.Tensor]:
    """A checkpoint of the zoo -> the state dict of its timm model.

    Args:
        state_dict (dict): A loaded checkpoint: a state dict, or a dict
            holding one under ``'state_dict'`` (lect_mm, mmengine) or
            ``'model'``.
        model (ZooTimmModel, optional): The model it is for (timm passes
            it). A checkpoint of another zoo backbone is refused, naming
            both; without a model, an authors' layout is recognised by the
            backbone that converts it.

    Returns:
        dict: The state dict, without wrapper prefixes and the
        data preprocessor's entries.
    """
    for wrapper in ('state_dict', 'model'):
        if isinstance(state_dict.get(wrapper), dict):
            state_dict = state_dict[wrapper]
            break
    out = {}
    for key, value in state_dict.items():
        while key.startswith(_WRAPPERS):
            key = key.split('.', 1)[1]
        if not key.startswith(_DROPPED):
            out[key] = value
    cls = None if model is None else type(model.backbone)
    if not any(k.startswith('backbone.') for k in out):
        return _convert_foreign(out, cls, model)
    held = _lect_mm_backbone(out)
    if cls is not None and held is not None and held is not cls:
        raise ValueError(
            f'The checkpoint holds a {held.__name__} classifier (lect_mm '
            f'layout), but the model asked for is {_model_name(model)}.')
    return out


def recorded_config(checkpoint: dict) -> Optional[Config]:
    """The config a checkpoint of mmengine's runner records (``meta.cfg``,
    the config's text); None if it records none."""
    meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
    text = meta.get('cfg') if isinstance(meta, dict) else None
    return Config.fromstring(text, '.py') if text else None


def recorded_model_cfg(checkpoint: dict) -> Optional[dict]:
    """The ``model`` of :func:`recorded_config`; None if there is none."""
    cfg = recorded_config(checkpoint)
    model = None if cfg is None else cfg.get('model')
    return None if model is None else model.to_dict()


def as_plain(value):
    """A config value with tuples as lists and mappings as dicts,
    recursively (configs keep either), for comparing two configs."""
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def _backbone_args(backbone: dict) -> dict:
    """Every argument of a zoo backbone config, defaults filled in from the
    constructors of its class and bases (so that an explicit default and an
    omitted one compare equal)."""
    cls = backbone_class(backbone)
    args = {}
    for klass in reversed(cls.__mro__):
        init = vars(klass).get('__init__')
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.default is not p.empty:
                args[p.name] = p.default
    args.update(backbone)
    return args


def config_differences(recorded: dict, model_cfg: dict) -> List[str]:
    """Where a checkpoint's recorded model config and a model's config
    differ in what changes parameters or eval-mode outputs.

    The backbones' training arguments (``TRAINING_ARGS``: drop rates,
    checkpointing, freezing, init, ``out_indices``), the input channels and
    the number of classes are left out: they leave the weights as trained,
    or timm adapts them (a new head, a summed stem).

    Args:
        recorded (dict): The checkpoint's ``model``
            (:func:`recorded_model_cfg`).
        model_cfg (dict): The model's (``ZooTimmModel.model_cfg``).

    Returns:
        list[str]: One ``'key: the file's value, the model's value'`` per
        difference (config paths such as ``backbone.attn_cfg``).
    """
    recorded, model_cfg = copy.deepcopy(recorded), copy.deepcopy(model_cfg)
    diffs = []

    def differ(path, a, b):
        if as_plain(a) != as_plain(b):
            diffs.append(f"{path}: the file's {as_plain(a)!r}, the model's "
                         f'{as_plain(b)!r}')

    for key in ('type', 'neck'):
        differ(key, recorded.get(key), model_cfg.get(key))
    ours, theirs = dict(recorded.get('head') or {}), dict(model_cfg['head'])
    if ours.get('type') == 'LeViTClsHead':
        ours.setdefault('distillation', True)  # mmpretrain's default
    for key in ('type', 'in_channels', 'distillation'):
        differ(f'head.{key}', ours.get(key), theirs.get(key))
    a, b = recorded.get('backbone') or {}, model_cfg['backbone']
    if a.get('type') != b.get('type'):
        differ('backbone.type', a.get('type'), b.get('type'))
        return diffs
    a, b = _backbone_args(a), _backbone_args(b)
    skip = set(backbone_class(b).TRAINING_ARGS) | {'in_channels'}
    for key in sorted(set(a) | set(b)):
        if key not in skip:
            differ(f'backbone.{key}', a.get(key), b.get(key))
    return diffs
