"""``LectRunner``: mmengine's ``Runner`` that loads checkpoints strictly and
verified, resumes only from intact files, and owns its work directory.

``configs/_base_/default_runtime.py`` selects it (``runner_type``), so
``tools/train.py``, ``tools/test.py`` and mmpretrain's own tools build it,
for lect_mm's models and for any other model trained with that runtime
config. What it adds is local to its run: nothing changes for other runners
in the process. It reads three config keys besides the ``Runner``'s:

- ``load_from_strict`` (default True): ``load_from``, ``--resume`` and
  ``tools/test.py`` stop when the checkpoint does not fit the model
  (:mod:`~lect_mm.engine.loading`); False loads what fits, with a warning.
- ``resume_intact`` (default False, ``tools/train.py --resume-intact``):
  when the latest checkpoint is damaged, auto-resume takes the newest intact
  ``epoch_*.pth``/``iter_*.pth`` instead of stopping.
- ``lock_work_dir`` (default True): hold a
  :class:`~lect_mm.engine.workdir.WorkDirLock` while the run uses the work
  directory (rank 0 only; every rank raises if it is taken).
  ``tools/test.py`` turns it off: testing a checkpoint of a running
  training in the same work dir is fine.
"""
import os
import os.path as osp
import re
from typing import List, Optional

from mmengine.dist import broadcast_object_list, get_dist_info
from mmengine.model import is_model_wrapper
from mmengine.registry import RUNNERS, DefaultScope
from mmengine.runner import Runner

from lect_mm._warnings import silence_known_log_messages
from .checkpoint_io import (CheckpointError, CheckpointNotFoundError,
                            load_checkpoint_verified, verify_checkpoint_file)
from .errors import ConfigCheckHook
from .loading import RUNNER_OPT_OUT, load_state_dict_checked, state_dict_of
from .workdir import WorkDirInUseError, WorkDirLock

_RESUMABLE = re.compile(r'^(?:epoch|iter)_(\d+)\.pth$')


def resumable_checkpoints(work_dir: str) -> List[str]:
    """The ``epoch_N.pth``/``iter_N.pth`` files of ``work_dir``, highest N
    first (best checkpoints hold no optimizer state: not resumable)."""
    if not osp.isdir(work_dir):
        return []
    found = []
    for name in os.listdir(work_dir):
        match = _RESUMABLE.match(name)
        if match:
            found.append((int(match[1]), osp.join(work_dir, name)))
    return [path for _, path in sorted(found, reverse=True)]


def find_resume_checkpoint(work_dir: str,
                           take_intact: bool = False,
                           logger=None) -> Optional[str]:
    """The checkpoint that ``--resume`` (without a path) resumes from.

    The one ``last_checkpoint`` names (or, without that file, the highest
    ``epoch_N.pth``/``iter_N.pth``) if it is intact. If it is missing or
    damaged, the newest intact one is named in the error, or taken with
    ``take_intact``.

    Returns:
        str | None: The path; None when the work dir holds no checkpoint.

    Raises:
        CheckpointError: The latest checkpoint is damaged and
            ``take_intact`` is False, or no checkpoint is intact.
    """
    candidates = resumable_checkpoints(work_dir)
    pointer = osp.join(work_dir, 'last_checkpoint')
    latest, problem = None, None
    if osp.isfile(pointer):
        with open(pointer) as file:
            latest = file.read().strip() or None
        if latest is None:
            problem = f'The file {pointer} is empty.'
        elif '://' in latest:
            return latest  # a remote out_dir: its loader checks the file
        elif not osp.exists(latest) and osp.exists(
                osp.join(work_dir, osp.basename(latest))):
            latest = osp.join(work_dir, osp.basename(latest))  # dir moved
    elif candidates:
        latest = candidates[0]
    else:
        return None
    if latest is not None:
        try:
            verify_checkpoint_file(latest)
            return latest
        except CheckpointError as error:
            problem = f'The latest checkpoint is unusable: {error}'
    intact = None
    for path in candidates:
        if latest is not None and osp.abspath(path) == osp.abspath(latest):
            continue
        try:
            verify_checkpoint_file(path)
        except CheckpointError:
            continue
        intact = path
        break
    if intact is None:
        raise CheckpointError(
            f'Cannot resume in {work_dir}. {problem} No other intact '
            'checkpoint (epoch_*.pth, iter_*.pth) is there.')
    if not take_intact:
        raise CheckpointError(
            f'Cannot resume in {work_dir}. {problem} The newest intact '
            f'checkpoint is {intact}: resume from it with --resume-intact '
            f'(config: resume_intact = True) or --resume {intact}.')
    if logger is not None:
        logger.warning(f'{problem} Resuming from the newest intact '
                       f'checkpoint, {intact} (--resume-intact).')
    return intact


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


@RUNNERS.register_module()
class LectRunner(Runner):
    """mmengine's ``Runner`` (same arguments and config), plus:

    - checkpoints load verified (:mod:`~lect_mm.engine.checkpoint_io`) and
      strictly (``load_from_strict``); the model's weights are initialised
      in the ``lect_mm`` scope, where ``init_cfg=dict(type='Pretrained',
      ...)`` is :class:`~lect_mm.engine.StrictPretrainedInit`
      (``strict=False`` in it loads what fits);
    - the head, classes and data are checked before the first iteration
      (:class:`~lect_mm.engine.ConfigCheckHook`);
    - ``--resume`` without a path says when there is nothing to resume
      (a warning naming the work dir; training starts from scratch) and
      does not resume from a damaged checkpoint (``resume_intact``);
      ``--resume PATH`` with a missing PATH stops, naming it;
    - the work directory is locked from before anything is written in it
      until ``train``/``val``/``test`` returns (``lock_work_dir``);
    - persistent data-loader workers end when ``train``/``val``/``test``
      returns;
    - its log drops mmengine's FileClient deprecation lines.
    """

    def __init__(self, *args, **kwargs):
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self.release_work_dir()
            raise
        silence_known_log_messages(self.logger)
        if not any(isinstance(h, ConfigCheckHook) for h in self.hooks):
            self.register_hook(ConfigCheckHook())

    def _init_model_weights(self) -> None:
        with DefaultScope.overwrite_default_scope('lect_mm'):
            super()._init_model_weights()

    def setup_env(self, env_cfg: dict) -> None:
        # Called by Runner.__init__ once the process group exists and before
        # the log folder and the config copy are written.
        super().setup_env(env_cfg)
        self._work_dir_lock = None
        if self.cfg.get('lock_work_dir', True):
            self._work_dir_lock = _lock_work_dir(self._work_dir)

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

    def train(self):
        try:
            return super().train()
        finally:
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

    def load_or_resume(self) -> None:
        if self._has_loaded:
            return
        if self._resume and self._load_from is None:
            resume_from = find_resume_checkpoint(
                self.work_dir, bool(self.cfg.get('resume_intact', False)),
                self.logger)
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
        checkpoint = load_checkpoint_verified(filename, map_location)
        if not isinstance(checkpoint, dict):
            raise CheckpointError(
                f'Checkpoint {filename} holds a {type(checkpoint).__name__}, '
                'not a dict of weights.')
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        model = self.model.module if is_model_wrapper(
            self.model) else self.model
        load_state_dict_checked(model, state_dict_of(checkpoint, revise_keys),
                                f'Checkpoint {filename}', strict,
                                RUNNER_OPT_OUT, self.logger)
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint
