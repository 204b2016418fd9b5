"""Stopping a training cleanly on a scheduler's signal (``SIGTERM``, or
``SIGUSR1`` from ``sbatch --signal=USR1@120``) with a resumable checkpoint
and resuming it inside the epoch (docs/cluster.md): ``PreemptionHook``."""
import signal
import threading
from functools import partial
from itertools import islice
from typing import Optional

import torch
from mmengine.dist import all_reduce, barrier, gather_object
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop
from mmpretrain.registry import HOOKS, LOOPS
from torch.utils.data import BatchSampler, DataLoader

from .checkpoint_io import CheckpointError
from .checkpoints import SafeCheckpointHook
from .loading import unwrap_model

#: Exit status of a training stopped by a signal after writing its
#: checkpoint (``EX_TEMPFAIL``: try again later, with ``--resume``).
PREEMPTED_EXIT_CODE = 75
DEFAULT_STOP_SIGNALS = ('SIGTERM', 'SIGUSR1')


class TrainingPreempted(SystemExit):
    """A training stopped by a signal, its checkpoint written: ``SystemExit``
    (status 75) with ``checkpoint``, ``signal`` (name) and ``iteration``."""

    def __init__(self, message: str, checkpoint: str, signal_name: str,
                 iteration: int) -> None:
        super().__init__(message)
        self.code = PREEMPTED_EXIT_CODE
        self.checkpoint = checkpoint
        self.signal = signal_name
        self.iteration = iteration


