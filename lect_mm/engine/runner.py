"""``LectRunner``: mmengine's ``Runner`` that loads checkpoints strictly and
verified, resumes only from intact files, and owns its work directory.

``configs/_base_/default_runtime.py`` selects it (``runner_type``), so
``tools/train.py``, ``tools/test.py`` and mmpretrain's own tools build it,
for lect_mm's models and for any other model trained with that runtime
config. What it adds is local to its run: nothing changes for other runners
in the process, and the signal handlers installed while ``train()`` runs
are put back when it returns. It reads six config keys besides the
``Runner``'s:

- ``load_from_strict`` (default True): ``load_from``, ``--resume`` and
  ``tools/test.py`` stop when the checkpoint does not fit the model
  (:mod:`~lect_mm.engine.loading`); False loads what fits, with a warning.
- ``resume_intact`` (default False, ``tools/train.py --resume-intact``):
  when the latest checkpoint is damaged, auto-resume takes the newest intact
  ``epoch_*.pth``/``iter_*.pth`` (newest in training progress: each
  checkpoint's own epoch and iteration) instead of stopping
  (:func:`~lect_mm.engine.checkpoint_io.latest_checkpoint`; a
  ``last_checkpoint`` naming a file outside the work dir is not followed).
- ``lock_work_dir`` (default True): hold a
  :class:`~lect_mm.engine.workdir.WorkDirLock` while the run uses the work
  directory (rank 0 only; every rank raises if it is taken).
  ``tools/test.py`` turns it off: testing a checkpoint of a running
  training in the same work dir is fine.
- ``log_dir_only`` (default False; ``tools/test.py`` sets it): the config
  copy goes into the run's own log folder, ``<work_dir>/<timestamp>/``,
  instead of ``<work_dir>/``, so the run writes nothing outside that folder.
  Every run's log folder is its own: a run started in the same second as
  another one in the same work dir gets ``<timestamp>_1`` (``_2`` ...).
- ``stop_signals`` (default ``['SIGTERM', 'SIGUSR1']``; None or ``[]``
  turns it off): the signals on which the training stops after the
  iteration in progress with a resumable checkpoint
  (:class:`~lect_mm.engine.preemption.PreemptionHook`).
- ``resume_schedule`` (default ``'config'``): what ``--resume`` does when
  the config's parameter schedule differs from the checkpoint's: go on
  with the config's, from where a run with it would be, or
  (``'checkpoint'``) with the checkpoint's
  (:class:`~lect_mm.engine.CheckpointCheckHook`).

A write that fails because the disk is full (the log file, a checkpoint)
stops the run at once with a :class:`~lect_mm.engine.write_errors.
DiskFullError` naming the file and the last intact checkpoint.
"""
import logging
import os
import os.path as osp
from typing import Optional

from mmengine.dist import broadcast_object_list, get_dist_info, master_only
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from lect_mm._warnings import silence_known_log_messages
from .checkpoint_checks import CheckpointCheckHook
from .checkpoint_hook import SafeCheckpointHook
from .checkpoint_io import (CheckpointError, CheckpointNotFoundError,
                            latest_checkpoint, load_checkpoint_verified)
from .config_check_hook import ConfigCheckHook
from .loading import (RUNNER_OPT_OUT, load_state_dict_checked,
                      scope_pretrained_init, state_dict_of, unwrap_model)
from .loops import epoch_loop_cfg
from .preemption import DEFAULT_STOP_SIGNALS, PreemptionHook
from .workdir import WorkDirInUseError, WorkDirLock
from .write_errors import DiskFullError, GuardedFileHandler, is_disk_full

#: ``--resume``'s name for :func:`~lect_mm.engine.checkpoint_io.
#: latest_checkpoint`, the one answer to "the latest intact checkpoint of
#: this work dir".
find_resume_checkpoint = latest_checkpoint


def _lock_work_dir(work_dir: str) -> Optional[WorkDirLock]:
    """Rank 0 takes the lock; every rank raises if it could not (no rank is
    left waiting in a collective for a rank that stopped)."""
    rank, world_size = get_dist_info()
    lock, error = None, None
    if rank == 0:
        try:
            lock = WorkDirLock(work_dir).acquire()
        except WorkDirInUseError as exc:
            error = str(exc)
    if world_size > 1:
        box = [error]
        broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise WorkDirInUseError(error)
    return lock


def _claim_log_dir(work_dir: str, timestamp: str) -> str:
    """Create the run's log folder, ``<work_dir>/<timestamp>``, or
    ``<timestamp>_1``, ``_2`` ... if that one exists; rank 0 creates it,
    every rank gets its name."""
    rank, world_size = get_dist_info()
    name = None
    if rank == 0:
        i = 0
        while True:
            name = timestamp if i == 0 else f'{timestamp}_{i}'
            try:
                os.mkdir(osp.join(work_dir, name))
                break
            except FileExistsError:
                i += 1
    if world_size > 1:
        box = [name]
        broadcast_object_list(box, src=0)
        name = box[0]
    return name


def _disk_full_error(runner, error: OSError) -> DiskFullError:
    """A full disk as a :class:`DiskFullError` naming the file, with a note
    naming the last intact checkpoint."""
    if not isinstance(error, DiskFullError):
        error = DiskFullError(error.filename or f'a file in {runner.work_dir}',
                              error)
    try:
        latest = latest_checkpoint(runner.work_dir, logger=runner.logger,
                                   checkpoint_dir=runner.checkpoint_dir())
    except CheckpointError as problem:
        error.add_note(f'The run stopped at this first failed write. '
                       f'{problem}')
        return error
    if latest is None:
        error.add_note('The run stopped at this first failed write, before '
                       'it had written a checkpoint.')
        return error
    error.add_note(
        f'The run stopped at this first failed write; its last checkpoint, '
        f'{latest}, is intact: free some space, then train again with '
        '--resume.')
    return error


class _LectRunnerHook(Hook):
    """The runner's own duties between hooks: a failed log write that was
    swallowed on its way up is raised after the iteration (or before the
    epoch) it happened in; ``after_run`` releases the run's resources
    (:meth:`LectRunner.release`)."""

    priority = 'LOWEST'

    def _raise_log_error(self, runner) -> None:
        for handler in runner.logger.handlers:
            error = getattr(handler, 'error', None)
            if isinstance(handler, GuardedFileHandler) and error is not None:
                raise error

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None) -> None:
        self._raise_log_error(runner)

    def before_train_epoch(self, runner) -> None:
        self._raise_log_error(runner)

    def after_run(self, runner) -> None:
        runner.release()


@RUNNERS.register_module()
class LectRunner(Runner):
    """mmengine's ``Runner`` (same arguments and config), plus what the
    module's documentation lists: verified and strict checkpoint loading
    (also for ``init_cfg=dict(type='Pretrained')``: :func:`~lect_mm.engine.
    loading.scope_pretrained_init`), ``--resume`` from the latest intact
    checkpoint only, a locked work dir and a log folder of its own, loader
    workers ended and the lock released when ``train``/``val``/``test``
    returns (and when ``train`` raises; after ``val``/``test`` raise, when
    the runner is collected), the log through a :class:`~lect_mm.engine.
    write_errors.GuardedFileHandler`, and these hooks if the config has
    none of their type: :class:`~lect_mm.engine.ConfigCheckHook`,
    :class:`~lect_mm.engine.CheckpointCheckHook` and
    :class:`~lect_mm.engine.PreemptionHook` (``stop_signals``;
    ``train_cfg = dict(by_epoch=True, ...)`` builds a
    :class:`~lect_mm.engine.LectEpochBasedTrainLoop`, which it needs).
    """

    def __init__(self, *args, **kwargs):
        if len(args) > 5:  # train_cfg given by position
            args = (*args[:5], epoch_loop_cfg(args[5]), *args[6:])
        elif 'train_cfg' in kwargs:
            kwargs['train_cfg'] = epoch_loop_cfg(kwargs['train_cfg'])
        # {path: (file identity, digest)} of the checkpoint --resume found
        # intact: its load does not verify it again
        self._verified = {}
        try:
            super().__init__(*args, **kwargs)
            self.logger.handlers = [
                GuardedFileHandler.replacing(handler)
                if type(handler) is logging.FileHandler else handler
                for handler in self.logger.handlers
            ]
            silence_known_log_messages(self.logger)
            scope_pretrained_init(self.model)
            stop_signals = self.cfg.get('stop_signals', DEFAULT_STOP_SIGNALS)
            for hook in (ConfigCheckHook(), CheckpointCheckHook(),
                         _LectRunnerHook(), PreemptionHook(stop_signals)):
                if not any(isinstance(h, type(hook)) for h in self.hooks):
                    self.register_hook(hook)
        except BaseException:
            self.release_work_dir()
            raise

    def setup_env(self, env_cfg: dict) -> None:
        # Called by Runner.__init__ once the process group exists and before
        # the log folder and the config copy are written.
        super().setup_env(env_cfg)
        self._work_dir_lock = None
        if self.cfg.get('lock_work_dir', True):
            self._work_dir_lock = _lock_work_dir(self._work_dir)
        self._timestamp = _claim_log_dir(self._work_dir, self._timestamp)

    @master_only
    def dump_config(self) -> None:
        """Dump the config to ``work_dir``, or to the run's log folder with
        ``log_dir_only``."""
        if not self.cfg.get('log_dir_only', False):
            return super().dump_config()
        filename = osp.basename(self.cfg.filename) if self.cfg.filename \
            else f'{self.timestamp}.py'
        self.cfg.dump(osp.join(self.log_dir, filename))

    def release_work_dir(self) -> None:
        """Drop the work-dir lock (done when train/val/test returns)."""
        lock = getattr(self, '_work_dir_lock', None)
        if lock is not None:
            lock.release()

    def release(self) -> None:
        """End the persistent workers of the built loops' data loaders (a
        later loop starts new ones), put back the stop-signal handlers and
        drop the work-dir lock: done when train/val/test returns, and when
        train raises.

        Left to the garbage collector, a runner in a reference cycle stops
        each loader worker only after torch's 5 s join timeout.
        """
        for loop in (self._train_loop, self._val_loop, self._test_loop):
            loader = getattr(loop, 'dataloader', None)
            iterator = getattr(loader, '_iterator', None)
            if hasattr(iterator, '_shutdown_workers'):
                iterator._shutdown_workers()
                loader._iterator = None
        for hook in self.hooks:
            if isinstance(hook, PreemptionHook):
                hook.restore()
        self.release_work_dir()

    def checkpoint_dir(self) -> str:
        """Where this run's checkpoints are: its
        :class:`SafeCheckpointHook`'s folder, else the work dir."""
        for hook in self.hooks:
            if isinstance(hook, SafeCheckpointHook):
                return hook.checkpoint_dir(self)
        return self.work_dir

    def train(self):
        try:
            return super().train()
        except OSError as error:
            if not is_disk_full(error):
                raise
            explained = _disk_full_error(self, error)
            if explained is error:
                raise
            raise explained from error
        finally:
            self.release()

    def load_or_resume(self) -> None:
        if self._has_loaded:
            return
        if self._resume and self._load_from is None:
            resume_from = latest_checkpoint(
                self.work_dir, bool(self.cfg.get('resume_intact', False)),
                self.logger, self.checkpoint_dir(), self._verified)
            if resume_from is None:
                self.logger.warning(
                    f'--resume: nothing to resume in {self.work_dir} (no '
                    'last_checkpoint, no epoch_*.pth or iter_*.pth); '
                    'training starts from scratch.')
                return
            self.logger.info(f'Resuming from {resume_from}.')
            self.resume(resume_from)
        elif self._resume:
            path = osp.expanduser(str(self._load_from))
            if '://' not in path and not osp.exists(path):
                raise CheckpointNotFoundError(
                    f'--resume {self._load_from}: this checkpoint does not '
                    'exist.')
            self.resume(self._load_from)
        elif self._load_from is not None:
            self.load_checkpoint(self._load_from)
        self._has_loaded = True

    def load_checkpoint(self,
                        filename: str,
                        map_location='cpu',
                        strict: Optional[bool] = None,
                        revise_keys: list = [(r'^module\.', '')]):
        """``Runner.load_checkpoint``; ``strict=None`` (the default) takes
        the config's ``load_from_strict`` (default True)."""
        if strict is None:
            strict = bool(self.cfg.get('load_from_strict', True))
        # for hooks' messages (CheckpointCheckHook)
        self.checkpoint_file = filename
        verified, self._verified = self._verified, {}
        checkpoint = load_checkpoint_verified(filename, map_location,
                                              verified)
        if not isinstance(checkpoint, dict):
            raise CheckpointError(
                f'Checkpoint {filename} holds a {type(checkpoint).__name__}, '
                'not a dict of weights.')
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        load_state_dict_checked(unwrap_model(self.model),
                                state_dict_of(checkpoint, revise_keys),
                                f'Checkpoint {filename}', strict,
                                RUNNER_OPT_OUT, self.logger)
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint
