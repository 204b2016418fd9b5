"""``SafeCheckpointHook``: mmengine's ``CheckpointHook`` that never leaves a
partial checkpoint and never deletes the last good one."""
import os.path as osp
from contextlib import contextmanager
from typing import Optional

from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook
from mmpretrain.registry import HOOKS

from .checkpoint_io import (ATOMIC_BACKEND, LAST_CHECKPOINT, CheckpointError,
                            atomic_write, remove_stale_temporaries,
                            verify_checkpoint_file)
from .plain_state import from_plain, to_plain
from .workdir import is_inside, own_file

#: The message hub's entries that record a checkpoint's path (and
#: ``best_ckpt_<metric>`` with several ``save_best`` metrics): what each is.
RECORDED_PATHS = dict(
    best_ckpt='best checkpoint',
    last_ckpt='last checkpoint',
    stop_ckpt='checkpoint of a stopped run')


def _is_local(path) -> bool:
    return '://' not in str(path)


class _DeferredRemovals:
    """Stands in for the hook's file backend while mmengine's saving code
    runs: an existing file it checks for or removes (the previous best, the
    checkpoint beyond ``max_keep_ckpts``: mmengine deletes them *before*
    writing the new one) is reported absent and queued; the hook removes
    the queue after the new checkpoint is written."""

    def __init__(self, backend):
        self.backend = backend
        self.queued = []

    def isfile(self, path) -> bool:
        if path not in self.queued and (self.backend.isfile(path)
                                        or self.backend.isdir(path)):
            self.queued.append(path)
        return False

    isdir = remove = rmtree = isfile

    def __getattr__(self, name):
        return getattr(self.backend, name)


@HOOKS.register_module()
class SafeCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` (same arguments), made crash-safe.

    - Every checkpoint (epoch/iter, best) on a local ``out_dir`` is written
      by :class:`~lect_mm.engine.checkpoint_io.AtomicLocalBackend`:
      temporary file, fsync, rename, with a SHA-256 digest record, so a
      kill mid-write leaves no partial file under a checkpoint's name.
    - ``last_checkpoint`` is rewritten atomically, after the checkpoint.
    - The previous best checkpoint and the checkpoints beyond
      ``max_keep_ckpts`` are removed only after the new checkpoint has been
      written and read back intact (mmengine removes them before writing),
      so a crash during a save never leaves the run without a checkpoint.
    - Runtime state is saved as plain data (:mod:`~lect_mm.engine.
      plain_state`): the files load with ``torch.load(weights_only=True)``
      without lect_mm. A checkpoint loaded by a runner with this hook gets
      its mmengine objects back before the runner reads it (any runner:
      mmengine's ``Runner`` calls ``after_load_checkpoint`` before it
      restores the message hub).
    - Temporary files of writers that were killed are removed before
      training (``.NAME.PID.tmp`` whose process is gone).
    - :meth:`save_stop_checkpoint` writes the checkpoint of a run stopped
      by a signal inside an epoch (``iter_{N}.pth``), outside the
      ``max_keep_ckpts`` count; the next checkpoint replaces it.
    - It removes and replaces files of its own checkpoint folder
      (:meth:`checkpoint_dir`) only. The paths a resumed checkpoint records
      in its message hub (the best, last and stop checkpoints: absolute
      paths of the run that wrote it) are taken, before training, as this
      folder's files of the same name when they lie elsewhere (a copied
      work dir), or dropped with a warning when this folder has no such
      file (a run resumed from another work dir's checkpoint): another
      folder's best checkpoint is never removed, replaced or published.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._saves = 0  # checkpoints written by this process
        self._extra = None
        self._out_dir_final = False

    def checkpoint_dir(self, runner) -> str:
        """The folder this hook writes into, before and after
        ``before_train`` (mmengine's rule: ``out_dir/<work dir's name>``
        with ``out_dir`` set, else the work dir)."""
        if self._out_dir_final:
            return self.out_dir
        if self.out_dir is None or self.out_dir == runner.work_dir:
            return runner.work_dir
        name = osp.basename(runner.work_dir.rstrip(osp.sep))
        if _is_local(self.out_dir):
            return osp.join(self.out_dir, name)
        return f'{self.out_dir.rstrip("/")}/{name}'

    def before_train(self, runner) -> None:
        out_dir = self.out_dir if self.out_dir is not None else \
            runner.work_dir
        if (self.backend_args is None and self.file_client_args is None
                and _is_local(out_dir)):
            self.backend_args = dict(backend=ATOMIC_BACKEND)
        self._own_recorded_paths(runner)
        super().before_train(runner)
        self._out_dir_final = True
        if is_main_process() and _is_local(self.out_dir):
            for path in remove_stale_temporaries(self.out_dir):
                runner.logger.warning(
                    f'Removed {path}: a partial checkpoint left by a run '
                    'that was killed while writing it.')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        self._saves += 1
        if self._extra:
            checkpoint.update(self._extra)
        for key, value in list(checkpoint.items()):
            checkpoint[key] = to_plain(value)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        for key, value in list(checkpoint.items()):
            checkpoint[key] = from_plain(value)

    def _own_recorded_paths(self, runner) -> None:
        """Make the checkpoint paths that the message hub records (restored
        from a resumed checkpoint: the paths of the run that wrote it) this
        run's own: a path outside :meth:`checkpoint_dir` becomes the file of
        the same name there, or is dropped (with a log line either way)."""
        hub = runner.message_hub
        own = self.checkpoint_dir(runner)
        notes = []
        for key, recorded in list(hub.runtime_info.items()):
            what = RECORDED_PATHS.get(key)
            if what is None and key.startswith('best_ckpt_'):
                what = f'best checkpoint of {key[len("best_ckpt_"):]}'
            if what is None or not isinstance(recorded, str) or \
                    is_inside(recorded, own):
                continue
            path = own_file(recorded, own)
            if path is not None:
                hub.update_info(key, path)
                notes.append(f'its {what}, {recorded}, is taken as {path}, '
                             'the file of that name there')
            else:
                hub.pop_info(key)
                notes.append(f'its {what}, {recorded}, is left where it is: '
                             'this run neither removes nor replaces it')
        if notes:
            runner.logger.warning(
                'The resumed checkpoint names files outside this run\'s '
                f'checkpoint folder, {own} (it was written in another work '
                'dir, or this one was copied or moved): '
                f'{"; ".join(notes)}.')

    def _remove_outdated(self, runner, paths, written) -> None:
        """Remove ``paths`` once every checkpoint in ``written`` reads back
        intact; keep them all (and say so) otherwise."""
        paths = [p for p in paths if p not in written]
        if not paths or not is_main_process():
            return
        for path in written:
            if not _is_local(path):
                continue
            try:
                verify_checkpoint_file(path)
            except CheckpointError as error:
                runner.logger.error(
                    f'Kept {", ".join(map(str, paths))}: the new checkpoint '
                    f'does not read back intact ({error})')
                return
        backend = self.file_backend
        backend = getattr(backend, 'backend', backend)
        for path in paths:
            if not is_inside(path, self.out_dir):
                runner.logger.warning(
                    f'Kept {path}: it lies outside this run\'s checkpoint '
                    f'folder {self.out_dir}.')
                continue
            if backend.isfile(path):
                backend.remove(path)
            elif backend.isdir(path):
                backend.rmtree(path)  # deepspeed checkpoints are folders
            else:
                continue
            runner.logger.info(f'Removed the outdated checkpoint {path}.')

    def _kept_paths(self) -> set:
        """The checkpoints this hook keeps (max_keep_ckpts, best)."""
        kept = {
            self.file_backend.join_path(self.out_dir,
                                        self.filename_tmpl.format(step))
            for step in getattr(self, 'keep_ckpt_ids', ())
        }
        kept.add(getattr(self, 'best_ckpt_path', None))
        kept.update((getattr(self, 'best_ckpt_path_dict', None) or
                     {}).values())
        kept.discard(None)
        return kept

    def save_stop_checkpoint(self, runner, meta: dict,
                             extra: Optional[dict] = None) -> str:
        """Save a resumable checkpoint of the iteration a run stops after,
        ``iter_{N}.pth`` (``N = meta['iter']``) in ``out_dir``, as every
        checkpoint of this hook, with the optimizer and the schedulers;
        ``last_checkpoint`` then names it. It is not one of the
        ``max_keep_ckpts``: none of those is removed, and it is removed
        itself once a later checkpoint reads back intact. Every rank calls
        it; rank 0 writes.

        Args:
            runner (Runner): The runner, in ``train()``.
            meta (dict): The checkpoint's ``meta`` (``epoch``, ``iter``...).
            extra (dict, optional): More top-level entries.

        Returns:
            str: The checkpoint's path.
        """
        filename = f'iter_{meta["iter"]}.pth'
        path = self.file_backend.join_path(self.out_dir, filename)
        previous = runner.message_hub.get_info('stop_ckpt')
        runner.message_hub.update_info('stop_ckpt', path)
        self._extra = extra
        try:
            runner.save_checkpoint(
                self.out_dir,
                filename,
                self.file_client_args,
                save_optimizer=True,
                save_param_scheduler=True,
                meta=meta,
                by_epoch=False,
                backend_args=self.backend_args,
                **self.args)
        finally:
            self._extra = None
        if is_main_process():
            atomic_write(
                osp.join(runner.work_dir, LAST_CHECKPOINT),
                str(path).encode())
            if previous is not None and previous not in self._kept_paths():
                self._remove_outdated(runner, [previous], [path])
        return path

    # mmengine's hook saves in these three; each runs with removals deferred
    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        with self._removals_after_save(runner):
            super().after_train_iter(runner, batch_idx, data_batch, outputs)

    def after_train_epoch(self, runner) -> None:
        with self._removals_after_save(runner):
            super().after_train_epoch(runner)

    def after_val_epoch(self, runner, metrics) -> None:
        with self._removals_after_save(runner):
            super().after_val_epoch(runner, metrics)

    @contextmanager
    def _removals_after_save(self, runner):
        """Run mmengine's saving code with the files it removes (the
        checkpoint beyond ``max_keep_ckpts``, the previous best) queued;
        once it has saved, rewrite ``last_checkpoint`` atomically, and
        remove the queue (and the checkpoint of a stop) after the new
        checkpoints read back intact. An error while saving removes
        nothing."""
        hub = runner.message_hub
        stop_ckpt = hub.pop_info('stop_ckpt')
        saves = self._saves
        backend = self.file_backend
        deferred = self.file_backend = _DeferredRemovals(backend)
        try:
            yield
        except BaseException:
            if stop_ckpt is not None:
                hub.update_info('stop_ckpt', stop_ckpt)
            raise
        finally:
            self.file_backend = backend
        if self._saves == saves:  # nothing saved (ranks but 0 never save)
            if stop_ckpt is not None:
                hub.update_info('stop_ckpt', stop_ckpt)
            return
        if self.last_ckpt is not None:  # mmengine wrote it, not atomically
            atomic_write(
                osp.join(runner.work_dir, LAST_CHECKPOINT),
                str(self.last_ckpt).encode())
        outdated = list(deferred.queued)
        if stop_ckpt is not None and stop_ckpt != self.last_ckpt and \
                stop_ckpt not in self._kept_paths():
            outdated.append(stop_ckpt)
        written = {self.last_ckpt, getattr(self, 'best_ckpt_path', None)}
        written.update((getattr(self, 'best_ckpt_path_dict', None) or
                        {}).values())
        written.discard(None)
        self._remove_outdated(runner, outdated, sorted(written))
