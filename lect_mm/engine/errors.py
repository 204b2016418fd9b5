"""Config mistakes explained in terms of the config the user wrote.

Two parts, both used by ``tools/train.py`` and ``tools/test.py`` (see
:func:`~lect_mm.engine.cli.runner_context`):

- :func:`explain_config_errors` turns a failed build into a
  :class:`ConfigError` naming the config path, the class, close names and the
  valid arguments: a misspelt ``type`` or an argument a class does not take,
  at any depth, including the blocks a backbone builds from configs it merged
  itself (LeCT's ``attn_cfg`` ...). The failing build is read from the
  traceback (mmengine's ``build_from_cfg`` frames), the culprit is then
  looked up in the config the user wrote. Errors it cannot trace back to the
  config pass through unchanged.
- :class:`ConfigCheckHook` checks, before the first iteration, what would
  otherwise fail inside it or go wrong silently: loaders that give no batch
  per epoch, data sets whose class lists differ, the head's ``num_classes``
  (and ``data_preprocessor.num_classes``) against the data sets' classes,
  and the head's ``in_channels`` against what the backbone and neck put
  out. :func:`explain_config_errors` also turns mmengine's "epoch_length
  ... got 0" into the same message as the empty-epoch check.
"""
import difflib
import inspect
import random
import re
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.registry import Registry
from mmengine.registry.build_functions import build_from_cfg
from mmpretrain.registry import HOOKS

from lect_mm.blocks.utils import init_arguments

_UNKNOWN_TYPE = re.compile(
    r"^'?(?P<name>[\w.:]+)'? is not in the (?P<registry>[\w:.]+) registry")
_UNEXPECTED_ARG = re.compile(
    r"(?P<cls>\w+)(?:\.__init__)?\(\) got an unexpected keyword argument "
    r"'(?P<key>\w+)'")
_BUILD_CODE = build_from_cfg.__code__
_MISSING = object()


class ConfigError(KeyError, TypeError):
    """A config names a type or an argument that does not exist.

    Subclasses both ``KeyError`` and ``TypeError`` (the errors mmengine
    raises for the same mistakes), so existing handlers still catch it.
    """

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigMismatchError(ValueError):
    """Config values that do not fit the data or each other (the head's
    ``num_classes`` or ``in_channels``, class lists that differ between the
    splits, a batch size that leaves an epoch empty), found by
    :class:`ConfigCheckHook`.

    A ``ValueError``: mmengine re-wraps a ``TypeError`` raised in a hook.
    """


# ------------------------------------------------------------ the config
def _walk(node, path: str = '') -> Iterator[Tuple[str, dict]]:
    """Yield ``(dotted path, dict)`` for every dict in a nested config."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f'{path}.{key}' if path else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _walk(value, f'{path}[{i}]')


def _join(path: str, key: str) -> str:
    return f'{path}.{key}' if path else key


def _type_name(type_) -> str:
    return type_ if isinstance(type_, str) else getattr(
        type_, '__name__', repr(type_))


def _as_dict(cfg):
    return cfg.to_dict() if hasattr(cfg, 'to_dict') else cfg


def _lookup(cfg, dotted: str):
    """The value at ``a.b.c`` in ``cfg``, or ``_MISSING``."""
    node = cfg
    for key in dotted.split('.'):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


# ------------------------------------------------------------ registries
def _registries() -> List[Registry]:
    import mmpretrain.registry as registry_module
    return [
        obj for obj in vars(registry_module).values()
        if isinstance(obj, Registry)
    ]


def _names_in(registry: Registry) -> set:
    names = set()
    while registry is not None:
        names |= set(registry.module_dict)
        registry = registry.parent
    return names


def _find_class(name):
    """The class (or function) registered as ``name`` anywhere, or None."""
    if not isinstance(name, str):
        return name
    for registry in _registries():
        try:
            found = registry.get(name)
        except Exception:  # a malformed name: not registered
            found = None
        if found is not None:
            return found
    return None


def _is_named(obj, cls_name: str) -> bool:
    """Whether ``obj`` is, or inherits from, a class called ``cls_name``."""
    if inspect.isclass(obj):
        return any(c.__name__ == cls_name for c in inspect.getmro(obj))
    return getattr(obj, '__name__', None) == cls_name


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=3)
    return f' Did you mean {" or ".join(map(repr, close))}?' if close else ''


def _valid_arguments(cls) -> List[str]:
    try:
        if inspect.isclass(cls):
            # **kwargs passed on to a base class (a backbone's to
            # ZooBackbone)
            return init_arguments(cls)
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


# ------------------------------------------------------------ the traceback
def _tb_frames(error: BaseException) -> list:
    """The frames of ``error``'s traceback, outermost first."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _builds(frames: list) -> List[dict]:
    """The registry builds in progress: the locals of mmengine's
    ``build_from_cfg`` frames, outermost first."""
    return [f.f_locals for f in frames if f.f_code is _BUILD_CODE]


def _chain(builds: List[dict]) -> str:
    names = []
    for build in builds:
        obj_type = build.get('obj_type', (build.get('cfg') or {}).get('type'))
        names.append(_type_name(obj_type))
    return ' > '.join(names)


# ------------------------------------------------------------ explanations
def _explain_unknown_type(error: Exception, cfg: dict,
                          frames: list) -> Optional[str]:
    """A ``type`` no registry knows, named with its config path."""
    name, registry_name = None, None
    if isinstance(error, KeyError) and error.args:
        match = _UNKNOWN_TYPE.match(str(error.args[0]))
        if match is not None:
            name, registry_name = match['name'], match['registry']
    if name is None:
        # Not mmengine's message (e.g. a constructor that looked the type up
        # itself and failed on None): a config dict in the failing frames
        # whose type no registry knows.
        for frame in reversed(frames):
            for value in list(frame.f_locals.values()):
                if (isinstance(value, dict)
                        and isinstance(value.get('type'), str)
                        and _find_class(value['type']) is None):
                    name = value['type']
                    break
            if name is not None:
                break
    if name is None:
        return None
    paths = [
        _join(path, 'type') for path, node in _walk(cfg)
        if _type_name(node.get('type')) == name
    ]
    if not paths:
        return None
    candidates = set()
    for registry in _registries():
        if registry_name in (None, f'{registry.scope}::{registry.name}'):
            candidates |= _names_in(registry)
    where = (f'in the {registry_name} registry'
             if registry_name else 'registered')
    return (f"type='{name}' (at {', '.join(paths)}) is not {where}."
            f'{_suggest(name, candidates)} If it is your own class, check '
            'that the module that registers it is imported (config key '
            "'custom_imports').")


def _explain_unexpected_argument(error: Exception, cfg: dict,
                                 frames: list) -> Optional[str]:
    """An argument a class does not take, named with its config path.

    When the call that failed is the one in mmengine's ``build_from_cfg``
    (the innermost frame), its class and arguments are exact; the path is
    that of every dict in the config holding the argument with the same
    value whose ``type`` is that class (or which has no ``type``: an
    override merged into a block config by the code, as LeCT's ``attn_cfg``).
    """
    if not isinstance(error, TypeError) or not error.args:
        return None
    match = _UNEXPECTED_ARG.search(str(error.args[0]))
    if match is None:
        return None
    cls_name, key = match['cls'], match['key']
    builds = _builds(frames)
    cls, value = _find_class(cls_name), _MISSING
    if frames and frames[-1].f_code is _BUILD_CODE:
        build = builds[-1]
        if 'obj_cls' in build and _is_named(build['obj_cls'], cls_name):
            cls = build['obj_cls']
            value = build.get('args', {}).get(key, _MISSING)
    elif builds and _is_named(builds[-1].get('obj_cls'), cls_name):
        # raised by a base class's __init__ (a backbone's ZooBackbone)
        cls = builds[-1]['obj_cls']
        value = builds[-1].get('args', {}).get(key, _MISSING)
    elif frames:
        # e.g. mmcv's build_norm_layer: the class it looked up is a local
        cls = next((v for v in list(frames[-1].f_locals.values())
                    if inspect.isclass(v) and _is_named(v, cls_name)), cls)
    # The class the config chose (the message may name the base class
    # that defines __init__, e.g. _BatchNorm for BatchNorm2d).
    shown = cls.__name__ if inspect.isclass(cls) and _is_named(
        cls, cls_name) else cls_name

    paths = []
    for path, node in _walk(cfg):
        if key not in node:
            continue
        node_type = node.get('type')
        if node_type is not None and not _is_named(
                _find_class(node_type), cls_name):
            continue
        if value is not _MISSING and not _same(node[key], value):
            continue
        paths.append(_join(path, key))

    params = _valid_arguments(cls) if cls is not None else []
    hint = ''
    if params:
        close = difflib.get_close_matches(key, params, n=1)
        if close:
            hint += f' Did you mean {close[0]!r}?'
        hint += f' Valid arguments of {shown}: {", ".join(params)}.'
    if paths:
        return (f"{', '.join(paths)}: {shown} has no argument '{key}'."
                + hint)
    if not (frames and frames[-1].f_code is _BUILD_CODE):
        return None
    # A registry build, of an argument not in the config: the code that
    # builds the class passed it.
    type_paths = [
        _join(path, 'type') for path, node in _walk(cfg)
        if node.get('type') is not None
        and _is_named(_find_class(node['type']), cls_name)
    ]
    text = (f"{shown} has no argument '{key}', which the code that "
            f'builds it passes ({_chain(builds)}), not the config.')
    if type_paths:
        text += (f' The config names {shown} at {", ".join(type_paths)}'
                 f"; choose a type there that takes '{key}'.")
    return text + hint


def _same(a, b) -> bool:
    try:
        return bool(a == b) or (isinstance(a, (list, tuple)) and isinstance(
            b, (list, tuple)) and list(a) == list(b))
    except Exception:  # e.g. tensors: not comparable, keep the candidate
        return True


def explain_config_error(error: Exception, cfg) -> Optional[str]:
    """Explain a build error in terms of ``cfg``, or return None.

    Args:
        error (Exception): The error raised while building from ``cfg``;
            its traceback locates the failing build.
        cfg (Config | dict): The config that was being built.

    Returns:
        str | None: The explanation, or None when the error is not a
        misspelt type / unknown argument found in ``cfg``.
    """
    if not isinstance(error, (KeyError, TypeError, AttributeError,
                              ValueError)):
        return None
    cfg = _as_dict(cfg)
    frames = _tb_frames(error)
    try:
        return (_explain_unexpected_argument(error, cfg, frames)
                or _explain_unknown_type(error, cfg, frames))
    finally:
        del frames


@contextmanager
def explain_config_errors(cfg):
    """Re-raise config mistakes from the body as :class:`ConfigError`.

    Example:
        >>> with explain_config_errors(cfg):
        ...     runner = Runner.from_cfg(cfg)
        ...     runner.train()

    Args:
        cfg (Config | dict): The config the body builds from.
    """
    try:
        yield
    except AssertionError as error:
        explanation = _explain_empty_epoch(error)
        if explanation is None:
            raise
        raise ConfigMismatchError(explanation) from error
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        if isinstance(error, (ConfigError, ConfigMismatchError)):
            raise
        explanation = explain_config_error(error, cfg)
        if explanation is None:
            raise
        raise ConfigError(explanation) from error


def merge_cfg_options(cfg, options: Optional[dict]) -> None:
    """``cfg.merge_from_dict(options)`` (``--cfg-options``), with an error
    naming the option when it indexes a list by name.

    mmengine says only "list indices must be integers or slices, not str"
    when e.g. ``model.backbone.attn_cfg.sr_ratio=7`` meets a config whose
    ``attn_cfg`` is a list (one dict per stage).
    """
    if not options:
        return
    try:
        cfg.merge_from_dict(options)
    except TypeError as error:
        if 'list indices must be integers' not in str(error):
            raise
        plain = _as_dict(cfg)
        for option in options:
            keys = option.split('.')
            for i in range(1, len(keys)):
                node = _lookup(plain, '.'.join(keys[:i]))
                if isinstance(node, (list, tuple)) and not keys[i].isdigit():
                    prefix = '.'.join(keys[:i])
                    example = '.'.join(keys[:i] + ['0'] + keys[i:])
                    raise ConfigError(
                        f'--cfg-options {option}: {prefix} is a list of '
                        f'{len(node)} entries, not a dict; name the entry '
                        f'by its index, e.g. {example}') from error
                if node is _MISSING:
                    break
        raise


# ------------------------------------------------------------ before run
def _unwrap(model):
    from mmengine.model import is_model_wrapper
    return model.module if is_model_wrapper(model) else model


def _rng_state() -> tuple:
    """The global random generators the probe's data pipeline may draw."""
    return (random.getstate(), np.random.get_state(), torch.get_rng_state(),
            torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() else None)


def _set_rng_state(state: tuple) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])
    if state[3] is not None:
        torch.cuda.set_rng_state_all(state[3])


def _set_keys(cfg: dict, *candidates: str) -> List[str]:
    """The ``key=value`` of those dotted keys the config sets."""
    found = []
    for key in candidates:
        value = _lookup(cfg, key)
        if value is not _MISSING and value is not None:
            found.append(f'{key}={value}')
    return found


def _labels(dataset) -> Optional[np.ndarray]:
    """The integer labels of a data set (one per sample), or None when it
    cannot say (wrappers, unlabelled or very large data)."""
    try:
        if len(dataset) > ConfigCheckHook.max_scanned_labels:
            return None
        labels = np.asarray(dataset.get_gt_labels())
    except Exception:  # no get_gt_labels, or no labels
        return None
    if labels.ndim == 1 and labels.size and labels.dtype.kind in 'iu':
        return labels
    return None


def _set(settings: list, target: int, below: bool = False) -> str:
    """``a=N and b=N`` for the settings that differ from (or, with
    ``below``, are less than) ``target``."""
    return ' and '.join(f'{key}={target}' for key, value in settings
                        if value < target or not below and value != target)


def _names(names, limit: int = 8) -> str:
    shown = ', '.join(map(repr, names[:limit]))
    return shown + (f', ... ({len(names)} in all)'
                    if len(names) > limit else '')


def _loader_shape(loader) -> Tuple[int, Optional[int], Optional[int], bool]:
    """``(samples, samples per rank, batch size, drop_last)`` of a loader."""
    batch_sampler = getattr(loader, 'batch_sampler', None)
    batch_size = getattr(batch_sampler, 'batch_size',
                         getattr(loader, 'batch_size', None))
    drop_last = bool(
        getattr(batch_sampler, 'drop_last', getattr(loader, 'drop_last',
                                                    False)))
    sampler = getattr(loader, 'sampler', None)
    try:
        per_rank = len(sampler)
    except TypeError:
        per_rank = None
    return len(loader.dataset), per_rank, batch_size, drop_last


def empty_epoch_problem(name: str, loader) -> Optional[str]:
    """Why ``loader`` (the config's ``name``, e.g. ``'train_dataloader'``)
    gives no batch per epoch, or None when it gives at least one.

    Names the data set's size, the samples per rank, the number of ranks,
    the batch size and ``drop_last``.
    """
    try:
        if len(loader) > 0:
            return None
    except TypeError:  # an iterable loader without a length
        return None
    from mmengine.dist import get_world_size
    samples, per_rank, batch_size, drop_last = _loader_shape(loader)
    ranks = get_world_size()
    dataset = f'{name}.dataset ({type(loader.dataset).__name__})'
    if samples == 0:
        return (f'{name} gives 0 iterations per epoch: {dataset} has no '
                'samples. Check its data_root, data_prefix and ann_file.')
    share = f'{per_rank} per rank, ' if per_rank is not None else ''
    fix = (f'Set {name}.batch_size to at most {per_rank}'
           if per_rank else f'Lower {name}.batch_size')
    if drop_last:
        fix += f', or {name}.drop_last=False (the last, smaller batch kept)'
    done = 'trained' if name.startswith('train') else 'evaluated'
    return (f'{name} gives 0 iterations per epoch: {dataset} has {samples} '
            f'samples ({share}{ranks} rank{"s" if ranks != 1 else ""}), '
            f'batch_size={batch_size}, drop_last={drop_last}, so nothing '
            f'would be {done}. {fix}, or add samples.')


def _explain_empty_epoch(error: AssertionError) -> Optional[str]:
    """mmengine's "`epoch_length` must be a positive integer, but got 0"
    (a parameter scheduler with ``convert_to_iter_based=True``, built before
    any hook runs) in terms of the training loader, which the runner in the
    failing frames has built by then."""
    if '`epoch_length` must be a positive integer' not in str(error):
        return None
    from mmengine.runner import Runner
    frames = _tb_frames(error)
    try:
        for frame in frames:
            runner = frame.f_locals.get('self')
            loader = getattr(getattr(runner, '_train_loop', None),
                             'dataloader', None)
            if isinstance(runner, Runner) and loader is not None:
                problem = empty_epoch_problem('train_dataloader', loader)
                if problem is not None:
                    return (problem + ' (Found while building the parameter '
                            'schedulers, which convert epochs to iterations.)')
    finally:
        del frames
    return None


def _class_mismatch(first: tuple, other: tuple) -> str:
    """The message for two data sets whose class lists differ."""
    (name_a, data_a, a, labels_a), (name_b, data_b, b, labels_b) = first, other

    def unused(classes, labels):
        if labels is None:
            return set()
        counts = np.bincount(labels[labels >= 0], minlength=len(classes))
        return {c for c, n in zip(classes, counts) if n == 0}

    parts = []
    for name, mine, theirs, empty in (
            (name_a, a, b, unused(a, labels_a)),
            (name_b, b, a, unused(b, labels_b))):
        only = [c for c in mine if c not in theirs]
        if only:
            shown = ', '.join(
                repr(c) + (' (no samples)' if c in empty else '')
                for c in only[:8])
            more = f', ... ({len(only)} in all)' if len(only) > 8 else ''
            parts.append(f'only in {name}: {shown}{more}')
    if not parts:
        parts.append('the same names in another order')
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    meaning = (f'label {index} means {a[index]!r} in {name_a} but '
               f'{b[index]!r} in {name_b}' if index is not None else
               f'labels {min(len(a), len(b))} and up exist in one only')
    return (f'{name_a} ({type(data_a).__name__}, {len(a)} classes) and '
            f'{name_b} ({type(data_b).__name__}, {len(b)} classes) do not '
            f'list the same classes in the same order: {"; ".join(parts)}. '
            f'A label is an index into the class list, so {meaning}: the '
            'model would be scored against other classes than it learnt. '
            'Give every split the same classes in the same order (class '
            'folders: the same folder names in each split; an empty folder '
            'is a class too).')


