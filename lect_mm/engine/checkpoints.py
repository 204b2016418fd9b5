"""The one owner of a run's checkpoints, :class:`RunCheckpoints`, and the
hook that saves through it, :class:`SafeCheckpointHook`. The file format
(atomic, digested, plain data) is :mod:`.checkpoint_io`'s."""
import logging
import os
import os.path as osp
import re
from collections import deque
from contextlib import suppress
from typing import List, NamedTuple, Optional

import torch
from mmengine.dist import broadcast_object_list, is_main_process
from mmengine.fileio import get_file_backend
from mmengine.hooks import CheckpointHook
from mmengine.logging import print_log
from mmpretrain.registry import HOOKS

from .checkpoint_io import (ATOMIC_BACKEND, CheckpointError, atomic_write,
                            from_plain, has_plain, read_checkpoint,
                            read_verified, remove_stale_temporaries, to_plain,
                            verify_checkpoint_file)
from .config_tree import names

LAST_CHECKPOINT = 'last_checkpoint'  # mmengine's pointer file in a work dir
STOP_TEMPLATE = 'iter_{}.pth'  # a stopped run's checkpoint (PreemptionHook)
#: What :attr:`RunCheckpoints.loaded` does not keep of a loaded checkpoint.
_BULK = ('state_dict', 'optimizer', 'param_schedulers', 'message_hub')
#: The message hub's entries that record a checkpoint's path (and
#: ``best_ckpt_<metric>`` with several ``save_best`` metrics).
_RECORDED_PATH = re.compile(r'(best|last|stop)_ckpt(?:_(?P<metric>.+))?')


def _is_local(path) -> bool:
    return '://' not in str(path)


def is_inside(path: str, directory: str) -> bool:
    """Whether ``path`` lies in ``directory`` or below; local paths with
    symbolic links resolved, URLs (``s3://``) as text."""
    path, directory = os.fspath(path), os.fspath(directory)
    if not (_is_local(path) and _is_local(directory)):
        return path.startswith(directory.rstrip('/') + '/')
    directory = osp.realpath(directory)
    return osp.commonpath([osp.realpath(path), directory]) == directory


def own_file(path: str, directory: str) -> Optional[str]:
    """``path`` if it lies in ``directory``, else the file of that name in
    ``directory`` if there is one (a copied or moved work dir), else None."""
    if is_inside(path, directory):
        return path
    same_name = osp.join(directory, osp.basename(os.fspath(path)))
    return same_name if _is_local(directory) and osp.isfile(same_name) \
        else None


def optimizer_types(optim_wrapper):
    """The class name of ``optim_wrapper``'s optimizer, or ``{name: class
    name}`` of an ``OptimWrapperDict``'s (what a checkpoint records)."""
    if hasattr(optim_wrapper, 'optim_wrappers'):
        return {name: type(wrapper.optimizer).__name__
                for name, wrapper in optim_wrapper.items()}
    return type(optim_wrapper.optimizer).__name__


class CheckpointConflictError(CheckpointError):
    """A run would overwrite or remove checkpoints it did not write."""


class Loaded(NamedTuple):
    """A loaded checkpoint: its path, whether ``--resume`` loaded it, and
    its entries but the weights, optimizer, schedulers and hub."""
    path: str
    resumed: bool
    entries: dict


class RunCheckpoints:
    """A run's checkpoints: their folder (the hook's ``out_dir/<work dir's
    name>``, else the work dir), the resumable ones (by the hook's
    ``filename_tmpl``, and ``iter_N.pth`` of a stop), ``last_checkpoint``,
    the latest intact one, loading (:attr:`loaded`), saving and which
    files a run may replace (:meth:`claim`)."""

    def __init__(self, work_dir: str, hook=None) -> None:
        self.work_dir = work_dir
        out_dir = getattr(hook, 'out_dir', None)
        if out_dir in (None, work_dir):
            self.folder = work_dir
        else:  # mmengine's rule for a hook's out_dir
            name = osp.basename(work_dir.rstrip(osp.sep))
            self.folder = osp.join(out_dir, name) if _is_local(out_dir) \
                else f'{out_dir.rstrip("/")}/{name}'
        names_ = [re.escape(t).replace(re.escape('{}'), r'\d+') for t in (
            getattr(hook, 'filename_tmpl', 'epoch_{}.pth'), STOP_TEMPLATE)]
        self._template = re.compile(names_[0])  # what saving rewrites
        self._resumable = re.compile('|'.join(sorted(set(names_))))
        self._best = re.compile(f'best_.+_(?:{self._resumable.pattern})')
        args = dict(backend_args=getattr(hook, 'backend_args', None),
                    file_client_args=getattr(hook, 'file_client_args', None))
        if args == dict(backend_args=None, file_client_args=None) and \
                _is_local(self.folder):
            args['backend_args'] = dict(backend=ATOMIC_BACKEND)
        self.save_args = args
        self.backend = get_file_backend(
            self.folder, backend_args=args['backend_args'])
        self.pointer = osp.join(work_dir, LAST_CHECKPOINT)
        self.loaded: Optional[Loaded] = None
        self._read = None  # (path, (bytes, digest)) that latest() verified

    def join(self, filename: str) -> str:
        return self.backend.join_path(self.folder, filename)

    # ------------------------------------------------------------ finding
    @staticmethod
    def progress(path: str) -> Optional[tuple]:
        """``(iteration, epoch)`` from a checkpoint's meta (its tensors are
        not read), or None if it cannot be read."""
        try:
            meta = torch.load(path, map_location='cpu', mmap=True)['meta']
            return int(meta['iter']), int(meta['epoch'])
        except Exception:
            return None

    def _files(self, pattern) -> List[str]:
        if not (_is_local(self.folder) and osp.isdir(self.folder)):
            return []
        return [osp.join(self.folder, name)
                for name in sorted(os.listdir(self.folder))
                if pattern.fullmatch(name)]

    def resumable(self) -> List[str]:
        """The resumable checkpoints of the folder (best ones have no
        optimizer state), newest in training progress first (never by a
        name's number), unreadable ones last."""
        found = {p: self.progress(p) for p in self._files(self._resumable)}
        return sorted(found, reverse=True, key=lambda p: (
            found[p] is not None, found[p] or (0, 0)))

    def read_pointer(self, logger='current') -> Optional[str]:
        """The checkpoint ``last_checkpoint`` names (None without that file;
        :class:`CheckpointError` if it is empty). A path outside the work
        dir and the folder (a copied work dir) is not followed: the file of
        that name in the folder is taken if there is one, with a warning."""
        if not osp.isfile(self.pointer):
            return None
        with open(self.pointer) as file:
            recorded = file.read().strip()
        if not recorded:
            raise CheckpointError(f'The file {self.pointer} is empty.')
        if is_inside(recorded, self.work_dir) or \
                is_inside(recorded, self.folder):
            return recorded
        path = own_file(recorded, self.folder)
        folder = '' if self.folder == self.work_dir else \
            f', and its checkpoint folder, {self.folder}'
        taken = f'taking {path}, the file of that name in this work dir' if \
            path else (f'this work dir has no {osp.basename(recorded)} (to '
                       f'resume from it, pass --resume {recorded})')
        print_log(f'{self.pointer} names {recorded}, outside this work '
                  f'dir, {self.work_dir}{folder} (a copied or moved work '
                  f'dir?): not followed; {taken}.', logger, logging.WARNING)
        return path

    def latest(self, take_intact: bool = False,
               logger='current') -> Optional[str]:
        """What ``--resume`` takes: the file ``last_checkpoint`` names, else
        the newest resumable one (None: none). A missing or damaged one
        raises, naming the newest intact one (taken with ``take_intact``)."""
        candidates = []
        try:
            latest = self.read_pointer(logger)
        except CheckpointError as error:
            latest, problem = None, str(error)
        else:
            if latest is not None and not _is_local(latest):
                return latest  # a remote out_dir: its loader checks the file
            candidates = [] if latest else self.resumable()
            latest = latest or next(iter(candidates), None)
            if latest is None:
                return None
            try:
                return self._intact(latest)
            except CheckpointError as error:
                problem = f'The latest checkpoint is unusable: {error}'
        newest = None
        for path in candidates or self.resumable():
            if latest is None or osp.abspath(path) != osp.abspath(latest):
                with suppress(CheckpointError):
                    newest = self._intact(path)
                    break
        where = f'Cannot resume in {self.work_dir}. {problem}'
        if newest is None:
            raise CheckpointError(
                f'{where} No other intact checkpoint (epoch_*.pth, '
                'iter_*.pth) is there.')
        if not take_intact:
            raise CheckpointError(
                f'{where} The newest intact checkpoint is {newest}: resume '
                'from it with --resume-intact (config: resume_intact = True) '
                f'or --resume {newest}.')
        print_log(f'{problem} Resuming from the newest intact checkpoint, '
                  f'{newest} (--resume-intact).', logger, logging.WARNING)
        return newest

    def _intact(self, path: str) -> str:
        self._read = (path, read_verified(path))  # for load()
        return path

    def note(self) -> str:
        """What a run stopped by an error says of its last checkpoint."""
        try:
            latest = self.latest()
        except CheckpointError as problem:
            return f'none of its checkpoints is resumable as it is ({problem})'
        finally:
            self._read = None
        if latest is None:
            return 'no checkpoint was written before it stopped'
        return f'its last checkpoint, {latest}, is intact'

    # ------------------------------------------------------------ loading
    def load(self, filename: str, map_location=None,
             resumed: bool = False) -> dict:
        """The checkpoint at ``filename``, read once, verified and decoded
        (:func:`read_checkpoint`; the bytes :meth:`latest` verified are not
        read again), kept in :attr:`loaded` for the hooks."""
        read, self._read = self._read, None
        checkpoint = read_checkpoint(
            filename, map_location,
            read[1] if read and read[0] == filename else None)
        self.loaded = Loaded(str(filename), resumed, {
            k: v for k, v in checkpoint.items() if k not in _BULK})
        return checkpoint

    # ------------------------------------------- what a run may replace
    def claim(self, resume_from: Optional[str] = None) -> None:
        """Raise :class:`CheckpointConflictError` (rank 0 decides) before a
        training overwrites checkpoints it did not write: any in the folder,
        unless it resumes one of them; then intact ones of more training
        progress named as its saves are (a branch from an earlier one)."""
        problem = [self._conflict(resume_from) if is_main_process() else None]
        broadcast_object_list(problem, src=0)  # no-op on one process
        if problem[0] is not None:
            raise CheckpointConflictError(problem[0])

    def _conflict(self, resume_from: Optional[str]) -> Optional[str]:
        files = sorted(set(self._files(self._resumable))
                       | set(self._files(self._best)))
        where = f'work dir {self.work_dir}' if self.folder == self.work_dir \
            else f'the checkpoint folder {self.folder}'
        never = ('would overwrite or remove: a run never destroys '
                 'checkpoints it did not write.')
        if resume_from is None or not is_inside(resume_from, self.folder):
            listing = names([osp.basename(p) for p in files], 6, str)
            if not files:
                return None
            if resume_from is None:
                return (f'{where[0].upper()}{where[1:]} holds the '
                        f'checkpoints of an earlier run ({listing}), which '
                        f'this run {never} To go on with that run, add '
                        '--resume; to start a new one, pass another '
                        '--work-dir (or move those files away).')
            return (f'--resume {resume_from}: {where} holds the checkpoints '
                    f'of another run ({listing}), which this run {never} '
                    'Pass another --work-dir.')
        done = self.progress(resume_from)
        later = [(p, q) for p, q in zip(files, map(self.progress, files))
                 if done and (q or done) > done]
        if not any(self._template.fullmatch(osp.basename(p)) and
                   _reads_back(p) for p, _ in later):
            return None  # a damaged one: --resume-intact goes past it
        base = osp.basename(resume_from)
        listing = names([f'{osp.basename(p)} (iteration {it})'
                         for p, (it, _) in later], 6, str)
        return (f'--resume {resume_from}: {where} holds checkpoints beyond '
                f'it ({listing}), which a run from {base} {never} To branch '
                f'from {base}, pass another --work-dir (it is read where it '
                'is); to go on from the newest checkpoint, --resume without a '
                'path.')

    # ------------------------------------------------------------- saving
    def save(self, runner, filename: str, replaces=(), resumable=True,
             **kwargs) -> str:
        """``runner.save_checkpoint`` of ``filename`` with the optimizer's
        type (every rank calls it); then ``last_checkpoint`` names it
        (``resumable``) and ``replaces`` are removed once it reads back."""
        meta = dict(kwargs.pop('meta', None) or {})
        if kwargs.get('save_optimizer', True):
            meta['optimizer_type'] = optimizer_types(runner.optim_wrapper)
        runner.save_checkpoint(self.folder, filename, meta=meta,
                               **self.save_args, **kwargs)
        path = self.join(filename)
        if not is_main_process():
            return path
        if resumable:
            atomic_write(self.pointer, str(path).encode())
        outdated = [p for p in dict.fromkeys(replaces) if p and p != path]
        if outdated and _is_local(path) and not _reads_back(
                path, runner.logger, f'Kept {", ".join(outdated)}: the new '
                'checkpoint does not read back intact'):
            return path
        for old in outdated:
            if not is_inside(old, self.folder):
                runner.logger.warning(
                    f"Kept {old}: it lies outside this run's checkpoint "
                    f'folder {self.folder}.')
                continue
            if self.backend.isfile(old):
                self.backend.remove(old)
            elif self.backend.isdir(old):
                self.backend.rmtree(old)  # deepspeed checkpoints are folders
            else:
                continue
            runner.logger.info(f'Removed the outdated checkpoint {old}.')
        return path


def _reads_back(path: str, logger=None, kept: str = '') -> bool:
    """Whether ``path`` reads back intact; if not, ``logger`` says why."""
    try:
        verify_checkpoint_file(path)
        return True
    except CheckpointError as error:
        if logger is not None:
            logger.error(f'{kept} ({error})')
        return False


def checkpoints_of(runner) -> RunCheckpoints:
    """The run's :class:`RunCheckpoints`: ``LectRunner``'s own, else (under
    mmengine's ``Runner``) one for its work dir and checkpoint hook."""
    owner = getattr(runner, 'checkpoints', None)
    if isinstance(owner, RunCheckpoints):
        return owner
    hook = next((h for h in getattr(runner, 'hooks', ())
                 if isinstance(h, CheckpointHook)), None)
    return RunCheckpoints(runner.work_dir, hook)


@HOOKS.register_module()
class SafeCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` (same arguments, file names and hub
    records) saving through :class:`RunCheckpoints`: atomic, digested files;
    outdated ones (``max_keep_ckpts``, the previous best, a stop's) removed
    once the new one reads back; plain data; its own folder only."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.checkpoints: Optional[RunCheckpoints] = None  # before_train's
        self.keep_ckpt_ids = deque()
        self._extra = None  # entries of the next checkpoint (a stop's)
        self._outdated = []  # removed once the next checkpoint is intact

    def before_train(self, runner) -> None:
        own = self.checkpoints = checkpoints_of(runner)
        hub = runner.message_hub
        self._own_recorded_paths(runner)
        runner.logger.info(f'Checkpoints will be saved to {own.folder}.')
        if self.save_best is not None and len(self.key_indicators) == 1:
            self.best_ckpt_path = hub.get_info('best_ckpt')
        elif self.save_best is not None:
            self.best_ckpt_path_dict = {
                key: hub.get_info(f'best_ckpt_{key}')
                for key in self.key_indicators}
        if self.max_keep_ckpts > 0:
            ids = list(hub.get_info('keep_ckpt_ids') or [])
            cut = max(0, len(ids) - self.max_keep_ckpts)
            self._outdated = [own.join(self.filename_tmpl.format(i))
                              for i in ids[:cut]]
            self.keep_ckpt_ids = deque(ids[cut:], self.max_keep_ckpts)
            hub.update_info('keep_ckpt_ids', ids[cut:])
        if is_main_process() and _is_local(own.folder):
            for path in remove_stale_temporaries(own.folder):
                runner.logger.warning(
                    f'Removed {path}: a partial checkpoint left by a run '
                    'that was killed while writing it.')

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        if not self.by_epoch and (
                self.every_n_train_iters(runner, self.interval,
                                         self.save_begin)
                or self.save_last and self.is_last_train_iter(runner)):
            self._save(runner, runner.iter + 1,
                       dict(epoch=runner.epoch, iter=runner.iter + 1),
                       'iterations')

    def after_train_epoch(self, runner) -> None:
        if self.by_epoch and (
                self.every_n_epochs(runner, self.interval, self.save_begin)
                or self.save_last and self.is_last_train_epoch(runner)):
            self._save(runner, runner.epoch + 1,
                       dict(epoch=runner.epoch + 1, iter=runner.iter),
                       'epochs')

    def after_val_epoch(self, runner, metrics) -> None:
        if not metrics:
            runner.logger.warning(
                'Since `metrics` is an empty dict, the behavior to save '
                'the best checkpoint will be skipped in this evaluation.')
        elif self.save_best:
            self._save_best(runner, metrics)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint.update(self._extra or {})
        checkpoint.update({k: to_plain(v) for k, v in checkpoint.items()})

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if has_plain(checkpoint):  # mmengine's loader: not decoded yet
            checkpoint.update(from_plain(checkpoint))

    def _best_paths(self) -> set:
        by_metric = getattr(self, 'best_ckpt_path_dict', None) or {}
        return {getattr(self, 'best_ckpt_path', None),
                *by_metric.values()} - {None}

    def _save(self, runner, step: int, meta: dict, unit: str = '') -> None:
        """mmengine's ``_save_checkpoint_with_step``: the checkpoint of
        ``step``, and ``max_keep_ckpts``."""
        if unit:
            runner.logger.info(f'Saving checkpoint at {step} {unit}')
        hub, own = runner.message_hub, self.checkpoints
        outdated, self._outdated = self._outdated, []
        keep = self.keep_ckpt_ids
        if self.max_keep_ckpts > 0 and (not keep or keep[-1] != step):
            if len(keep) == self.max_keep_ckpts:
                outdated.append(own.join(self.filename_tmpl.format(
                    keep.popleft())))
            keep.append(step)
            hub.update_info('keep_ckpt_ids', list(keep))
        filename = self.filename_tmpl.format(step)
        self.last_ckpt = own.join(filename)
        hub.update_info('last_ckpt', self.last_ckpt)
        outdated.append(hub.pop_info('stop_ckpt'))  # not in the new one
        kept = self._best_paths() | {
            own.join(self.filename_tmpl.format(i)) for i in keep}
        own.save(runner, filename, [p for p in outdated if p not in kept],
                 save_optimizer=self.save_optimizer,
                 save_param_scheduler=self.save_param_scheduler, meta=meta,
                 by_epoch=self.by_epoch, **self.args)

    def _save_best(self, runner, metrics: dict) -> None:
        """mmengine's ``_save_best_checkpoint``: a new best replaces the
        previous one once it is written intact."""
        step = runner.epoch if self.by_epoch else runner.iter
        unit = 'epoch' if self.by_epoch else 'iter'
        meta = dict(epoch=runner.epoch, iter=runner.iter)
        if 'auto' in self.key_indicators:
            self._init_rule(self.rules, [next(iter(metrics))])
        hub, single, updated = runner.message_hub, \
            len(self.key_indicators) == 1, False
        for key, rule in zip(self.key_indicators, self.rules):
            suffix = '' if single else f'_{key}'
            best = hub.get_info(f'best_score{suffix}',
                                self.init_value_map[rule])
            score = metrics[key]
            if score is None or not self.is_better_than[key](score, best):
                continue
            updated = True
            hub.update_info(f'best_score{suffix}', score)
            previous = self.best_ckpt_path if single else \
                self.best_ckpt_path_dict[key]
            name = f'best_{key}_{self.filename_tmpl.format(step)}'.replace(
                '/', '_')
            path = self.checkpoints.join(name)
            if single:
                self.best_ckpt_path = path
            else:
                self.best_ckpt_path_dict[key] = path
            hub.update_info(f'best_ckpt{suffix}', path)
            self.checkpoints.save(runner, name, [previous], resumable=False,
                                  save_optimizer=False,
                                  save_param_scheduler=False, meta=meta,
                                  by_epoch=False)
            runner.logger.info(
                f'The best checkpoint with {score:0.4f} {key} at {step} '
                f'{unit} is saved to {name}.')
        # again, so that the latest checkpoint records the new best
        if updated and self.last_ckpt is not None:
            self._save(runner, step, meta)

    def save_stop_checkpoint(self, runner, meta: dict,
                             extra: Optional[dict] = None) -> str:
        """Save ``iter_{meta['iter']}.pth``, the resumable checkpoint of a
        stopped run (with ``extra`` entries), outside ``max_keep_ckpts``,
        removed once a later one reads back intact; return its path. Every
        rank calls it."""
        filename = STOP_TEMPLATE.format(meta['iter'])
        hub = runner.message_hub
        previous = hub.get_info('stop_ckpt')
        hub.update_info('stop_ckpt', self.checkpoints.join(filename))
        self._extra = extra
        try:
            return self.checkpoints.save(
                runner, filename, [previous], save_optimizer=True,
                save_param_scheduler=True, meta=meta, by_epoch=False,
                **self.args)
        finally:
            self._extra = None

    def _own_recorded_paths(self, runner) -> None:
        """A checkpoint path of a resumed message hub outside this folder
        becomes the file of that name here, or is dropped, with a warning."""
        hub = runner.message_hub
        own = self.checkpoints.folder
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
