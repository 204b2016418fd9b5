"""Strict weight loading: a checkpoint that does not fit the model stops.

mmengine loads weights non-strictly everywhere (``Runner.load_checkpoint``
for ``load_from``, resume and ``tools/test.py``; ``load_checkpoint`` for
``get_model(cfg, pretrained=path)``; ``init_cfg=dict(type='Pretrained')``):
a checkpoint of another model or with another head gives one warning line
and a partly random model. lect_mm's loaders raise
:class:`CheckpointMismatchError` on missing, unexpected and size-mismatched
keys instead, naming the file, the first few keys of each kind and the
one-line opt-out of that path:

- ``LectRunner`` (``load_from``, ``--resume``, ``tools/test.py``): the config
  key ``load_from_strict`` (``--cfg-options load_from_strict=False``);
- ``init_cfg=dict(type='Pretrained', ..., strict=False)`` in a run of
  ``LectRunner``: :class:`StrictPretrainedInit` is ``Pretrained`` in the
  ``lect_mm`` scope, which ``LectRunner`` gives its model's ``Pretrained``
  init configs (:func:`scope_pretrained_init`; mmengine applies an init
  config named ``Pretrained`` after the submodules' own initialisation, so
  the name, not a new one, is what must resolve to the strict loader);
- :func:`load_checkpoint` (``lect_mm.engine.load_checkpoint(model, path,
  strict=False)``), mmengine's function with ``strict=True`` as default.

mmengine's and mmpretrain's own loaders are left as they are: these are
chosen by lect_mm's runtime config (``runner_type='LectRunner'``) or called
by name.

The keys are collected by the same traversal as mmengine's
``load_state_dict`` (model wrappers unwrapped, load pre-hooks run, e.g. a
position embedding resized), so what counts as a mismatch is what the load
itself could not use. ``num_batches_tracked`` may be missing, as in mmengine.
"""
import logging
import re
from collections import OrderedDict
from typing import List, Tuple

from mmengine.logging import print_log
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.model.weight_init import PretrainedInit, update_init_info
from mmengine.runner.checkpoint import _IncompatibleKeys

from lect_mm.registry import SCOPE, WEIGHT_INITIALIZERS
from .checkpoint_io import CheckpointError, load_checkpoint_verified

RUNNER_OPT_OUT = (
    'To load only the weights that fit (e.g. to fine-tune with a new head), '
    'add `--cfg-options load_from_strict=False` (in a config: '
    '`load_from_strict = False`).')
LOAD_CHECKPOINT_OPT_OUT = (
    'To load only the weights that fit, pass strict=False: '
    '`lect_mm.engine.load_checkpoint(model, path, strict=False)`.')
PRETRAINED_OPT_OUT = (
    "To load only the weights that fit, add `strict=False` to this "
    "init_cfg, or select the part that fits with `prefix='backbone.'`.")

_SIZE_MISMATCH = re.compile(
    r'size mismatch for (?P<key>\S+): copying a param with shape '
    r'torch\.Size\((?P<ckpt>\[.*?\])\) from checkpoint, the shape in '
    r'current model is torch\.Size\((?P<model>\[.*?\])\)')
_SHOWN = 3


class CheckpointMismatchError(CheckpointError):
    """A checkpoint's keys or shapes do not fit the model it is loaded into.
    """


def unwrap_model(model):
    """The model inside a model wrapper (DDP...), or ``model`` itself."""
    return model.module if is_model_wrapper(model) else model


def scope_pretrained_init(model) -> None:
    """Build every ``init_cfg=dict(type='Pretrained', ...)`` of ``model``'s
    modules in the ``lect_mm`` scope, where the name is
    :class:`StrictPretrainedInit`: each gets ``_scope_='lect_mm'``
    (mmengine's per-config scope) unless it names a scope itself."""
    for module in unwrap_model(model).modules():
        init_cfg = getattr(module, 'init_cfg', None)
        for cfg in init_cfg if isinstance(init_cfg, list) else [init_cfg]:
            if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
                cfg.setdefault('_scope_', SCOPE)


def load_state_dict_collecting(module, state_dict
                               ) -> Tuple[List[str], List[str], List[str]]:
    """Load ``state_dict`` into ``module`` non-strictly; return what did not
    fit: ``(missing keys, unexpected keys, error messages)``.

    mmengine's ``load_state_dict`` traversal, returning instead of printing.
    """
    missing, unexpected, errors = [], [], []
    metadata = getattr(state_dict, '_metadata', None)
    state_dict = OrderedDict(state_dict)
    if metadata is not None:
        state_dict._metadata = metadata

    def load(module, local_state_dict, prefix=''):
        if is_model_wrapper(module) or isinstance(module, BaseTTAModel):
            module = module.module
        local_metadata = {} if metadata is None else metadata.get(
            prefix[:-1], {})
        module._load_from_state_dict(local_state_dict, prefix,
                                     local_metadata, True, missing,
                                     unexpected, errors)
        for name, child in module._modules.items():
            if child is not None:
                child_prefix = prefix + name + '.'
                load(child, {
                    k: v
                    for k, v in local_state_dict.items()
                    if k.startswith(child_prefix)
                }, child_prefix)
        incompatible = _IncompatibleKeys(missing, unexpected)
        for hook in getattr(module, '_load_state_dict_post_hooks',
                            {}).values():
            hook(module, incompatible)

    load(module, state_dict)
    missing = [key for key in missing if 'num_batches_tracked' not in key]
    return missing, unexpected, errors


def _first(items: List[str]) -> str:
    shown = ', '.join(items[:_SHOWN])
    return shown + (', ...' if len(items) > _SHOWN else '')


def describe_mismatch(missing, unexpected, errors) -> str:
    """One line: how many keys of each kind, and the first few."""
    parts = []
    if missing:
        parts.append(f'{len(missing)} missing key(s) in the checkpoint '
                     f'({_first(missing)})')
    if unexpected:
        parts.append(f'{len(unexpected)} unexpected key(s) '
                     f'({_first(unexpected)})')
    if errors:
        shown = []
        for message in errors:
            match = _SIZE_MISMATCH.search(message)
            shown.append(f"{match['key']}: {match['ckpt']} in the "
                         f"checkpoint, {match['model']} in the model"
                         if match else message.strip())
        parts.append(f'{len(errors)} size mismatch(es) or other error(s) '
                     f'({_first(shown)})')
    return '; '.join(parts)


def load_state_dict_checked(module, state_dict, source: str, strict: bool,
                            opt_out: str, logger='current') -> None:
    """Load ``state_dict`` into ``module``; raise if it does not fit.

    Args:
        module (nn.Module): The model (or a part of it).
        state_dict (dict): The weights.
        source (str): What they come from, for the message (e.g.
            ``'Checkpoint work_dirs/x/epoch_1.pth'``).
        strict (bool): Raise on any mismatch; otherwise log a warning.
        opt_out (str): How to load non-strictly, appended to the error.
        logger: Where the non-strict warning goes.

    Raises:
        CheckpointMismatchError: ``strict`` and something did not fit.
    """
    missing, unexpected, errors = load_state_dict_collecting(
        module, state_dict)
    if not (missing or unexpected or errors):
        return
    text = (f'{source} does not fit the model ({type(module).__name__}): '
            f'{describe_mismatch(missing, unexpected, errors)}.')
    if strict:
        raise CheckpointMismatchError(
            f'{text} Is it a checkpoint of this config? {opt_out}')
    print_log(f'{text} Loaded non-strictly: what did not fit keeps its '
              'initial value.', logger=logger, level=logging.WARNING)


def state_dict_of(checkpoint, revise_keys=((r'^module\.', ''), )):
    """The weights in ``checkpoint`` with ``revise_keys`` applied, as
    mmengine's ``_load_checkpoint_to_model`` takes them."""
    state_dict = checkpoint.get('state_dict', checkpoint)
    metadata = getattr(state_dict, '_metadata', OrderedDict())
    for pattern, replacement in revise_keys:
        state_dict = OrderedDict(
            (re.sub(pattern, replacement, k), v)
            for k, v in state_dict.items())
    state_dict._metadata = metadata
    return state_dict


def load_checkpoint(model,
                    filename,
                    map_location=None,
                    strict=True,
                    logger=None,
                    revise_keys=[(r'^module\.', '')]):
    """mmengine's ``load_checkpoint``, strict by default and verified.

    The file is read with
    :func:`~lect_mm.engine.checkpoint_io.load_checkpoint_verified`;
    arguments and return value are those of
    ``mmengine.runner.load_checkpoint``.
    """
    checkpoint = load_checkpoint_verified(filename, map_location)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f'Checkpoint {filename} holds a {type(checkpoint).__name__}, '
            'not a dict of weights.')
    load_state_dict_checked(
        model, state_dict_of(checkpoint, revise_keys),
        f'Checkpoint {filename}', strict, LOAD_CHECKPOINT_OPT_OUT,
        logger or 'current')
    return checkpoint


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class StrictPretrainedInit(PretrainedInit):
    """mmengine's ``Pretrained`` initialisation, strict by default and
    verified; ``Pretrained`` in the ``lect_mm`` scope (see the module's
    documentation).

    Args:
        checkpoint (str): The checkpoint file.
        prefix (str, optional): Load only the weights under this prefix of
            the checkpoint (e.g. ``'backbone.'``), without it.
        map_location (str): As for ``torch.load``. Defaults to ``'cpu'``.
        strict (bool): Raise when the weights do not fit the module. Defaults
            to True.
    """

    def __init__(self, checkpoint, prefix=None, map_location='cpu',
                 strict=True):
        super().__init__(checkpoint, prefix, map_location)
        self.strict = strict

    def __call__(self, module):
        state_dict = state_dict_of(
            load_checkpoint_verified(self.checkpoint, self.map_location))
        source = f'Checkpoint {self.checkpoint}'
        if self.prefix is None:
            print_log(f'load model from: {self.checkpoint}', logger='current')
        else:
            print_log(f'load {self.prefix} in model from: {self.checkpoint}',
                      logger='current')
            prefix = self.prefix if self.prefix.endswith('.') else \
                self.prefix + '.'
            if not any(k.startswith(prefix) for k in state_dict):
                raise CheckpointMismatchError(
                    f'{source} has no key with the prefix {prefix!r}.')
            state_dict = OrderedDict((k[len(prefix):], v)
                                     for k, v in state_dict.items()
                                     if k.startswith(prefix))
            source += f' (prefix {prefix!r})'
        load_state_dict_checked(module, state_dict, source, self.strict,
                                PRETRAINED_OPT_OUT)
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())
