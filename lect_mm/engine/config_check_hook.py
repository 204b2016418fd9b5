"""What is checked before the first iteration of a run: the loaders give
batches, the data sets list the same classes, and the head fits the classes
and the width of the backbone and neck (:class:`ConfigCheckHook`)."""
from typing import List, Optional, Tuple

import numpy as np
import torch
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .config_tree import MISSING, ConfigMismatchError, as_dict, lookup
from .hooks import get_rng_state, set_rng_state
from .loading import unwrap_model


def _set_keys(cfg: dict, *candidates: str) -> List[str]:
    """The ``key=value`` of those dotted keys the config sets."""
    found = []
    for key in candidates:
        value = lookup(cfg, key)
        if value is not MISSING and value is not None:
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


def explain_empty_epoch(error: AssertionError, runner) -> Optional[str]:
    """mmengine's "`epoch_length` must be a positive integer, but got 0"
    (a parameter scheduler with ``convert_to_iter_based=True``, built in
    ``runner.train()`` before any hook runs) in terms of the training
    loader, which ``runner`` has built by then; None for other errors."""
    if '`epoch_length` must be a positive integer' not in str(error):
        return None
    loader = getattr(getattr(runner, '_train_loop', None), 'dataloader',
                     None)
    problem = (empty_epoch_problem('train_dataloader', loader)
               if loader is not None else None)
    return problem and (problem + ' (Found while building the parameter '
                        'schedulers, which convert epochs to iterations.)')


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
      ... got 0", and :func:`~lect_mm.engine.cli.runner_context` gives the
      same message);
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
        model = unwrap_model(runner.model)
        cfg = as_dict(runner.cfg)
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
                           if lookup(cfg, k) == value]
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
        rng, modes = get_rng_state(), {m: m.training for m in model.modules()}
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
            set_rng_state(rng)
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
