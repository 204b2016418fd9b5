"""``LectRunner``: mmengine's ``Runner`` that loads checkpoints strictly and
verified, resumes only from intact files, and owns its work directory."""
import itertools
import logging
import os
import os.path as osp
from contextlib import suppress
from typing import Optional, Tuple

from mmengine.dist import broadcast_object_list, get_dist_info, master_only
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from lect_mm._warnings import silence_known_log_messages
from .checkpoint_hook import checkpoint_dir_of, last_checkpoint_note
from .checkpoint_io import (CheckpointNotFoundError, latest_checkpoint,
                            load_checkpoint_verified)
from .checks import CheckpointCheckHook, ConfigCheckHook
from .loading import (RUNNER_OPT_OUT, load_state_dict_checked,
                      scope_pretrained_init, state_dict_of, unwrap_model)
from .preemption import (DEFAULT_STOP_SIGNALS, LectEpochBasedTrainLoop,
                         PreemptionHook)
from .workdir import WorkDirInUseError, WorkDirLock
from .write_errors import DiskFullError, GuardedFileHandler, is_disk_full


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
    """Raises a log write's error (which logging swallows) after the
    iteration or before the epoch it happened in; :meth:`LectRunner.release`
    after ``train``/``val``/``test``."""

    priority = 'LOWEST'

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
    (docs/architecture.md): verified, strict checkpoint loading, a locked
    work dir, its own log folder, a log that raises a full disk's error,
    :meth:`release` when ``train``/``val``/``test`` returns, a
    ``LectEpochBasedTrainLoop`` for ``train_cfg = dict(by_epoch=True, ...)``
    and lect_mm's checking and preemption hooks. Its config keys:
    ``load_from_strict`` (True; False loads what fits, with a warning),
    ``resume_intact`` (False; ``--resume`` skips a damaged latest
    checkpoint), ``lock_work_dir`` (True), ``log_dir_only`` (False; the
    config copy goes into the log folder), ``stop_signals``
    (``PreemptionHook``), ``resume_schedule`` (``CheckpointCheckHook``)."""
    loads_plain_data = True  # load_checkpoint decodes: not the hooks again

    def __init__(self, *args, **kwargs):
        self._verified = {}  # what --resume found intact: not verified again
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
        # called once the process group exists, before anything is written
        super().setup_env(env_cfg)
        self._work_dir_lock, self._timestamp = _claim_work_dir(
            self._work_dir, self._timestamp,
            self.cfg.get('lock_work_dir', True))

    @master_only
    def dump_config(self) -> None:
        """Dump the config to ``work_dir`` (``log_dir_only``: log folder)."""
        if not self.cfg.get('log_dir_only', False):
            return super().dump_config()
        filename = osp.basename(self.cfg.filename) if self.cfg.filename \
            else f'{self.timestamp}.py'
        self.cfg.dump(osp.join(self.log_dir, filename))

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
        try:
            return super().train()
        except OSError as error:
            if not is_disk_full(error):
                raise
            full = error if isinstance(error, DiskFullError) else \
                DiskFullError(error.filename or f'a file in {self.work_dir}',
                              error)
            full.add_note('The run stopped at this first failed write; '
                          f'{last_checkpoint_note(self)}: free some space, '
                          'then train again with --resume.')
            if full is error:
                raise
            raise full from error
        finally:
            self.release()

    def load_or_resume(self) -> None:
        if self._has_loaded or not self._resume:
            return super().load_or_resume()  # load_from: load_checkpoint
        resume_from = self._load_from
        if resume_from is None:
            resume_from = latest_checkpoint(
                self.work_dir, bool(self.cfg.get('resume_intact', False)),
                self.logger, checkpoint_dir_of(self), self._verified)
            if resume_from is None:
                self.logger.warning(
                    f'--resume: nothing to resume in {self.work_dir} (no '
                    'last_checkpoint, no epoch_*.pth or iter_*.pth); '
                    'training starts from scratch.')
                return
            self.logger.info(f'Resuming from {resume_from}.')
        elif '://' not in str(resume_from) and not osp.exists(
                osp.expanduser(str(resume_from))):
            raise CheckpointNotFoundError(
                f'--resume {resume_from}: this checkpoint does not exist.')
        self.resume(resume_from)  # load_checkpoint sets _has_loaded

    def load_checkpoint(self, filename: str, map_location='cpu',
                        strict: Optional[bool] = None,
                        revise_keys: list = [(r'^module\.', '')]):
        """Verified; ``strict=None`` takes the config's load_from_strict."""
        if strict is None:
            strict = bool(self.cfg.get('load_from_strict', True))
        self.checkpoint_file = filename  # for hooks' messages
        verified, self._verified = self._verified, {}
        checkpoint = load_checkpoint_verified(filename, map_location,
                                              verified)
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        load_state_dict_checked(unwrap_model(self.model),
                                state_dict_of(checkpoint, revise_keys),
                                f'Checkpoint {filename}', strict,
                                RUNNER_OPT_OUT, self.logger)
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint
