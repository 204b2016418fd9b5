"""A loaded checkpoint checked against the run that loads it: its classes,
and on ``--resume`` its parameter schedule (docs/pitfalls.md says what
mmengine does without it)."""
import warnings
from typing import List

from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .config_check_hook import built_loaders, class_difference
from .config_tree import ConfigMismatchError, names

__all__ = ['CheckpointCheckHook', 'RESUME_SCHEDULE_CHOICES']

RESUME_SCHEDULE_CHOICES = ('config', 'checkpoint')
# What a scheduler's state holds besides its settings: where it is.
_PROGRESS = frozenset(
    ('last_step', '_global_step', '_last_value', 'verbose'))


def _listed(items) -> str:
    return f'[{names(items, limit=40)}]'


def _flat(schedulers, name: str = 'param_scheduler') -> list:
    """``[(config path, scheduler or state, optimizer key or None)]`` of a
    list, or of a dict of lists (one per optimizer)."""
    if isinstance(schedulers, dict):
        return [(f'{name}.{key}[{i}]', item, key)
                for key, items in schedulers.items()
                for i, item in enumerate(items or [])]
    return [(f'{name}[{i}]', item, None)
            for i, item in enumerate(schedulers or [])]


def _differences(config_state: dict, saved_state: dict) -> List[str]:
    """``key checkpoint -> config`` for each setting that differs."""
    pairs = {k: (saved_state.get(k, '(none)'), config_state.get(k, '(none)'))
             for k in {**saved_state, **config_state} if k not in _PROGRESS}
    return [f'{k} {old!r} -> {new!r}' for k, (old, new) in pairs.items()
            if old != new]


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """Check a loaded checkpoint against the run's config before the first
    iteration: its ``meta['dataset_meta']['classes']`` against each data
    set's (other names or order raise :class:`ConfigMismatchError`, or warn
    for ``load_from`` in training: fine-tuning), and on ``--resume`` its
    schedulers' states against the config's, differences in a warning.
    ``resume_schedule='config'`` (default) replays the config's schedule up
    to the checkpoint; ``'checkpoint'`` keeps mmengine's behaviour."""

    priority = 'LOWEST'  # after SafeCheckpointHook has decoded the file

    def __init__(self) -> None:
        self._loaded = None  # (file, its classes, training, resuming)

    def before_run(self, runner) -> None:
        choice = runner.cfg.get('resume_schedule', 'config')
        if choice not in RESUME_SCHEDULE_CHOICES:
            raise ConfigMismatchError(
                f'resume_schedule={choice!r}: choose one of '
                f'{", ".join(map(repr, RESUME_SCHEDULE_CHOICES))} (what '
                '--resume does when the config\'s parameter schedule differs '
                'from the checkpoint\'s).')

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        filename = (getattr(runner, 'checkpoint_file', None)
                    or runner.cfg.get('load_from') or 'the checkpoint')
        training = bool(built_loaders(runner, ('train', )))
        resuming = training and bool(getattr(runner, '_resume', False))
        meta = checkpoint.get('meta') or {}
        classes = (meta.get('dataset_meta') or {}).get('classes')
        # Classes are checked once the weights are in (a head that does not
        # fit is the clearer message), before the first iteration.
        self._loaded = (filename, list(classes) if classes else None,
                        training, resuming)
        if resuming:
            self._check_schedule(runner, checkpoint, filename)

    def before_train(self, runner) -> None:
        self._check_classes(runner)

    before_val = before_test = before_train

    def _check_classes(self, runner) -> None:
        if self._loaded is None:
            return
        filename, saved, training, resuming = self._loaded
        self._loaded = None
        splits = ('test', 'val', 'train') if saved else ()
        for name, loader in built_loaders(runner, splits):
            dataset = getattr(loader, 'dataset', None)
            classes = (getattr(dataset, 'metainfo', None) or {}).get('classes')
            if not classes or list(classes) == saved:
                continue
            classes = list(classes)
            what = f'{name}.dataset ({type(dataset).__name__})'
            difference = class_difference(
                'the checkpoint', saved, what, classes, _listed,
                lambda i: f'output {i} of the model means {saved[i]!r} but '
                f'label {i} of the data means {classes[i]!r}')
            message = (
                f'Checkpoint {filename} was trained on {len(saved)} classes '
                f"(its meta['dataset_meta']['classes']): {_listed(saved)}; "
                f'{what} has {len(classes)}: {_listed(classes)}: '
                f'{difference}')
            if training and not resuming:
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

    def _check_schedule(self, runner, checkpoint, filename) -> None:
        saved = checkpoint.get('param_schedulers')
        built = runner.param_schedulers
        if not saved or not built:
            return
        built_flat, saved_flat = _flat(built), _flat(saved)
        if len(built_flat) != len(saved_flat) or isinstance(
                built, dict) != isinstance(saved, dict):
            lines = [
                f'the checkpoint holds {len(saved_flat)} schedulers, the '
                f'config builds {len(built_flat)} '
                f'({", ".join(type(s).__name__ for _, s, _ in built_flat)})'
            ]
        else:
            lines = [
                f'{path} ({type(scheduler).__name__}): ' + ', '.join(found)
                for (path, scheduler, _), (_, state, _) in zip(
                    built_flat, saved_flat)
                if (found := _differences(scheduler.state_dict(), state))
            ]
        if not lines:
            return
        where = (f'Resuming from {filename}: the config\'s parameter schedule'
                 ' differs from the one the checkpoint holds (checkpoint -> '
                 'config): ' + '; '.join(lines) + ' (begin, end and T_max of '
                 'a scheduler with by_epoch=False count iterations, '
                 f'{len(runner.train_dataloader)} per epoch).')
        if runner.cfg.get('resume_schedule', 'config') == 'checkpoint':
            runner.logger.warning(
                f'{where} resume_schedule=\'checkpoint\': the checkpoint\'s '
                'schedule goes on; the config\'s is not used.')
            return
        for path, scheduler, _ in built_flat:
            if getattr(scheduler, 'need_val_args', False):
                raise ConfigMismatchError(
                    f'{where} {path} ({type(scheduler).__name__}) steps on '
                    'validation metrics, so the config\'s schedule cannot be '
                    "replayed: set resume_schedule='checkpoint' to go on "
                    "with the checkpoint's, or start a new run.")
        _replay(runner, built, checkpoint)
        runner.logger.warning(
            f'{where} The run goes on with the config\'s schedule from where '
            'a run with it would be now. To go on with the checkpoint\'s '
            "schedule instead, set resume_schedule='checkpoint' "
            '(--cfg-options resume_schedule=checkpoint).')


def _replay(runner, built, checkpoint: dict) -> None:
    """Step the config's (fresh) schedulers through the training done so
    far, then put their states, and the values they set in the optimizer's
    param groups, in the checkpoint that mmengine's resume restores next."""
    meta = checkpoint.get('meta') or {}
    if hasattr(runner.train_loop, 'max_epochs'):
        epochs = int(meta.get('epoch', 0))
        epoch_length = len(runner.train_dataloader)
        inner = int(meta.get('inner_iter') or 0)
    else:  # iteration-based: no epochs
        epochs, epoch_length, inner = 0, 0, int(meta.get('iter', 0))
    flat = _flat(built)
    by_iter = [s for _, s, _ in flat if not s.by_epoch]
    by_epoch = [s for _, s, _ in flat if s.by_epoch]
    # ParamSchedulerHook's order: by_iter ones after each iteration,
    # by_epoch ones after each epoch
    epoch = [by_iter] * epoch_length + [by_epoch]
    with warnings.catch_warnings():
        # "scheduler.step() before optimizer.step()": no training here
        warnings.simplefilter('ignore', UserWarning)
        for schedulers in epoch * epochs + [by_iter] * inner:
            for scheduler in schedulers:
                scheduler.step()
    checkpoint['param_schedulers'] = (
        {key: [s.state_dict() for s in items] for key, items in built.items()}
        if isinstance(built, dict) else [s.state_dict() for s in built])
    optim = checkpoint.get('optimizer')
    for _, scheduler, key in flat:
        state = optim.get(key) if key is not None and isinstance(
            optim, dict) else optim
        groups = state.get('param_groups') if isinstance(state, dict) else None
        live = scheduler.optimizer.param_groups
        if not isinstance(groups, list) or len(groups) != len(live):
            continue  # mmengine's own load will name the misfit
        fields = (scheduler.param_name, f'initial_{scheduler.param_name}')
        for group, now in zip(groups, live):
            group.update({f: now[f] for f in fields if f in now})
