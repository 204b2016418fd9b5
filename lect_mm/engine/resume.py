"""What ``--resume`` takes from the config, not the checkpoint (README:
"Resume follows the config"; mmengine restores the checkpoint's silently):
:func:`follow_config`, applied by ``LectRunner`` before mmengine's resume."""
import warnings
from itertools import chain, repeat
from typing import List

from .checkpoints import optimizer_types
from .config_tree import ConfigMismatchError

RESUME_SCHEDULE_CHOICES = ('config', 'checkpoint')
# What a scheduler's state holds besides its settings: where it is.
_PROGRESS = frozenset(
    ('last_step', '_global_step', '_last_value', 'verbose'))


def follow_config(runner, checkpoint: dict, filename: str,
                  schedule: str = 'config') -> None:
    """Stop on another optimizer type; put the config's optimizer settings
    (``weight_decay``...) in the checkpoint, naming those that differ; and
    the config's schedule, replayed (``schedule='config'``), or the
    checkpoint's, with a warning either way."""
    _check_optimizer_type(runner, checkpoint, filename)
    _follow_settings(runner, checkpoint, filename)
    _follow_schedule(runner, checkpoint, filename, schedule)


def _param_groups(checkpoint: dict, key, optimizer):
    """The checkpoint's param groups of ``optimizer`` (``key``: its name in
    an ``OptimWrapperDict``), or None if they do not pair with its own
    (mmengine's load names that misfit)."""
    state = checkpoint.get('optimizer')
    if key is not None:
        state = state.get(key) if isinstance(state, dict) else None
    groups = state.get('param_groups') if isinstance(state, dict) else None
    return groups if isinstance(groups, list) and len(groups) == len(
        optimizer.param_groups) else None


def _check_optimizer_type(runner, checkpoint: dict, filename: str) -> None:
    saved = (checkpoint.get('meta') or {}).get('optimizer_type')
    built = optimizer_types(runner.optim_wrapper)
    if saved is None or 'optimizer' not in checkpoint or saved == built:
        return
    raise ConfigMismatchError(
        f'Resuming from {filename}: its optimizer is {saved}, the config '
        f'builds {built} (optim_wrapper.optimizer.type): the state of one '
        'cannot go on in the other. To train with the new optimizer from '
        'these weights, start a new run from them (--cfg-options '
        f'load_from={filename}, without --resume, in another --work-dir); '
        f'to resume, keep the optimizer {saved}.')


def _differ(old, new) -> bool:
    try:
        return bool(old != new)
    except Exception:  # tensors of several values
        return old is not new


def _follow_settings(runner, checkpoint: dict, filename: str) -> None:
    """The config's value of every optimizer setting the schedulers do not
    set goes into the checkpoint's param groups."""
    scheduled = {'params'}
    for _, scheduler, _ in _flat(runner.param_schedulers):
        name = scheduler.param_name
        scheduled |= {name, f'initial_{name}'} | (
            {'betas'} if name == 'momentum' else set())
    wrapper = runner.optim_wrapper
    wrappers = wrapper.items() if hasattr(wrapper, 'optim_wrappers') else [
        (None, wrapper)]
    changes = {}  # (path, setting, old, new): number of param groups
    for key, wrapper in wrappers:
        path = 'optim_wrapper' + (f'.{key}' if key is not None else '')
        groups = _param_groups(checkpoint, key, wrapper.optimizer) or []
        for group, now in zip(groups, wrapper.optimizer.param_groups):
            for field, value in now.items():
                if field not in scheduled and field in group and \
                        _differ(group[field], value):
                    change = (path, field, group[field], value)
                    changes[change] = changes.get(change, 0) + 1
                    group[field] = value
    if not changes:
        return
    listed = '; '.join(
        f'{path}.optimizer.{field} {old!r} -> {new!r}'
        + (f' ({n} param groups)' if n > 1 else '')
        for (path, field, old, new), n in changes.items())
    runner.logger.warning(
        f"Resuming from {filename}: the config's optimizer settings differ "
        f"from the checkpoint's (checkpoint -> config): {listed}. The run "
        "goes on with the config's (as its config copy in the work dir "
        "says); to go on with the checkpoint's, set them so in the config.")


# ------------------------------------------------------------- schedule
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


def _follow_schedule(runner, checkpoint: dict, filename: str,
                     choice: str) -> None:
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
    if choice == 'checkpoint':
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
    # by_epoch ones after each epoch (streamed: no list of every step)
    epoch = [by_iter] * epoch_length + [by_epoch]
    with warnings.catch_warnings():
        # "scheduler.step() before optimizer.step()": no training here
        warnings.simplefilter('ignore', UserWarning)
        for group in chain(*repeat(epoch, epochs), repeat(by_iter, inner)):
            for scheduler in group:
                scheduler.step()
    checkpoint['param_schedulers'] = (
        {key: [s.state_dict() for s in items] for key, items in built.items()}
        if isinstance(built, dict) else [s.state_dict() for s in built])
    for _, scheduler, key in flat:
        live = scheduler.optimizer.param_groups
        fields = (scheduler.param_name, f'initial_{scheduler.param_name}')
        for group, now in zip(_param_groups(checkpoint, key,
                                            scheduler.optimizer) or [], live):
            group.update({f: now[f] for f in fields if f in now})
