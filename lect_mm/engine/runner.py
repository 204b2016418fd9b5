"""``LectRunner``: mmengine's ``Runner`` that owns its work directory and
its checkpoints (:class:`~.checkpoints.RunCheckpoints`), loads them verified
and strictly, and reads its config keys in one place
(:attr:`LectRunner.config_keys`)."""
import itertools
import logging
import os
import os.path as osp
import re
from contextlib import suppress
from typing import Optional, Tuple

from mmengine.dist import broadcast_object_list, get_dist_info, is_main_process
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .checkpoint_io import CheckpointNotFoundError
from .checkpoints import checkpoints_of
from .checks import CheckpointClassesHook, ConfigCheckHook
from .config_tree import ConfigError, ConfigMismatchError
from .loading import (RUNNER_OPT_OUT, load_state_dict_checked,
                      scope_pretrained_init, state_dict_of, unwrap_model)
from .preemption import (DEFAULT_STOP_SIGNALS, LectEpochBasedTrainLoop,
                         PreemptionHook, StopSignals)
from .resume import RESUME_SCHEDULE_CHOICES, follow_config
from .workdir import WorkDirInUseError, WorkDirLock
from .write_errors import DiskFullError, GuardedFileHandler, is_disk_full

#: mmengine's deprecation lines that its checkpoint saving logs (through
#: FileClient), which a user cannot act on: dropped from LectRunner's log.
_NOISE = re.compile(r'^"FileClient" will be deprecated'
                    r'|^"HardDiskBackend" is the alias of "LocalBackend"')


def _checked(key: str, value, check):
    """``value`` of the config key ``key``, if ``check`` takes it: ``bool``,
    a tuple of choices, or a function that raises (naming ``key``)."""
    if isinstance(check, tuple) and value not in check:
        raise ConfigMismatchError(
            f'{key}={value!r}: choose one of {", ".join(map(repr, check))}.')
    if check is bool and not isinstance(value, bool):
        raise ConfigError(f'{key}={value!r}: expected True or False.')
    if callable(check) and check is not bool:
        check(value)
    return value


def _claim_work_dir(work_dir: str, timestamp: str,
                    lock: bool) -> Tuple[Optional[WorkDirLock], str]:
    """Rank 0 takes the work-dir lock (if ``lock``) and creates the log
    folder ``<work_dir>/<timestamp>`` (``<timestamp>_1``... if it exists);
    every rank gets its name, or raises if the lock was taken (none is left
    waiting in a collective for a rank that stopped)."""
    held, error, name = None, None, None
    if get_dist_info()[0] == 0:
        try:
            held = WorkDirLock(work_dir).acquire() if lock else None
            for i in itertools.count():
                name = f'{timestamp}_{i}' if i else timestamp
                with suppress(FileExistsError):
                    os.mkdir(osp.join(work_dir, name))
                    break
        except WorkDirInUseError as exc:
            error = str(exc)
        except BaseException:  # a failed mkdir leaves no lock behind
            if held is not None:
                held.release()
            raise
    box = [error, name]
    broadcast_object_list(box, src=0)  # no-op on one process
    error, name = box
    if error is not None:
        raise WorkDirInUseError(error)
    return held, name


class _LectRunnerHook(Hook):
    """Writes the config copy once the other hooks' checks passed; raises a
    log write's error (which logging swallows) after the iteration or
    before the epoch it happened in; :meth:`LectRunner.release` after
    ``train``/``val``/``test``."""

    priority = 'LOWEST'

    def before_train(self, runner) -> None:
        runner._dump_due_config()

    before_val = before_test = before_train

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None) -> None:
        for handler in runner.logger.handlers:
            if isinstance(handler, GuardedFileHandler) and handler.error:
                raise handler.error

    def before_train_epoch(self, runner) -> None:
        self.after_train_iter(runner, None)

    def after_run(self, runner) -> None:
        runner.release()


@RUNNERS.register_module()
class LectRunner(Runner):
    """mmengine's ``Runner`` (same arguments) with what is local to its run
    (docs/architecture.md): its checkpoints' owner (:attr:`checkpoints`),
    strict loading, a locked work dir and log folder of its own, a log that
    raises a full disk's error, :meth:`release` after each loop, a
    ``LectEpochBasedTrainLoop`` and lect_mm's checking and stop hooks."""

    #: The top-level config keys it reads besides mmengine's, ``key:
    #: (default, check)``, read and checked into :attr:`settings` before
    #: anything is built (``lect_mm.cli`` counts them as read).
    config_keys = dict(
        load_from_strict=(True, bool),  # False: load what fits, warn
        resume_intact=(False, bool),  # --resume past a damaged latest
        lock_work_dir=(True, bool),
        log_dir_only=(False, bool),  # the config copy into the log folder
        stop_signals=(DEFAULT_STOP_SIGNALS, StopSignals),  # PreemptionHook
        resume_schedule=('config', RESUME_SCHEDULE_CHOICES))  # resume.py

    _training = False  # in train(): load_or_resume claims the folder
    _config_due = False  # the config copy to write into the work dir

    def __init__(self, *args, **kwargs):
        cfg = kwargs.get('cfg') or {}
        self.settings = {key: _checked(key, cfg.get(key, default), check)
                         for key, (default, check) in
                         self.config_keys.items()}
        try:
            super().__init__(*args, **kwargs)
            loop = self._train_loop
            if isinstance(loop, dict) and 'type' not in loop and \
                    loop.get('by_epoch', False):
                self._train_loop = dict(loop, type=LectEpochBasedTrainLoop)
                del self._train_loop['by_epoch']
            self.logger.handlers = [
                GuardedFileHandler.replacing(handler)
                if type(handler) is logging.FileHandler else handler
                for handler in self.logger.handlers]
            self.logger.addFilter(
                lambda record: not _NOISE.search(record.getMessage()))
            scope_pretrained_init(self.model)
            for hook in (ConfigCheckHook(), CheckpointClassesHook(),
                         PreemptionHook(self.settings['stop_signals']),
                         _LectRunnerHook()):
                if not any(isinstance(h, type(hook)) for h in self.hooks):
                    self.register_hook(hook)
            self.checkpoints = checkpoints_of(self)
        except BaseException:
            self.release_work_dir()
            raise

    def setup_env(self, env_cfg: dict) -> None:
        # called once the process group exists, before anything is written
        super().setup_env(env_cfg)
        self._work_dir_lock, self._timestamp = _claim_work_dir(
            self._work_dir, self._timestamp, self.settings['lock_work_dir'])

    def dump_config(self) -> None:
        """Dump the config into the log folder at once (``log_dir_only``),
        else into ``work_dir`` when training, validation or testing starts,
        its checks passed: a refused run leaves an earlier run's copy as it
        was, and the copy states what the run uses."""
        if not self.settings['log_dir_only']:
            self._config_due = True  # _LectRunnerHook.before_train...
        elif is_main_process():
            filename = osp.basename(self.cfg.filename) if \
                self.cfg.filename else f'{self.timestamp}.py'
            self.cfg.dump(osp.join(self.log_dir, filename))

    def _dump_due_config(self) -> None:
        if self._config_due:
            self._config_due = False
            super().dump_config()

    def release_work_dir(self) -> None:
        """Drop the work-dir lock."""
        lock = getattr(self, '_work_dir_lock', None)
        if lock is not None:
            lock.release()

    def release(self) -> None:
        """End the loops' persistent loader workers (else each waits torch's
        5 s join timeout), restore the signal handlers, drop the lock."""
        for loop in (self._train_loop, self._val_loop, self._test_loop):
            loader = getattr(loop, 'dataloader', None)
            iterator = getattr(loader, '_iterator', None)
            if hasattr(iterator, '_shutdown_workers'):
                iterator._shutdown_workers()
                loader._iterator = None
        for hook in self.hooks:
            if isinstance(hook, PreemptionHook):
                hook.stop.restore()
        self.release_work_dir()

    def train(self):
        self._training = True  # load_or_resume: a training's checkpoints
        try:
            return super().train()
        except OSError as error:
            if not is_disk_full(error):
                raise
            full = error if isinstance(error, DiskFullError) else \
                DiskFullError(error.filename or f'a file in {self.work_dir}',
                              error)
            full.add_note('The run stopped at this first failed write; '
                          f'{self.checkpoints.note()}: free some space, '
                          'then train again with --resume.')
            if full is error:
                raise
            raise full from error
        finally:
            self._training = False
            self.release()

    def load_or_resume(self) -> None:
        """mmengine's, with the latest intact checkpoint for ``--resume``;
        a training claims its folder first (:meth:`RunCheckpoints.claim`)."""
        if self._has_loaded:
            return
        resume_from = self._load_from if self._resume else None
        if self._resume and resume_from is None:
            resume_from = self.checkpoints.latest(
                self.settings['resume_intact'], self.logger)
            if resume_from is None:
                self.logger.warning(
                    f'--resume: nothing to resume in {self.work_dir} (no '
                    'last_checkpoint, no epoch_*.pth or iter_*.pth); '
                    'training starts from scratch.')
            else:
                self.logger.info(f'Resuming from {resume_from}.')
        elif resume_from is not None and '://' not in str(resume_from) \
                and not osp.exists(osp.expanduser(str(resume_from))):
            raise CheckpointNotFoundError(
                f'--resume {resume_from}: this checkpoint does not exist.')
        if self._training:
            self.checkpoints.claim(resume_from)
        if resume_from is not None:
            self.resume(resume_from)  # load_checkpoint sets _has_loaded
        elif self._load_from is not None and not self._resume:
            self.load_checkpoint(self._load_from)

    def load_checkpoint(self, filename: str, map_location='cpu',
                        strict: Optional[bool] = None,
                        revise_keys: list = [(r'^module\.', '')]):
        """Verified, loaded once (:meth:`RunCheckpoints.load`); on
        ``--resume``, the config's optimizer settings and schedule
        (:func:`~.resume.follow_config`); ``strict=None``: the config's
        ``load_from_strict``."""
        if strict is None:
            strict = self.settings['load_from_strict']
        resumed = bool(self._resume) and self._training
        checkpoint = self.checkpoints.load(filename, map_location, resumed)
        if resumed:
            follow_config(self, checkpoint, filename,
                          self.settings['resume_schedule'])
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        load_state_dict_checked(unwrap_model(self.model),
                                state_dict_of(checkpoint, revise_keys),
                                f'Checkpoint {filename}', strict,
                                RUNNER_OPT_OUT, self.logger)
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint
