"""A loaded checkpoint checked against the run that loads it.

mmengine saves the training data set's ``metainfo`` in every checkpoint
(``meta['dataset_meta']``) and, for ``--resume``, the state of every
parameter scheduler. It then tests a checkpoint on data whose class list
differs without a word (a label is an index into the class list: class
folders that sort in another order than the checkpoint's classes score the
model against other classes than it learnt), and it restores the schedulers
over the config's, so that ``--resume --cfg-options train_cfg.max_epochs=N``
keeps the old schedule: its cosine has ended, and the learning rate stays at
its last value for every new iteration.

:class:`CheckpointCheckHook` (registered by
:class:`~lect_mm.engine.LectRunner`) checks each checkpoint the runner loads
(``tools/test.py``, ``load_from``, ``--resume``) before the first iteration.
"""
import warnings
from typing import List, Optional, Tuple

from mmengine.hooks import Hook
from mmengine.runner import BaseLoop
from mmpretrain.registry import HOOKS

from .config_tree import ConfigMismatchError

__all__ = ['CheckpointCheckHook', 'RESUME_SCHEDULE_CHOICES']

RESUME_SCHEDULE_CHOICES = ('config', 'checkpoint')
# What a scheduler's state holds besides its settings: where it is.
_PROGRESS = frozenset(
    ('last_step', '_global_step', '_last_value', 'verbose'))
# At most this many class names in one list of a message.
_MAX_LISTED = 40


def _loop(runner, name: str) -> Optional[BaseLoop]:
    loop = getattr(runner, f'_{name}_loop', None)
    return loop if isinstance(loop, BaseLoop) else None


def _listed(names) -> str:
    shown = ', '.join(map(repr, names[:_MAX_LISTED]))
    more = (f', ... ({len(names)} in all)'
            if len(names) > _MAX_LISTED else '')
    return f'[{shown}{more}]'


def _flat(schedulers, name: str = 'param_scheduler') -> list:
    """``[(config path, scheduler or state), ...]`` of a list or a dict of
    lists (one per optimizer)."""
    if isinstance(schedulers, dict):
        return [(f'{name}.{key}[{i}]', item, key)
                for key, items in schedulers.items()
                for i, item in enumerate(items or [])]
    return [(f'{name}[{i}]', item, None)
            for i, item in enumerate(schedulers or [])]


def _shown(value) -> str:
    if isinstance(value, float):
        return f'{value:.6g}'
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, float) for v in value):
        return '[' + ', '.join(f'{v:.6g}' for v in value) + ']'
    return repr(value)


def _differences(config_state: dict, saved_state: dict) -> List[str]:
    """``key checkpoint -> config`` for each setting that differs."""
    found = []
    for key in list(saved_state) + [k for k in config_state
                                    if k not in saved_state]:
        if key in _PROGRESS:
            continue
        mine = config_state.get(key, '(none)')
        theirs = saved_state.get(key, '(none)')
        if mine != theirs:
            found.append(f'{key} {_shown(theirs)} -> {_shown(mine)}')
    return found


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """Check a loaded checkpoint's classes and, on resume, its parameter
    schedule against the run's config.

    - **Classes** (in ``before_train``/``before_val``/``before_test``: after
      the weights are loaded, before the first iteration). The checkpoint's
      ``meta['dataset_meta']['classes']`` (the class list of the data it
      was trained on, which mmengine saves) is compared with the class list
      of each data set the run has built.
      Other names, or the same names in another order, stop
      ``tools/test.py``, validation and ``--resume`` with a
      :class:`~lect_mm.engine.ConfigMismatchError` that names the
      checkpoint and shows both lists; for ``load_from`` in training
      (fine-tuning on other classes is legitimate) it is a warning. A
      checkpoint or data set without a class list is not checked.
    - **Schedule** (``--resume`` only, in ``after_load_checkpoint``, before
      the runner restores anything). Each scheduler the config builds is
      compared with the state the checkpoint holds for it (``begin``,
      ``end``, ``T_max``, ``eta_min``, the base values ... everything but
      its position). mmengine would restore the checkpoint's over the
      config's without a word; instead, the config key ``resume_schedule``
      decides, and a warning lists the differences:

      - ``'config'`` (default): the run goes on with the config's
        schedule, where a run with that schedule from the start would be
        now: the config's schedulers are stepped through the epochs and
        iterations the checkpoint has done (in the current epoch length),
        and the learning rate (or momentum ...) they reach replaces the
        checkpoint's. ``--resume --cfg-options train_cfg.max_epochs=N``
        thus stretches or shortens a schedule whose ``end`` defaults to
        ``max_epochs`` (the shipped ones); a config that sets ``end`` or
        ``T_max`` needs them set too.
      - ``'checkpoint'``: mmengine's behaviour, the checkpoint's schedule
        goes on (a cosine that has ended keeps its last value).

      A scheduler that steps on validation metrics (``ReduceOnPlateau``)
      cannot be replayed: with ``'config'`` that stops the run.
    """

    priority = 'LOWEST'  # after SafeCheckpointHook has decoded the file

    def before_run(self, runner) -> None:
        choice = runner.cfg.get('resume_schedule', 'config')
        if choice not in RESUME_SCHEDULE_CHOICES:
            raise ConfigMismatchError(
                f'resume_schedule={choice!r}: choose one of '
                f'{", ".join(map(repr, RESUME_SCHEDULE_CHOICES))} (what '
                '--resume does when the config\'s parameter schedule differs '
                'from the checkpoint\'s).')

    def __init__(self) -> None:
        self._loaded = None  # (file, its classes, training, resuming)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        filename = (getattr(runner, 'checkpoint_file', None)
                    or runner.cfg.get('load_from') or 'the checkpoint')
        training = _loop(runner, 'train') is not None
        resuming = training and bool(getattr(runner, '_resume', False))
        meta = checkpoint.get('meta') or {}
        classes = (meta.get('dataset_meta') or {}).get('classes')
        # Checked once the weights are in (a head that does not fit is the
        # clearer message), before the first iteration.
        self._loaded = (filename, list(classes) if classes else None,
                        training, resuming)
        if resuming:
            self._check_schedule(runner, checkpoint, filename)

    def before_train(self, runner) -> None:
        self._check_classes(runner)

    def before_val(self, runner) -> None:
        self._check_classes(runner)

    def before_test(self, runner) -> None:
        self._check_classes(runner)

    # ------------------------------------------------------------ classes
    def _check_classes(self, runner) -> None:
        if self._loaded is None:
            return
        filename, saved, training, resuming = self._loaded
        self._loaded = None
        if not saved:
            return
        for name in ('test', 'val', 'train'):
            loop = _loop(runner, name)
            dataset = getattr(getattr(loop, 'dataloader', None), 'dataset',
                              None)
            metainfo = getattr(dataset, 'metainfo', None) or {}
            classes = metainfo.get('classes')
            if not classes or list(classes) == saved:
                continue
            classes = list(classes)
            what = f'{name}_dataloader.dataset ({type(dataset).__name__})'
            only_saved = [c for c in saved if c not in classes]
            only_data = [c for c in classes if c not in saved]
            if only_saved or only_data:
                how = '; '.join(
                    f'only in {where}: {_listed(names)}'
                    for where, names in (('the checkpoint', only_saved),
                                         (what, only_data)) if names)
            else:
                how = 'the same names in another order'
            index = next((i for i, (a, b) in enumerate(zip(saved, classes))
                          if a != b), min(len(saved), len(classes)))
            meaning = (
                f'output {index} of the model means {saved[index]!r} but '
                f'label {index} of the data means {classes[index]!r}'
                if index < min(len(saved), len(classes)) else
                f'{max(len(saved), len(classes)) - index} classes are in '
                'one list only')
            message = (
                f'Checkpoint {filename} was trained on {len(saved)} classes '
                f"(its meta['dataset_meta']['classes']): {_listed(saved)}; "
                f'{what} has {len(classes)}: {_listed(classes)}: {how}. A '
                f'label is an index into the class list, so {meaning}')
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
                f', {name}_dataloader.dataset.metainfo = dict(classes=[...])'
                ' with the folder names in that order labels each folder by '
                'its place in the list; otherwise test on data with those '
                'classes.')

    # ----------------------------------------------------------- schedule
    def _check_schedule(self, runner, checkpoint, filename) -> None:
        saved = checkpoint.get('param_schedulers')
        built = runner.param_schedulers
        if not saved or not built:
            return
        built_flat, saved_flat = _flat(built), _flat(saved)
        lines = []
        if len(built_flat) != len(saved_flat) or isinstance(
                built, dict) != isinstance(saved, dict):
            lines.append(
                f'the checkpoint holds {len(saved_flat)} schedulers, the '
                f'config builds {len(built_flat)} '
                f'({", ".join(type(s).__name__ for _, s, _ in built_flat)})')
        else:
            for (path, scheduler, _), (_, state, _) in zip(
                    built_flat, saved_flat):
                found = _differences(scheduler.state_dict(), state)
                if found:
                    lines.append(f'{path} ({type(scheduler).__name__}): '
                                 + ', '.join(found))
        if not lines:
            return
        epoch_length = len(runner.train_dataloader)
        units = (f' (begin, end and T_max of a scheduler with by_epoch=False'
                 f' count iterations, {epoch_length} per epoch)')
        where = (f'Resuming from {filename}: the config\'s parameter schedule'
                 ' differs from the one the checkpoint holds (checkpoint -> '
                 'config): ' + '; '.join(lines) + units + '.')
        if runner.cfg.get('resume_schedule', 'config') == 'checkpoint':
            runner.logger.warning(
                f'{where} resume_schedule=\'checkpoint\': the checkpoint\'s '
                'schedule goes on; the config\'s is not used.')
            return
        changes = self._replay(runner, built, checkpoint, where)
        runner.logger.warning(
            f'{where} The run goes on with the config\'s schedule from where '
            f'a run with it would be now ({changes}). To go on with the '
            "checkpoint's schedule instead, set resume_schedule='checkpoint'"
            ' (--cfg-options resume_schedule=checkpoint).')

    @staticmethod
    def _replay(runner, built, checkpoint, where) -> str:
        """Step the config's (fresh) schedulers through the training done so
        far, then make the checkpoint restore their states and the values
        they set."""
        flat = _flat(built)
        for path, scheduler, _ in flat:
            if getattr(scheduler, 'need_val_args', False):
                raise ConfigMismatchError(
                    f'{where} {path} ({type(scheduler).__name__}) steps on '
                    'validation metrics, so the config\'s schedule cannot be '
                    "replayed: set resume_schedule='checkpoint' to go on "
                    "with the checkpoint's, or start a new run.")
        meta = checkpoint.get('meta') or {}
        loop = runner.train_loop
        if hasattr(loop, 'max_epochs'):
            epochs = int(meta.get('epoch', 0))
            epoch_length = len(runner.train_dataloader)
            inner = int(meta.get('inner_iter') or 0)
        else:  # iteration-based: no epochs
            epochs, epoch_length, inner = 0, 0, int(meta.get('iter', 0))
        by_iter = [s for _, s, _ in flat if not s.by_epoch]
        by_epoch = [s for _, s, _ in flat if s.by_epoch]
        before = _scheduled_values(flat, checkpoint)
        with warnings.catch_warnings():
            # "scheduler.step() before optimizer.step()": no training here
            warnings.simplefilter('ignore', UserWarning)
            for _ in range(epochs):
                for _ in range(epoch_length):
                    for scheduler in by_iter:
                        scheduler.step()
                for scheduler in by_epoch:
                    scheduler.step()
            for _ in range(inner):
                for scheduler in by_iter:
                    scheduler.step()
        # What mmengine's resume restores next: these states, and the
        # optimizer's param groups with the values they set.
        if isinstance(built, dict):
            checkpoint['param_schedulers'] = {
                key: [s.state_dict() for s in items]
                for key, items in built.items()
            }
        else:
            checkpoint['param_schedulers'] = [s.state_dict() for s in built]
        saved_optim = checkpoint.get('optimizer')
        for _, scheduler, key in flat:
            groups = _saved_groups(saved_optim, key)
            live = scheduler.optimizer.param_groups
            if groups is None or len(groups) != len(live):
                continue  # mmengine's own load will name the misfit
            name = scheduler.param_name
            for group, now in zip(groups, live):
                for field in (name, f'initial_{name}'):
                    if field in now:
                        group[field] = now[field]
        after = _scheduled_values(flat, checkpoint)
        return ', '.join(f'{name} {a} instead of {b}'
                         for (name, a), (_, b) in zip(after, before)
                         if a != b) or 'the same values now'


def _saved_groups(saved_optim, key) -> Optional[list]:
    if not isinstance(saved_optim, dict):
        return None
    if key is not None:
        saved_optim = saved_optim.get(key)
        if not isinstance(saved_optim, dict):
            return None
    groups = saved_optim.get('param_groups')
    return groups if isinstance(groups, list) else None


def _scheduled_values(flat, checkpoint) -> List[Tuple[str, str]]:
    """``[(param name, first group's value as text)]`` in the checkpoint's
    optimizer state, once per scheduled parameter."""
    seen, values = set(), []
    for _, scheduler, key in flat:
        name = scheduler.param_name
        if (key, name) in seen:
            continue
        seen.add((key, name))
        groups = _saved_groups(checkpoint.get('optimizer'), key) or [{}]
        value = groups[0].get(name)
        label = name if key is None else f'{key}.{name}'
        values.append((label, _shown(value)))
    return values
