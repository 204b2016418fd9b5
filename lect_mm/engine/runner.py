"""``LectRunner``: mmengine's ``Runner`` that loads checkpoints strictly and
verified, resumes only from intact files, and owns its work directory.

``configs/_base_/default_runtime.py`` selects it (``runner_type``), so
``tools/train.py``, ``tools/test.py`` and mmpretrain's own tools build it,
for lect_mm's models and for any other model trained with that runtime
config. What it adds is local to its run: nothing changes for other runners
in the process, and the signal handlers it installs while ``train()`` runs
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
  turns it off): on one of these signals the training finishes the
  iteration in progress (every rank the same one), writes a resumable
  checkpoint of it, ``iter_{N}.pth``, logs why it stopped and raises
  :class:`~lect_mm.engine.preemption.TrainingPreempted` (exit status 75);
  ``--resume`` goes on from that iteration (:mod:`~lect_mm.engine.
  preemption`).

- ``resume_schedule`` (default ``'config'``): what ``--resume`` does when
  the config's parameter schedule differs from the checkpoint's (e.g.
  ``--cfg-options train_cfg.max_epochs=N``): go on with the config's, from
  where a run with it would be, or (``'checkpoint'``) with the
  checkpoint's; either way a warning lists the differences
  (:class:`~lect_mm.engine.CheckpointCheckHook`, which also stops testing
  a checkpoint on data whose classes differ from those it was trained on).

A write that fails because the disk is full (the log file, a checkpoint)
stops the run at once with a :class:`~lect_mm.engine.write_errors.
DiskFullError` naming the file and the last intact checkpoint.
"""
import copy
import logging
import os
import os.path as osp
import signal
from typing import Optional

import torch
from mmengine.dist import (barrier, broadcast_object_list, gather_object,
                           get_dist_info, master_only)
from mmengine.registry import RUNNERS
from mmengine.runner import Runner
from torch.utils.data import DataLoader

from lect_mm._warnings import silence_known_log_messages
from .checkpoint_checks import CheckpointCheckHook
from .checkpoint_hook import SafeCheckpointHook
from .checkpoint_io import (CheckpointError, CheckpointNotFoundError,
                            latest_checkpoint, load_checkpoint_verified)
from .errors import ConfigCheckHook
from .loading import (RUNNER_OPT_OUT, load_state_dict_checked,
                      scope_pretrained_init, state_dict_of, unwrap_model)
from .loops import LectEpochBasedTrainLoop
from .preemption import (DEFAULT_STOP_SIGNALS, IgnoreStopSignals, StopSignals,
                         TrainingPreempted)
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


def _local_buffers(model) -> dict:
    return {
        name: buffer.detach().cpu().clone()
        for name, buffer in unwrap_model(model).named_buffers()
    }


@RUNNERS.register_module()
class LectRunner(Runner):
    """mmengine's ``Runner`` (same arguments and config), plus:

    - checkpoints load verified (:mod:`~lect_mm.engine.checkpoint_io`) and
      strictly (``load_from_strict``); the model's ``init_cfg=dict(
      type='Pretrained', ...)`` are built in the ``lect_mm`` scope, where
      the name is :class:`~lect_mm.engine.StrictPretrainedInit`
      (``strict=False`` in it loads what fits);
    - the head, classes and data are checked before the first iteration
      (:class:`~lect_mm.engine.ConfigCheckHook`), a loaded checkpoint's
      classes and, on resume, its schedule against the config's
      (:class:`~lect_mm.engine.CheckpointCheckHook`, ``resume_schedule``);
    - ``--resume`` without a path says when there is nothing to resume
      (a warning naming the work dir; training starts from scratch) and
      does not resume from a damaged checkpoint (``resume_intact``);
      ``--resume PATH`` with a missing PATH stops, naming it;
    - the work directory is locked from before anything is written in it
      until ``train``/``val``/``test`` returns (``lock_work_dir``);
    - persistent data-loader workers end when ``train``/``val``/``test``
      returns;
    - its log drops mmengine's FileClient deprecation lines;
    - its log folder is its own (``log_dir_only``: the config copy too);
    - ``train_cfg = dict(by_epoch=True, ...)`` builds a
      :class:`~lect_mm.engine.loops.LectEpochBasedTrainLoop`: a signal
      (``stop_signals``) stops the run after the iteration in progress
      with a resumable checkpoint, and ``--resume`` from it goes on inside
      the epoch;
    - a full disk stops the run at the first failed write (log or
      checkpoint) with a :class:`~lect_mm.engine.write_errors.
      DiskFullError` naming the file and the last intact checkpoint.
    """

    def __init__(self, *args, **kwargs):
        self._stop_signals = None
        self._loaded_checkpoint = None
        # {path: (file identity, digest)} of the checkpoint --resume found
        # intact: its load does not verify it again
        self._verified = {}
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self.release_work_dir()
            raise
        silence_known_log_messages(self.logger)
        scope_pretrained_init(self.model)
        for hook_type in (ConfigCheckHook, CheckpointCheckHook):
            if not any(isinstance(h, hook_type) for h in self.hooks):
                self.register_hook(hook_type())

    def setup_env(self, env_cfg: dict) -> None:
        # Called by Runner.__init__ once the process group exists and before
        # the log folder and the config copy are written.
        super().setup_env(env_cfg)
        self._work_dir_lock = None
        if self.cfg.get('lock_work_dir', True):
            self._work_dir_lock = _lock_work_dir(self._work_dir)
        self._timestamp = _claim_log_dir(self._work_dir, self._timestamp)

    def build_logger(self, *args, **kwargs):
        """``Runner.build_logger``; the log file is written through a
        :class:`~lect_mm.engine.write_errors.GuardedFileHandler` (a failed
        write raises once, instead of a report on stderr per line)."""
        logger = super().build_logger(*args, **kwargs)
        logger.handlers = [
            GuardedFileHandler.replacing(handler)
            if type(handler) is logging.FileHandler else handler
            for handler in logger.handlers
        ]
        return logger

    @master_only
    def dump_config(self) -> None:
        """Dump the config to ``work_dir``, or to the run's log folder with
        ``log_dir_only``."""
        if not self.cfg.get('log_dir_only', False):
            return super().dump_config()
        filename = osp.basename(self.cfg.filename) if self.cfg.filename \
            else f'{self.timestamp}.py'
        self.cfg.dump(osp.join(self.log_dir, filename))

    @staticmethod
    def build_dataloader(dataloader, seed=None, diff_rank_seed=False):
        """``Runner.build_dataloader``; the loader's worker processes ignore
        the stop signals (:class:`~lect_mm.engine.preemption.
        IgnoreStopSignals`), which would kill them."""
        loader = Runner.build_dataloader(
            dataloader, seed=seed, diff_rank_seed=diff_rank_seed)
        if isinstance(loader, DataLoader) and loader.num_workers > 0 and \
                not isinstance(loader.worker_init_fn, IgnoreStopSignals):
            loader.worker_init_fn = IgnoreStopSignals(loader.worker_init_fn)
        return loader

    def build_train_loop(self, loop):
        """``Runner.build_train_loop``; ``dict(by_epoch=True, ...)`` builds a
        :class:`~lect_mm.engine.loops.LectEpochBasedTrainLoop`."""
        if isinstance(loop, dict) and 'type' not in loop and loop.get(
                'by_epoch', False):
            loop = copy.deepcopy(loop)
            loop.pop('by_epoch')
            loop['type'] = LectEpochBasedTrainLoop
        return super().build_train_loop(loop)

    def release_work_dir(self) -> None:
        """Drop the work-dir lock (done when train/val/test returns)."""
        lock = getattr(self, '_work_dir_lock', None)
        if lock is not None:
            lock.release()

    def stop_loader_workers(self) -> None:
        """End the persistent workers of the built loops' data loaders (done
        when train/val/test returns; a later loop starts new ones).

        Left to the garbage collector, a runner in a reference cycle stops
        each worker only after torch's 5 s join timeout.
        """
        for loop in (self._train_loop, self._val_loop, self._test_loop):
            loader = getattr(loop, 'dataloader', None)
            iterator = getattr(loader, '_iterator', None)
            if hasattr(iterator, '_shutdown_workers'):
                iterator._shutdown_workers()
                loader._iterator = None

    def _finish(self) -> None:
        self.stop_loader_workers()
        self.release_work_dir()

    # ------------------------------------------------------------ stopping
    def _checkpoint_hook(self) -> Optional[SafeCheckpointHook]:
        for hook in self.hooks:
            if isinstance(hook, SafeCheckpointHook):
                return hook
        return None

    def checkpoint_dir(self) -> str:
        """Where this run's checkpoints are: its
        :class:`SafeCheckpointHook`'s folder, else the work dir."""
        hook = self._checkpoint_hook()
        return self.work_dir if hook is None else hook.checkpoint_dir(self)

    def _install_stop_signals(self) -> Optional[StopSignals]:
        """Install the handlers of ``stop_signals`` if this run can stop
        with a checkpoint; say so where it cannot."""
        stop = StopSignals(self.cfg.get('stop_signals', DEFAULT_STOP_SIGNALS))
        if not stop.signals or self._train_loop is None:
            return None
        names = ', '.join(sig.name for sig in stop.signals)
        missing = []
        if not isinstance(self.train_loop, LectEpochBasedTrainLoop):
            missing.append('an epoch-based train loop (train_cfg = dict('
                           'by_epoch=True, ...) or LectEpochBasedTrainLoop)')
        if self._checkpoint_hook() is None:
            missing.append('a SafeCheckpointHook (default_hooks.checkpoint)')
        if not missing and not stop.install():
            missing.append('to run in the main thread')
        if missing:
            self.logger.warning(
                f'stop_signals: {names} keep their usual effect in this run '
                f'(it ends without a checkpoint): stopping cleanly needs '
                f'{" and ".join(missing)}.')
            return None
        return stop

    def stop_if_requested(self, inner_iter: int) -> None:
        """Called by the train loop after each iteration (on every rank).

        Raises the error of a failed log write that was swallowed on its
        way up; when a rank has received a stop signal, saves the
        checkpoint of this iteration and raises
        :class:`~lect_mm.engine.preemption.TrainingPreempted`.

        Args:
            inner_iter (int): The iterations of the current epoch done; 0
                before an epoch (its predecessor and validation done).
        """
        for handler in self.logger.handlers:
            error = getattr(handler, 'error', None)
            if isinstance(handler, GuardedFileHandler) and error is not None:
                raise error
        stop = self._stop_signals
        if stop is None:
            return
        signum = stop.agreed()
        if not signum:
            return
        loader = self.train_dataloader
        signal_name = signal.Signals(signum).name
        name = signal_name
        if stop.received is None:
            name += ' (received by another rank)'
        meta = dict(
            epoch=self.epoch,
            iter=self.iter,
            inner_iter=inner_iter,
            epoch_length=len(loader),
            batch_size=loader.batch_size,
            world_size=self.world_size,
            stop_signal=signal_name)
        extra = None
        if self.world_size > 1:
            # DDP averages the BatchNorm statistics at the end of an epoch
            # only (SyncBuffersHook): until then each rank has its own.
            extra = dict(rank_buffers=gather_object(
                _local_buffers(self.model), dst=0))
        path = self._checkpoint_hook().save_stop_checkpoint(self, meta, extra)
        if stop.count > 1:  # more signals came while it stopped
            name += f' ({stop.count} signals received)'
        if inner_iter:
            where = (f'epoch {self.epoch + 1}, iteration {inner_iter} of '
                     f'{len(loader)}')
        else:
            where = f'before epoch {self.epoch + 1}'
        message = (
            f'{name}: stopped after iteration {self.iter} ({where}). '
            f'Saved {path}; train again with --resume to go on from there.')
        self.logger.warning(message)
        barrier()  # no rank leaves before rank 0 has written and logged
        raise TrainingPreempted(message, str(path), signal_name, self.iter)

    def _explain_write_error(self, error: OSError) -> OSError:
        """A full disk as a :class:`DiskFullError` naming the file, with a
        note naming the last intact checkpoint."""
        if not isinstance(error, DiskFullError):
            error = DiskFullError(
                error.filename or f'a file in {self.work_dir}', error)
        try:
            latest = latest_checkpoint(self.work_dir, logger=self.logger,
                                       checkpoint_dir=self.checkpoint_dir())
        except CheckpointError as problem:
            error.add_note(f'The run stopped at this first failed write. '
                           f'{problem}')
            return error
        if latest is None:
            error.add_note('The run stopped at this first failed write, '
                           'before it had written a checkpoint.')
            return error
        error.add_note(
            f'The run stopped at this first failed write; its last '
            f'checkpoint, {latest}, is intact: free some space, then train '
            'again with --resume.')
        return error

    def train(self):
        self._stop_signals = None
        try:
            self._stop_signals = self._install_stop_signals()
            return super().train()
        except OSError as error:
            if not is_disk_full(error):
                raise
            explained = self._explain_write_error(error)
            if explained is error:
                raise
            raise explained from error
        finally:
            if self._stop_signals is not None:
                self._stop_signals.restore()
            self._finish()

    def val(self):
        try:
            return super().val()
        finally:
            self._finish()

    def test(self):
        try:
            return super().test()
        finally:
            self._finish()

    def resume(self,
               filename: str,
               resume_optimizer: bool = True,
               resume_param_scheduler: bool = True,
               map_location='default') -> None:
        """``Runner.resume``; a checkpoint written inside an epoch (a run
        stopped by a signal) also resumes there: the train loop starts the
        epoch after the iterations it had done, and each rank gets back its
        own BatchNorm statistics."""
        self._loaded_checkpoint = None
        try:
            super().resume(filename, resume_optimizer, resume_param_scheduler,
                           map_location)
            checkpoint = self._loaded_checkpoint or {}
        finally:
            self._loaded_checkpoint = None
        meta = checkpoint.get('meta', {})
        if meta.get('inner_iter'):
            self._resume_inside_epoch(filename, meta,
                                      checkpoint.get('rank_buffers'))

    def _resume_inside_epoch(self, filename, meta, rank_buffers) -> None:
        loader = self.train_dataloader
        inner_iter = int(meta['inner_iter'])
        here = (len(loader), loader.batch_size, self.world_size)
        there = (meta.get('epoch_length'), meta.get('batch_size'),
                 meta.get('world_size'))
        where = (f'Checkpoint {filename} was written inside epoch '
                 f'{meta["epoch"] + 1}, after its iteration {inner_iter}')

        def processes(n):
            return f'{n} process' + ('' if n == 1 else 'es')

        if here != there:
            raise CheckpointError(
                f'{where} of {there[0]} ({processes(there[2])}, batch size '
                f'{there[1]}); this run has {here[0]} iterations per epoch '
                f'({processes(here[2])}, batch size {here[1]}). Resuming '
                'inside an epoch needs the same data, batch size and number '
                'of processes; resume from an epoch_*.pth checkpoint '
                'instead.')
        if not isinstance(self.train_loop, LectEpochBasedTrainLoop):
            raise CheckpointError(
                f'{where}; this run\'s train loop, '
                f'{type(self.train_loop).__name__}, cannot resume inside an '
                'epoch (LectEpochBasedTrainLoop can: train_cfg = dict('
                'by_epoch=True, ...)).')
        self.train_loop.start_epoch_at(inner_iter)
        if rank_buffers is not None and len(rank_buffers) == self.world_size:
            module = unwrap_model(self.model)
            with torch.no_grad():
                for name, value in rank_buffers[self.rank].items():
                    module.get_buffer(name).copy_(value)
        self.logger.info(
            f'{where} of {len(loader)} (stopped by '
            f'{meta.get("stop_signal", "a signal")}): the epoch goes on '
            f'from iteration {inner_iter + 1}.')

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
        # for resume(): where the checkpoint was written
        self._loaded_checkpoint = dict(
            meta=checkpoint.get('meta', {}),
            rank_buffers=checkpoint.get('rank_buffers'))
        load_state_dict_checked(unwrap_model(self.model),
                                state_dict_of(checkpoint, revise_keys),
                                f'Checkpoint {filename}', strict,
                                RUNNER_OPT_OUT, self.logger)
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint
