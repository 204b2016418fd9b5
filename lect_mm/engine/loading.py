"""Strict weight loading: where mmengine warns and goes on with a partly
random model, these loaders raise :class:`CheckpointMismatchError` naming the
file, the first keys that do not fit and the opt-out of that path
(mmengine's and mmpretrain's own loaders are unchanged: docs/pitfalls.md).
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
from .checkpoint_io import CheckpointError, read_checkpoint

RUNNER_OPT_OUT = (
    'To load only the weights that fit (e.g. to fine-tune with a new head), '
    'add `--cfg-options load_from_strict=False` (in a config: '
    '`load_from_strict = False`).')
LOAD_WEIGHTS_OPT_OUT = (
    'To load only the weights that fit, pass strict=False: '
    '`lect_mm.engine.load_weights(model, path, strict=False)`.')
PRETRAINED_OPT_OUT = (
    "To load only the weights that fit, add `strict=False` to this "
    "init_cfg, or select the part that fits with `prefix='backbone.'`.")

#: torch's size mismatch message, and how a mismatch's description puts it
_SIZE_MISMATCH = re.compile(
    r'\s*size mismatch for (?P<key>\S+): copying a param with shape '
    r'torch\.Size\((?P<ckpt>\[.*?\])\) from checkpoint, the shape in '
    r'current model is torch\.Size\((?P<model>\[.*?\])\)\.?')
_SHAPES = r'\g<key>: \g<ckpt> in the checkpoint, \g<model> in the model'


class CheckpointMismatchError(CheckpointError):
    """A checkpoint's keys or shapes do not fit the model."""


def unwrap_model(model):
    """The model inside a model wrapper (DDP...), or ``model`` itself."""
    return model.module if is_model_wrapper(model) else model


def scope_pretrained_init(model) -> None:
    """Scope every ``init_cfg=dict(type='Pretrained')`` of ``model`` without
    a ``_scope_`` to ``lect_mm``, where it is :class:`StrictPretrainedInit`."""
    for module in unwrap_model(model).modules():
        init_cfg = getattr(module, 'init_cfg', None)
        for cfg in init_cfg if isinstance(init_cfg, list) else [init_cfg]:
            if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
                cfg.setdefault('_scope_', SCOPE)


def load_state_dict_collecting(module, state_dict
                               ) -> Tuple[List[str], List[str], List[str]]:
    """mmengine's ``load_state_dict`` (non-strict: wrappers unwrapped, load
    hooks run), returning ``(missing keys, unexpected keys, error
    messages)`` instead of printing them."""
    missing, unexpected, errors = [], [], []
    metadata = getattr(state_dict, '_metadata', None)

    def load(module, local_state_dict, prefix=''):
        if is_model_wrapper(module) or isinstance(module, BaseTTAModel):
            module = module.module
        local_metadata = (metadata or {}).get(prefix[:-1], {})
        module._load_from_state_dict(local_state_dict, prefix,
                                     local_metadata, True, missing,
                                     unexpected, errors)
        for name, child in module._modules.items():
            if child is not None:
                child_prefix = prefix + name + '.'
                load(child, {k: v for k, v in local_state_dict.items()
                             if k.startswith(child_prefix)}, child_prefix)
        incompatible = _IncompatibleKeys(missing, unexpected)
        for hook in module._load_state_dict_post_hooks.values():
            hook(module, incompatible)

    load(module, OrderedDict(state_dict))
    missing = [key for key in missing if 'num_batches_tracked' not in key]
    return missing, unexpected, errors


def load_state_dict_checked(module, state_dict, source: str, strict: bool,
                            opt_out: str, logger='current') -> None:
    """Load ``state_dict``; what does not fit raises (``strict``) or warns,
    naming ``source`` (``'Checkpoint PATH'``), how many keys of each kind
    and the first three, and ``opt_out``."""
    missing, unexpected, errors = load_state_dict_collecting(module,
                                                             state_dict)
    kinds = [('missing key(s) in the checkpoint', missing),
             ('unexpected key(s)', unexpected),
             ('size mismatch(es) or other error(s)',
              [_SIZE_MISMATCH.sub(_SHAPES, e).strip() for e in errors])]
    mismatch = '; '.join(
        f'{len(keys)} {kind} ({", ".join(keys[:3])}'
        f'{", ..." if len(keys) > 3 else ""})' for kind, keys in kinds if keys)
    if not mismatch:
        return
    text = f'{source} does not fit the model ({type(module).__name__}): ' \
        f'{mismatch}.'
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


def load_weights(model,
                 filename,
                 map_location=None,
                 strict=True,
                 logger=None,
                 revise_keys=[(r'^module\.', '')]):
    """The weights of a checkpoint file into ``model``: the arguments and
    return value of ``mmengine.runner.load_checkpoint``, strict by default,
    the file read with :func:`~.checkpoint_io.read_checkpoint`."""
    checkpoint = read_checkpoint(filename, map_location)
    load_state_dict_checked(
        model, state_dict_of(checkpoint, revise_keys),
        f'Checkpoint {filename}', strict, LOAD_WEIGHTS_OPT_OUT,
        logger or 'current')
    return checkpoint


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class StrictPretrainedInit(PretrainedInit):
    """mmengine's ``Pretrained`` init, verified and strict unless
    ``strict=False``; ``Pretrained`` in the ``lect_mm`` scope."""

    def __init__(self, checkpoint, prefix=None, map_location='cpu',
                 strict=True):
        super().__init__(checkpoint, prefix, map_location)
        self.strict = strict

    def __call__(self, module):
        state_dict = state_dict_of(
            read_checkpoint(self.checkpoint, self.map_location))
        prefix = self.prefix.rstrip('.') + '.' if self.prefix else ''
        print_log(f'load {prefix or "model"} from: {self.checkpoint}',
                  logger='current')
        source = f'Checkpoint {self.checkpoint}'
        if prefix:
            state_dict = OrderedDict((k[len(prefix):], v)
                                     for k, v in state_dict.items()
                                     if k.startswith(prefix))
            if not state_dict:
                raise CheckpointMismatchError(
                    f'{source} has no key with the prefix {prefix!r}.')
            source += f' (prefix {prefix!r})'
        load_state_dict_checked(module, state_dict, source, self.strict,
                                PRETRAINED_OPT_OUT)
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())