class StopSignals:
    """The signals of a ``stop_signals`` value (names such as ``'SIGTERM'``
    or ``'TERM'``, numbers, a comma-separated string; None: none) and
    handlers that record the first one received and count them."""

    def __init__(self, signals=DEFAULT_STOP_SIGNALS) -> None:
        if isinstance(signals, (int, str)):
            signals = str(signals).split(',')
        self.signals = []
        for item in signals or ():
            item = item.strip() if isinstance(item, str) else str(int(item))
            if not item:
                continue
            try:
                sig = signal.Signals(int(item)) if item.isdigit() else \
                    signal.Signals['SIG' + item.upper().removeprefix('SIG')]
            except (KeyError, ValueError):
                raise ValueError(
                    f'stop_signals: {item!r} is not a signal of this '
                    "platform (e.g. 'SIGTERM', 'SIGUSR1').") from None
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                raise ValueError(
                    f'stop_signals: {sig.name} cannot be caught by a process.')
            if sig not in self.signals:
                self.signals.append(sig)
        self.received: Optional[int] = None
        self.count = 0
        self.installed = {}  # the handlers they replaced, by signal

    def _handler(self, signum, frame) -> None:
        self.received = self.received or signum
        self.count += 1

    def install(self) -> bool:
        """Install the handlers; False outside the main thread (none)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self.received, self.count = None, 0
        for sig in self.signals:
            self.installed[sig] = signal.signal(sig, self._handler)
        return True

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        previous, self.installed = self.installed, {}
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _ignore_stop_signals(init_fn, worker_id: int) -> None:
    """A loader's ``worker_init_fn`` (with ``partial``): a worker forked
    while :class:`StopSignals` is installed ignores them (a scheduler
    signals workers too, which would die of it), then ``init_fn`` runs."""
    for sig in signal.valid_signals():
        handler = signal.getsignal(sig)
        if isinstance(getattr(handler, '__self__', None), StopSignals):
            signal.signal(sig, signal.SIG_IGN)
    if init_fn is not None:
        init_fn(worker_id)


@LOOPS.register_module()
class LectEpochBasedTrainLoop(EpochBasedTrainLoop):
    """mmengine's ``EpochBasedTrainLoop`` that begins its next epoch after
    ``start_at`` iterations (:class:`PreemptionHook` sets it on resume): a
    ``SeededSampler`` skips their samples unloaded (another sampler's batches
    are loaded and dropped). ``LectRunner`` builds it for ``by_epoch=True``."""

    start_at = 0

    def run_epoch(self) -> None:
        self.runner.call_hook('before_train_epoch')  # it sees start_at
        start, self.start_at = self.start_at, 0
        self.runner.model.train()
        batches = self.dataloader
        if start:
            batch_sampler = getattr(batches, 'batch_sampler', None)
            sampler = getattr(batch_sampler, 'sampler', None)
            if start >= len(batches):
                batches = ()  # an iterator would draw from torch's RNG
            elif isinstance(batch_sampler, BatchSampler) and hasattr(
                    sampler, 'skip'):
                sampler.skip(start * batch_sampler.batch_size)
            else:
                print_log(f'{type(sampler).__name__} cannot skip samples: '
                          f'the first {start} batches of this epoch are '
                          'loaded and dropped.', logger='current')
                batches = islice(batches, start, None)
        for idx, data_batch in enumerate(batches, start):
            self.run_iter(idx, data_batch)
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1


def _processes(n: int) -> str:
    return f'{n} process' + ('' if n == 1 else 'es')


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Stop a training cleanly on a signal (``stop_signals``) and resume it
    inside the epoch. While ``train()`` runs, the signals are recorded (not
    in loader workers); after each iteration the ranks agree whether one
    got one; if so ``SafeCheckpointHook`` saves ``iter_{N}.pth`` (with each
    rank's buffers: DDP averages BatchNorm statistics at an epoch's end)
    and :class:`TrainingPreempted` is raised."""

    priority = 'LOWEST'  # an iteration's other hooks (its checkpoint) first

    def __init__(self, stop_signals=DEFAULT_STOP_SIGNALS) -> None:
        self.stop = StopSignals(stop_signals)

    def before_train(self, runner) -> None:
        self._resume_inside_epoch(runner)
        if not self.stop.signals:
            return
        missing = []
        if not isinstance(runner.train_loop, LectEpochBasedTrainLoop):
            missing.append('an epoch-based train loop (train_cfg = dict('
                           'by_epoch=True, ...) or LectEpochBasedTrainLoop)')
        if not any(isinstance(h, SafeCheckpointHook) for h in runner.hooks):
            missing.append('a SafeCheckpointHook (default_hooks.checkpoint)')
        if not missing and not self.stop.install():
            missing.append('to run in the main thread')
        if missing:
            names = ', '.join(s.name for s in self.stop.signals)
            runner.logger.warning(
                f'stop_signals: {names} keep their usual effect in this run '
                '(it ends without a checkpoint): stopping cleanly needs '
                f'{" and ".join(missing)}.')
            return
        for loop in (runner.train_loop, runner.val_loop):
            loader = getattr(loop, 'dataloader', None)
            init_fn = getattr(loader, 'worker_init_fn', None)
            if isinstance(loader, DataLoader) and loader.num_workers > 0 and \
                    getattr(init_fn, 'func', None) is not _ignore_stop_signals:
                loader.worker_init_fn = partial(_ignore_stop_signals, init_fn)

    def after_train(self, runner) -> None:
        self.stop.restore()

    def before_train_epoch(self, runner) -> None:
        # not before the first epoch, nor one that goes on after a resume
        if runner.iter > 0 and not getattr(runner.train_loop, 'start_at', 0):
            self._stop_if_requested(runner, 0, runner.iter)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        # the loop counts this iteration (runner.iter) after its hooks
        self._stop_if_requested(runner, batch_idx + 1, runner.iter + 1)

    def _stop_if_requested(self, runner, inner_iter: int, done: int) -> None:
        """If a rank got a signal, save the checkpoint after ``done``
        iterations (``inner_iter`` of this epoch) and stop (every rank)."""
        if not self.stop.installed:
            return
        signum = torch.tensor([self.stop.received or 0], dtype=torch.int32)
        all_reduce(signum, op='max')  # no-op on one process
        if not signum.item():
            return
        signal_name = signal.Signals(int(signum.item())).name
        loader = runner.train_dataloader
        meta = dict(epoch=runner.epoch, iter=done, inner_iter=inner_iter,
                    epoch_length=len(loader), batch_size=loader.batch_size,
                    world_size=runner.world_size, stop_signal=signal_name,
                    dataset_length=len(loader.dataset))
        extra = None
        if runner.world_size > 1:
            buffers = unwrap_model(runner.model).named_buffers()
            extra = dict(rank_buffers=gather_object(
                {key: b.detach().cpu().clone() for key, b in buffers}, dst=0))
        saver = next(h for h in runner.hooks
                     if isinstance(h, SafeCheckpointHook))
        path = saver.save_stop_checkpoint(runner, meta, extra)
        name = signal_name
        if self.stop.received is None:
            name += ' (received by another rank)'
        if self.stop.count > 1:  # more came while it stopped
            name += f' ({self.stop.count} signals received)'
        where = (f'epoch {runner.epoch + 1}, iteration {inner_iter} of '
                 f'{len(loader)}' if inner_iter else
                 f'before epoch {runner.epoch + 1}')
        message = (f'{name}: stopped after iteration {done} ({where}). Saved '
                   f'{path}; train again with --resume to go on from there.')
        runner.logger.warning(message)
        barrier()  # no rank leaves before rank 0 has written and logged
        self.stop.restore()
        raise TrainingPreempted(message, str(path), signal_name, done)

    def _resume_inside_epoch(self, runner) -> None:
        """After ``--resume`` (not ``load_from``) from a checkpoint written
        inside an epoch, go on there, given the same data and processes."""
        loaded = getattr(getattr(runner, 'checkpoints', None), 'loaded', None)
        meta = (loaded.entries.get('meta') or {}) if loaded else {}
        if not (loaded and loaded.resumed and meta.get('inner_iter')) or (
                runner.epoch, runner.iter) != (meta['epoch'], meta['iter']):
            return
        loader = runner.train_dataloader
        inner_iter = int(meta['inner_iter'])
        here = (len(loader), loader.batch_size, runner.world_size,
                len(loader.dataset))
        there = (meta.get('epoch_length'), meta.get('batch_size'),
                 meta.get('world_size'), meta.get('dataset_length', here[3]))
        where = (f'Checkpoint {loaded.path} was written inside epoch '
                 f'{meta["epoch"] + 1}, after its iteration {inner_iter}')
        if here != there:
            raise CheckpointError(
                f'{where} of {there[0]} ({_processes(there[2])}, batch size '
                f'{there[1]}) on {there[3]} samples; this run has {here[0]} '
                f'iterations per epoch ({_processes(here[2])}, batch size '
                f'{here[1]}) on {here[3]} samples. Resuming inside an epoch '
                'needs the same data, batch size and number of processes; '
                'resume from an epoch_*.pth checkpoint instead.')
        if not isinstance(runner.train_loop, LectEpochBasedTrainLoop):
            raise CheckpointError(
                f'{where}; this run\'s train loop, '
                f'{type(runner.train_loop).__name__}, cannot resume inside '
                'an epoch (LectEpochBasedTrainLoop can: train_cfg = dict('
                'by_epoch=True, ...)).')
        runner.train_loop.start_at = inner_iter
        rank_buffers = loaded.entries.get('rank_buffers')
        if len(rank_buffers or ()) == runner.world_size:
            module = unwrap_model(runner.model)
            with torch.no_grad():
                for key, value in rank_buffers[runner.rank].items():
                    module.get_buffer(key).copy_(value)
        runner.logger.info(
            f'{where} of {len(loader)} (stopped by '
            f'{meta.get("stop_signal", "a signal")}): the epoch goes on '
            f'from iteration {inner_iter + 1}.')
