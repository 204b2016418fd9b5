"""``SafeCheckpointHook``: mmengine's ``CheckpointHook`` that never leaves a
partial checkpoint and never deletes the last good one; what a stopped run
says of its last checkpoint (:func:`last_checkpoint_note`)."""
import os.path as osp
import re
from contextlib import contextmanager
from typing import Optional

from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook
from mmpretrain.registry import HOOKS

from .checkpoint_io import (ATOMIC_BACKEND, LAST_CHECKPOINT, CheckpointError,
                            atomic_write, from_plain, latest_checkpoint,
                            remove_stale_temporaries, to_plain,
                            verify_checkpoint_file)
from .workdir import is_inside, own_file

#: The message hub's entries that record a checkpoint's path (and
#: ``best_ckpt_<metric>`` with several ``save_best`` metrics).
_RECORDED_PATH = re.compile(r'(best|last|stop)_ckpt(?:_(?P<metric>.+))?')


def _is_local(path) -> bool:
    return '://' not in str(path)


class _DeferredRemovals:
    """The hook's file backend while mmengine's saving code runs: a file it
    checks for or removes (before writing the new one) is reported absent
    and queued instead."""

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
    """mmengine's ``CheckpointHook`` (same arguments), made crash-safe:
    atomic, digested files (``AtomicLocalBackend``) and ``last_checkpoint``;
    outdated checkpoints removed only once the new one reads back intact;
    runtime state as plain data; files of its own folder only."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._saves = 0  # checkpoints written by this process
        self._extra = None
        self._out_dir_final = False

    def checkpoint_dir(self, runner) -> str:
        """The folder this hook writes into, also before ``before_train``
        (mmengine's rule: ``out_dir/<work dir's name>``, or the work dir)."""
        if self._out_dir_final or self.out_dir in (None, runner.work_dir):
            return self.out_dir or runner.work_dir
        name = osp.basename(runner.work_dir.rstrip(osp.sep))
        if _is_local(self.out_dir):
            return osp.join(self.out_dir, name)
        return f'{self.out_dir.rstrip("/")}/{name}'

    def before_train(self, runner) -> None:
        if (self.backend_args is None and self.file_client_args is None
                and _is_local(self.out_dir or runner.work_dir)):
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
        checkpoint.update(self._extra or {})
        checkpoint.update({k: to_plain(v) for k, v in checkpoint.items()})

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not getattr(runner, 'loads_plain_data', False):  # mmengine's
            checkpoint.update(from_plain(checkpoint))

    def _own_recorded_paths(self, runner) -> None:
        """A checkpoint path of a resumed message hub outside this folder
        becomes the file of that name here, or is dropped, with a warning."""
        hub = runner.message_hub
        own = self.checkpoint_dir(runner)
        notes = []
        for key, recorded in list(hub.runtime_info.items()):
            match = _RECORDED_PATH.fullmatch(key)
            if match is None or not isinstance(recorded, str) or \
                    is_inside(recorded, own):
                continue
            what = f'{match[1]} checkpoint' + (
                f' of {match["metric"]}' if match['metric'] else '')
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

    def _best_paths(self) -> set:
        by_metric = getattr(self, 'best_ckpt_path_dict', None) or {}
        return {getattr(self, 'best_ckpt_path', None),
                *by_metric.values()} - {None}

    def _remove_outdated(self, runner, paths, written) -> None:
        """Remove ``paths`` of this folder, but those kept (best,
        ``max_keep_ckpts``), once ``written`` read back intact."""
        kept = self._best_paths() | set(written) | {
            self.file_backend.join_path(self.out_dir,
                                        self.filename_tmpl.format(step))
            for step in getattr(self, 'keep_ckpt_ids', ())
        }
        paths = [p for p in paths if p is not None and p not in kept]
        if not paths or not is_main_process():
            return
        try:
            for path in filter(_is_local, written):
                verify_checkpoint_file(path)
        except CheckpointError as error:
            runner.logger.error(
                f'Kept {", ".join(map(str, paths))}: the new checkpoint '
                f'does not read back intact ({error})')
            return
        backend = self.file_backend
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

    def save_stop_checkpoint(self, runner, meta: dict,
                             extra: Optional[dict] = None) -> str:
        """Save ``iter_{meta['iter']}.pth``, the resumable checkpoint of a
        stopped run (with ``extra`` entries), outside ``max_keep_ckpts``,
        removed once a later one reads back intact; return its path. Every
        rank calls it."""
        filename = f'iter_{meta["iter"]}.pth'
        path = self.file_backend.join_path(self.out_dir, filename)
        previous = runner.message_hub.get_info('stop_ckpt')
        runner.message_hub.update_info('stop_ckpt', path)
        self._extra = extra
        try:
            runner.save_checkpoint(
                self.out_dir, filename, self.file_client_args,
                save_optimizer=True, save_param_scheduler=True, meta=meta,
                by_epoch=False, backend_args=self.backend_args, **self.args)
        finally:
            self._extra = None
        if is_main_process():
            atomic_write(osp.join(runner.work_dir, LAST_CHECKPOINT),
                         str(path).encode())
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
        """Run mmengine's saving code with its removals queued; after a save,
        rewrite ``last_checkpoint`` atomically and remove the queue and the
        stop checkpoint."""
        hub = runner.message_hub
        stop_ckpt = hub.pop_info('stop_ckpt')  # not recorded in the new one
        saves, saved = self._saves, False
        backend = self.file_backend
        deferred = self.file_backend = _DeferredRemovals(backend)
        try:
            yield
            saved = self._saves > saves  # ranks but 0 never save
        finally:
            self.file_backend = backend
            if not saved and stop_ckpt is not None:
                hub.update_info('stop_ckpt', stop_ckpt)
        if not saved:
            return
        if self.last_ckpt is not None:  # mmengine wrote it, not atomically
            atomic_write(osp.join(runner.work_dir, LAST_CHECKPOINT),
                         str(self.last_ckpt).encode())
        written = (self._best_paths() | {self.last_ckpt}) - {None}
        self._remove_outdated(runner, deferred.queued + [stop_ckpt],
                              sorted(written))


def checkpoint_dir_of(runner) -> Optional[str]:
    """Its ``SafeCheckpointHook``'s folder (None: the work dir)."""
    for hook in getattr(runner, 'hooks', ()):
        if isinstance(hook, SafeCheckpointHook):
            return hook.checkpoint_dir(runner)
    return None


def last_checkpoint_note(runner) -> str:
    """What a run stopped by an error says of its last checkpoint."""
    try:
        latest = latest_checkpoint(runner.work_dir,
                                   checkpoint_dir=checkpoint_dir_of(runner))
    except CheckpointError as problem:
        return f'none of its checkpoints is resumable as it is ({problem})'
    if latest is None:
        return 'no checkpoint was written before it stopped'
    return f'its last checkpoint, {latest}, is intact'
