"""What is checked before the first iteration: the config against the data
and the model (:class:`ConfigCheckHook`: the loaders give batches, the data
sets list the same classes, the head fits them and the backbone's width),
and the classes of the checkpoint the run loaded against its data
(:class:`CheckpointClassesHook`; docs/pitfalls.md says what mmengine does
without it)."""
from typing import Optional

import numpy as np
import torch
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .config_tree import ConfigMismatchError, as_dict, lookup, names
from .hooks import get_rng_state, set_rng_state
from .loading import unwrap_model


def _class_list(metainfo) -> Optional[list]:
    """The ``classes`` of a data set's metainfo (or a checkpoint's
    ``dataset_meta``) as a list, or None."""
    classes = (metainfo or {}).get('classes')
    return list(classes) if classes else None


def _labels(dataset) -> Optional[np.ndarray]:
    """The integer labels of a data set, or None when it cannot say
    (wrappers, unlabelled or very large data)."""
    try:
        if len(dataset) > ConfigCheckHook.max_scanned_labels:
            return None
        labels = np.asarray(dataset.get_gt_labels())
    except Exception:  # no get_gt_labels, or no labels
        return None
    usable = labels.ndim == 1 and labels.size and labels.dtype.kind in 'iu'
    return labels if usable else None


def built_loaders(runner, splits=('train', 'val', 'test')) -> list:
    """``[(f'{split}_dataloader', loader)]`` of the loops ``runner`` built."""
    loops = [(split, getattr(runner, f'_{split}_loop', None))
             for split in splits]
    return [(f'{split}_dataloader', loop.dataloader) for split, loop in loops
            if hasattr(loop, 'dataloader')]


def _set(settings: list, target: int, below: bool = False) -> str:
    """``a=N and b=N`` for the settings that differ from (or, with
    ``below``, are less than) ``target``."""
    return ' and '.join(f'{key}={target}' for key, value in settings
                        if value < target or not below and value != target)


def empty_epoch_problem(name: str, loader) -> Optional[str]:
    """Why ``loader`` (the config's ``name``, e.g. ``'train_dataloader'``)
    gives no batch per epoch, or None when it gives one."""
    try:
        if len(loader) > 0:
            return None
    except TypeError:  # an iterable loader without a length
        return None
    batches = getattr(loader, 'batch_sampler', None)
    batch_size = getattr(batches, 'batch_size',
                         getattr(loader, 'batch_size', None))
    drop_last = bool(
        getattr(batches, 'drop_last', getattr(loader, 'drop_last', False)))
    try:
        per_rank = len(getattr(loader, 'sampler', None))
    except TypeError:
        per_rank = None
    samples, ranks = len(loader.dataset), get_world_size()
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


def class_difference(a_name: str, a: list, b_name: str, b: list, show,
                     means) -> str:
    """How class lists ``a`` and ``b`` differ (``only in <a_name>: ...``,
    ``show`` listing the names) and what it does to a label: ``means(i)``
    says what index ``i``, the first where they differ, stands for."""
    how = '; '.join(f'only in {where}: {show(only)}' for where, only in (
        (a_name, [c for c in a if c not in b]),
        (b_name, [c for c in b if c not in a])) if only)
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    meaning = means(index) if index is not None else (
        f'labels {min(len(a), len(b))} and up name a class in one list only')
    return (f'{how or "the same names in another order"}. A label is an '
            f'index into the class list, so {meaning}')


def _class_mismatch(first: tuple, other: tuple) -> str:
    """The message for two data sets whose class lists differ."""
    (name_a, data_a, a, labels_a), (name_b, data_b, b, labels_b) = first, other
    empty = set()  # classes without a sample
    for classes, labels in ((a, labels_a), (b, labels_b)):
        if labels is not None:
            counts = np.bincount(labels[labels >= 0], minlength=len(classes))
            empty |= {c for c, n in zip(classes, counts) if n == 0}

    def show(only):
        return names([f'{c!r} (no samples)' if c in empty else repr(c)
                      for c in only], fmt=str)

    difference = class_difference(
        name_a, a, name_b, b, show,
        lambda i: f'label {i} means {a[i]!r} in {name_a} but {b[i]!r} in '
        f'{name_b}')
    return (f'{name_a} ({type(data_a).__name__}, {len(a)} classes) and '
            f'{name_b} ({type(data_b).__name__}, {len(b)} classes) do not '
            f'list the same classes in the same order: {difference}: the '
            'model would be scored against other classes than it learnt. '
            'Give every split the same classes in the same order (class '
            'folders: the same folder names in each split; an empty folder '
            'is a class too).')


@HOOKS.register_module()
class ConfigCheckHook(Hook):
    """Check in ``before_run`` what would fail in the first iteration or go
    wrong silently, raising :class:`ConfigMismatchError` with the config keys
    and numbers: a loader without a batch per epoch, data sets whose class
    lists differ, labels beyond the class list, ``num_classes`` (head, data
    preprocessor, loss) that do not fit the classes or each other, a head
    ``in_channels`` other than the model puts out (one sample probed in eval
    mode, the random generators restored; a probe that fails warns)."""

    priority = 'HIGHEST'  # before CompileModelHook compiles the modules
    # Larger data sets are checked by their classes only: reading every
    # label (a deep copy of each sample's info) would slow the start.
    max_scanned_labels = 200_000

    def before_run(self, runner) -> None:
        model = unwrap_model(runner.model)
        loaders = built_loaders(runner)
        for name, loader in loaders:
            problem = empty_epoch_problem(name, loader)
            if problem is not None:
                raise ConfigMismatchError(problem)
        self._check_classes(model, as_dict(runner.cfg), loaders)
        if loaders:
            self._check_head_input(model, *loaders[0], runner)

    @staticmethod
    def _check_classes(model, cfg: dict, loaders: list) -> None:
        # (name, dataset, classes or None, labels or None)
        datasets = [(f'{name}.dataset', loader.dataset,
                     _class_list(getattr(loader.dataset, 'metainfo', None)),
                     _labels(loader.dataset)) for name, loader in loaders]
        listed = [d for d in datasets if d[2] is not None]
        for other in listed[1:]:
            if other[2] != listed[0][2]:
                raise ConfigMismatchError(_class_mismatch(listed[0], other))
        for what, dataset, classes, labels in listed:
            if labels is not None and labels.max() >= len(classes):
                raise ConfigMismatchError(
                    f'{what} ({type(dataset).__name__}) has labels up to '
                    f'{int(labels.max())}, but only {len(classes)} classes '
                    f'({names(classes)}): a label is an index into the '
                    'class list. Fix its labels or its metainfo classes.')

        head = getattr(model, 'head', None)
        settings = []  # (key as the config sets it, value)
        for key, owner in (
                ('head.num_classes', head),
                ('data_preprocessor.num_classes',
                 getattr(model, 'data_preprocessor', None)),
                ('head.loss.num_classes', getattr(head, 'loss_module', None))):
            value = getattr(owner, 'num_classes', None)
            if isinstance(value, int) and not isinstance(value, bool):
                written = next((k for k in ('model.' + key, key)
                                if lookup(cfg, k) == value), 'model.' + key)
                settings.append((written, value))
        if not settings:
            return
        told = ' and '.join(f'{k}={v}' for k, v in settings)
        values = [v for _, v in settings]
        # A class list fixes the number; labels alone bound it below.
        what, dataset, classes, labels = listed[0] if listed else max(
            [d for d in datasets if d[3] is not None],
            key=lambda d: d[3].max(), default=(None, ) * 4)
        needed = int(labels.max()) + 1 if labels is not None else len(
            classes or ())
        target = len(classes) if classes else needed
        fix = what and _set(settings, target, below=not classes)
        if fix:
            if min(values) < needed:
                why = (f'the first loss would fail with "Target '
                       f'{needed - 1} is out of bounds"')
            elif len(set(values)) > 1:
                why = ('their outputs, targets (Mixup/CutMix) and loss '
                       'would have different widths')
            elif values[0] < target:
                why = (f'classes {names(classes[values[0]:])} could never '
                       'be predicted')
            else:
                why = (f'outputs {target} to {values[0] - 1} would stand for '
                       'no class')
            sizes = ([f'{target} classes'] if classes else []) + (
                [f'labels up to {needed - 1}'] if labels is not None else [])
            listing = f' ({names(classes)})' if classes else ''
            raise ConfigMismatchError(
                f'{told}, but {what} ({type(dataset).__name__}: '
                f'{", ".join(sizes)}) needs {target}{listing}: {why}. '
                f'Set {fix}.')
        if len(set(values)) > 1:
            raise ConfigMismatchError(
                f'{told} differ: the outputs, the Mixup/CutMix targets and '
                f'the loss would have different widths. Set '
                f'{_set(settings, max(values))} (the number of classes).')

    @staticmethod
    def _check_head_input(model, name: str, loader, runner) -> None:
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
        parts = [
            f'model.{part} ({type(getattr(model, part)).__name__})'
            for part in ('backbone', 'neck')
            if getattr(model, part, None) is not None
        ]
        raise ConfigMismatchError(
            f'model.head.in_channels={in_channels}, but {" + ".join(parts)} '
            f'put out {channels} channels (one sample of {name}, input '
            f'{tuple(data["inputs"].shape)}). Set model.head.in_channels='
            f'{channels}, or change the backbone (e.g. its arch or '
            'out_indices) to put out the expected width.') from failure


# ------------------------------------------------- a loaded checkpoint
def _listed(items) -> str:
    return f'[{names(items, limit=40)}]'


@HOOKS.register_module()
class CheckpointClassesHook(Hook):
    """Before the first iteration, compare the classes of the checkpoint
    that ``LectRunner`` loaded (its ``meta['dataset_meta']['classes']``)
    with each data set's: other names or another order raise
    :class:`ConfigMismatchError`, or warn for ``load_from`` in training
    (fine-tuning)."""

    priority = 'LOWEST'

    def __init__(self) -> None:
        self._checked = None  # the loaded checkpoint checked last

    def before_train(self, runner) -> None:
        loaded = getattr(getattr(runner, 'checkpoints', None), 'loaded', None)
        if loaded is None or loaded is self._checked:
            return
        self._checked = loaded
        meta = loaded.entries.get('meta') or {}
        saved = _class_list(meta.get('dataset_meta'))
        training = bool(built_loaders(runner, ('train', )))
        for name, loader in built_loaders(runner, ('test', 'val', 'train')
                                          if saved else ()):
            classes = _class_list(getattr(loader.dataset, 'metainfo', None))
            if classes in (None, saved):
                continue
            what = f'{name}.dataset ({type(loader.dataset).__name__})'
            difference = class_difference(
                'the checkpoint', saved, what, classes, _listed,
                lambda i: f'output {i} of the model means {saved[i]!r} but '
                f'label {i} of the data means {classes[i]!r}')
            message = (
                f'Checkpoint {loaded.path} was trained on {len(saved)} '
                "classes (its meta['dataset_meta']['classes']): "
                f'{_listed(saved)}; {what} has {len(classes)}: '
                f'{_listed(classes)}: {difference}')
            if training and not loaded.resumed:
                runner.logger.warning(
                    f'load_from: {message}. The model is fine-tuned on the '
                    'new classes; if it was meant to go on with its own, '
                    'list them in the checkpoint\'s order.')
                return
            raise ConfigMismatchError(
                f'{message}: the model would be scored against other '
                'classes than it learnt. List the classes in the '
                "checkpoint's order: for class folders (CheckedCustomDataset)"
                f', {name}.dataset.metainfo = dict(classes=[...])'
                ' with the folder names in that order labels each folder by '
                'its place in the list; otherwise test on data with those '
                'classes.')

    before_val = before_test = before_train