@HOOKS.register_module()
class ConfigCheckHook(Hook):
    """Check, before the first iteration, what would otherwise fail in it
    or go wrong silently.

    Runs in ``before_run`` (the loaders are built, nothing has been
    trained) and raises :class:`ConfigMismatchError` naming the config keys
    and the numbers when

    - a built loader gives no batch per epoch (a data set smaller than
      ``batch_size`` with ``drop_last=True``, or no samples): the data set
      size, samples per rank, ranks, batch size and ``drop_last`` are named
      (with the shipped schedulers mmengine fails earlier, on "epoch_length
      ... got 0", and :func:`explain_config_errors` gives the same message);
    - the data sets of the train, val and test loaders do not list the same
      classes in the same order (e.g. a class folder only one split has): a
      label is an index into the class list, so the model would be scored
      against other classes than it was trained on. The differing names
      are shown;
    - a data set has labels beyond its class list;
    - the head's ``num_classes``, the data preprocessor's ``num_classes``
      (Mixup/CutMix targets) or the head loss's ``num_classes``
      (``LabelSmoothLoss``) differ from the number of classes, or, for data
      without a class list, from each other or are too few for the labels
      (otherwise: ``IndexError: Target 9 is out of bounds`` at the first
      loss);
    - the head's ``in_channels`` is not what the backbone and neck put out:
      one sample of the first loader goes through the data preprocessor,
      backbone, neck and head (eval mode, no gradients, every random
      generator restored afterwards, so the run is unchanged), and a head
      that fails on it is explained (otherwise: ``mat1 and mat2 shapes
      cannot be multiplied`` at the first iteration).

    A probe that cannot run (an unusual model or dataset) is skipped with a
    warning. ``tools/train.py`` and ``tools/test.py`` register it.
    """

    priority = 'HIGHEST'  # before CompileModelHook compiles the modules
    # Larger datasets are checked by their ``classes`` only: reading every
    # label (a deep copy of each sample's info) would slow the start.
    max_scanned_labels = 200_000

    def before_run(self, runner) -> None:
        model = _unwrap(runner.model)
        cfg = _as_dict(runner.cfg)
        loaders = []
        for name in ('train', 'val', 'test'):
            loop = getattr(runner, f'_{name}_loop', None)
            if hasattr(loop, 'dataloader'):
                loaders.append((f'{name}_dataloader', loop.dataloader))
        for name, loader in loaders:
            problem = empty_epoch_problem(name, loader)
            if problem is not None:
                raise ConfigMismatchError(problem)
        self._check_classes(model, cfg, loaders)
        if loaders:
            self._check_head_input(model, cfg, *loaders[0], runner)

    @staticmethod
    def _check_classes(model, cfg: dict, loaders: list) -> None:
        datasets = []  # (name, dataset, classes or None, labels or None)
        for name, loader in loaders:
            dataset = loader.dataset
            classes = (getattr(dataset, 'metainfo', None) or {}).get('classes')
            datasets.append((f'{name}.dataset', dataset,
                             list(classes) if classes else None,
                             _labels(dataset)))
        listed = [d for d in datasets if d[2] is not None]
        for other in listed[1:]:
            if other[2] != listed[0][2]:
                raise ConfigMismatchError(_class_mismatch(listed[0], other))
        for what, dataset, classes, labels in datasets:
            if classes and labels is not None and labels.max() >= len(
                    classes):
                raise ConfigMismatchError(
                    f'{what} ({type(dataset).__name__}) has labels up to '
                    f'{int(labels.max())}, but only {len(classes)} classes '
                    f'({_names(classes)}): a label is an index into the '
                    'class list. Fix its labels or its metainfo classes.')

        settings = []  # (key as the config sets it, value)
        for key, owner in (
                ('head.num_classes', getattr(model, 'head', None)),
                ('data_preprocessor.num_classes',
                 getattr(model, 'data_preprocessor', None)),
                ('head.loss.num_classes',
                 getattr(getattr(model, 'head', None), 'loss_module', None))):
            value = getattr(owner, 'num_classes', None)
            if isinstance(value, int) and not isinstance(value, bool):
                written = [k for k in ('model.' + key, key)
                           if _lookup(cfg, k) == value]
                settings.append((written[0] if written else 'model.' + key,
                                 value))
        if not settings:
            return
        told = ' and '.join(f'{k}={v}' for k, v in settings)
        values = [v for _, v in settings]
        if listed:
            what, dataset, classes, labels = listed[0]
            target = len(classes)
            if all(v == target for v in values):
                return
            sizes = f'{type(dataset).__name__}: {target} classes' + (
                f', labels up to {int(labels.max())}'
                if labels is not None else '')
            needed = int(labels.max()) + 1 if labels is not None else target
            if min(values) < needed:
                why = (f'the first loss would fail with "Target '
                       f'{needed - 1} is out of bounds"')
            elif len(set(values)) > 1:
                why = ('their outputs, targets (Mixup/CutMix) and loss '
                       'would have different widths')
            elif values[0] < target:
                why = (f'classes {_names(classes[values[0]:])} could never '
                       'be predicted')
            else:
                why = (f'outputs {target} to {values[0] - 1} would stand for '
                       'no class')
            raise ConfigMismatchError(
                f'{told}, but {what} ({sizes}) needs {target} '
                f'({_names(classes)}): {why}. Set '
                f'{_set(settings, target)}.')
        # No class list: the labels bound the outputs from below.
        needed = max([int(d[3].max()) + 1 for d in datasets
                      if d[3] is not None], default=0)
        if needed and min(values) < needed:
            what, dataset, _, labels = next(
                d for d in datasets
                if d[3] is not None and int(d[3].max()) + 1 == needed)
            raise ConfigMismatchError(
                f'{told}, but {what} ({type(dataset).__name__}: labels up to '
                f'{needed - 1}) needs {needed}: the first loss would fail '
                f'with "Target {needed - 1} is out of bounds". Set '
                f'{_set(settings, needed, below=True)}.')
        if len(set(values)) > 1:
            target = max(values)
            raise ConfigMismatchError(
                f'{told} differ: the outputs, the Mixup/CutMix targets and '
                f'the loss would have different widths. Set '
                f'{_set(settings, target)} (the number of classes).')

    @staticmethod
    def _check_head_input(model, cfg: dict, name: str, loader,
                          runner) -> None:
        head = getattr(model, 'head', None)
        in_channels = getattr(head, 'in_channels', None)
        if not isinstance(in_channels, int) or not hasattr(
                model, 'extract_feat'):
            return
        rng, modes = _rng_state(), {m: m.training for m in model.modules()}
        feats = None
        try:
            model.eval()
            with torch.no_grad():
                batch = loader.collate_fn([loader.dataset[0]])
                data = model.data_preprocessor(batch, False)
                feats = model.extract_feat(data['inputs'])
                head(feats)
            return
        except Exception as error:
            failure = error
        finally:
            for module, mode in modes.items():
                module.training = mode
            _set_rng_state(rng)
        last = feats[-1] if isinstance(feats, (tuple, list)) else feats
        channels = (last.shape[1] if torch.is_tensor(last)
                    and last.dim() == 2 else None)
        if channels is None or channels == in_channels:
            runner.logger.warning(
                'ConfigCheckHook: the shape probe (one sample of '
                f'{name} through the model) failed, so the head input is '
                f'not checked: {type(failure).__name__}: {failure}')
            return
        keys = _set_keys(cfg, 'model.head.in_channels') or [
            f'model.head.in_channels={in_channels}'
        ]
        parts = [
            f'model.{part} ({type(getattr(model, part)).__name__})'
            for part in ('backbone', 'neck')
            if getattr(model, part, None) is not None
        ]
        raise ConfigMismatchError(
            f'{keys[0]}, but {" + ".join(parts)} put out {channels} '
            f'channels (one sample of {name}, input '
            f'{tuple(data["inputs"].shape)}). Set model.head.in_channels='
            f'{channels}, or change the backbone (e.g. its arch or '
            'out_indices) to put out the expected width.') from failure
