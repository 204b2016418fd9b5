"""Stopping a training cleanly on a scheduler's signal, and resuming it
inside the epoch.

SLURM and most schedulers send ``SIGTERM`` before they kill a job (after a
grace period), and ``SIGUSR1`` where the job asks for a warning
(``sbatch --signal=USR1@120``). :class:`StopSignals` turns those signals
into a request: its handler only records the signal, and
:class:`PreemptionHook` acts on it at the end of the iteration in progress,
on every rank at the same iteration: it writes a resumable checkpoint of
that iteration and raises :class:`TrainingPreempted`, a ``SystemExit`` with
the code :data:`PREEMPTED_EXIT_CODE`.

The handlers are installed while ``train()`` runs, and the previous ones
put back when it returns or raises; importing lect_mm installs nothing.
:class:`~lect_mm.engine.LectRunner` registers the hook with the config's
``stop_signals``.
"""
import signal
import threading
from typing import Dict, Iterable, List, Optional, Union

import torch
from mmengine.dist import all_reduce, barrier, gather_object, get_world_size
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS
from torch.utils.data import DataLoader

from .checkpoint_hook import SafeCheckpointHook
from .checkpoint_io import CheckpointError
from .loading import unwrap_model
from .loops import LectEpochBasedTrainLoop

PREEMPTED_EXIT_CODE = 75
"""Exit status of a training stopped by a signal after writing its
checkpoint (``EX_TEMPFAIL`` of sysexits.h: try again later, with
``--resume``)."""

DEFAULT_STOP_SIGNALS = ('SIGTERM', 'SIGUSR1')


class TrainingPreempted(SystemExit):
    """A training stopped by a signal, its checkpoint written.

    A ``SystemExit``: a tool that does not catch it (``tools/train.py``,
    mmpretrain's) ends quietly with the status :data:`PREEMPTED_EXIT_CODE`.

    Attributes:
        checkpoint (str): The checkpoint to resume from.
        signal (str): The signal's name (``'SIGTERM'``).
        iteration (int): The iterations done (the checkpoint's ``iter``).
    """

    def __init__(self, message: str, checkpoint: str, signal_name: str,
                 iteration: int) -> None:
        super().__init__(message)
        self.code = PREEMPTED_EXIT_CODE
        self.message = message
        self.checkpoint = checkpoint
        self.signal = signal_name
        self.iteration = iteration

    def __str__(self) -> str:
        return self.message


def parse_stop_signals(value) -> List[signal.Signals]:
    """The signals of a ``stop_signals`` config value.

    Args:
        value (str | int | Iterable | None): Names (``'SIGTERM'``,
            ``'TERM'``) or numbers; a string may list several, separated by
            commas. None or empty: no signal.

    Raises:
        ValueError: A name or number that is no signal of this platform,
            or ``SIGKILL``/``SIGSTOP`` (cannot be caught).
    """
    if value is None:
        return []
    if isinstance(value, (str, int)):
        value = str(value).split(',') if isinstance(value, str) else [value]
    found = []
    for item in value:
        item = item.strip() if isinstance(item, str) else item
        if item == '':
            continue
        try:
            if isinstance(item, str) and not item.isdigit():
                name = item.upper()
                sig = signal.Signals[name if name.startswith('SIG') else
                                     'SIG' + name]
            else:
                sig = signal.Signals(int(item))
        except (KeyError, ValueError):
            raise ValueError(
                f'stop_signals: {item!r} is not a signal of this platform '
                "(e.g. 'SIGTERM', 'SIGUSR1').") from None
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(
                f'stop_signals: {sig.name} cannot be caught by a process.')
        if sig not in found:
            found.append(sig)
    return found


class IgnoreStopSignals:
    """A data loader's ``worker_init_fn`` that makes the worker ignore the
    stop signals, then calls the loader's own ``worker_init_fn``.

    A scheduler signals every process of a job, and torchrun every process
    of a rank's group: loader workers get the ``SIGTERM`` too, and torch's
    workers die of it, which fails the run ("DataLoader worker ... is
    killed by signal: Terminated") before it can stop cleanly. A worker
    forked while :class:`StopSignals` is installed (the ``fork`` start
    method, default_runtime's) inherits its handlers: those signals are
    ignored in the worker, which ends when its loader ends it (or within
    seconds of its parent's death). Other workers are left as they are.
    :class:`PreemptionHook` gives the run's loaders this function.

    Args:
        init_fn (callable, optional): The loader's ``worker_init_fn``.
    """

    def __init__(self, init_fn=None) -> None:
        self.init_fn = init_fn

    def __call__(self, worker_id: int) -> None:
        for sig in signal.valid_signals():
            handler = signal.getsignal(sig)
            if isinstance(getattr(handler, '__self__', None), StopSignals):
                signal.signal(sig, signal.SIG_IGN)
        if self.init_fn is not None:
            self.init_fn(worker_id)


class StopSignals:
    """Records the stop signals a process receives while it is installed.

    The handler does nothing but record the signal: the stop happens where
    the training loop asks :meth:`agreed`. A second signal while the run
    stops (a scheduler signalling every process of the job and the launcher
    forwarding it too) is only counted.

    Args:
        signals (Iterable): What :func:`parse_stop_signals` accepts.
    """

    def __init__(self,
                 signals: Union[str, Iterable, None] = DEFAULT_STOP_SIGNALS):
        self.signals = parse_stop_signals(signals)
        self.received: Optional[int] = None
        self.count = 0
        self._previous: Dict[signal.Signals, object] = {}

    # -- handler ---------------------------------------------------------
    def _handler(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
        self.count += 1

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> bool:
        """Install the handlers (main thread only; elsewhere Python cannot
        install signal handlers: returns False and installs nothing)."""
        if not self.signals or self.installed:
            return self.installed
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handler)
        return True

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else
                          signal.SIG_DFL)

    # -- the stop --------------------------------------------------------
    def agreed(self) -> int:
        """Whether to stop now: the number of a signal a rank has received
        (the highest, if several), or 0.

        A collective call (an all-reduce of one integer) when the run has
        several processes: every rank must call it at the same point, and
        every rank gets the same answer.
        """
        local = int(self.received or 0)
        if get_world_size() == 1:
            return local
        flag = torch.tensor([local], dtype=torch.int32)
        all_reduce(flag, op='max')
        return int(flag.item())


def _processes(n: int) -> str:
    return f'{n} process' + ('' if n == 1 else 'es')


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Stop a training cleanly on a signal; resume it inside the epoch.

    From ``before_train`` to ``after_train`` (:meth:`restore`;
    ``LectRunner.train`` calls it when training raises) the stop signals
    are recorded (:class:`StopSignals`) and ignored by the loaders' workers
    (:class:`IgnoreStopSignals`). After each iteration (its other hooks
    first) and before an epoch that follows another, every rank asks
    whether a rank got one; if so, the checkpoint of that point,
    ``iter_{N}.pth``, is saved by the
    :class:`~lect_mm.engine.SafeCheckpointHook` (with each rank's BatchNorm
    statistics, which DDP averages only at an epoch's end), the log says
    why, and :class:`TrainingPreempted` is raised. ``--resume`` from such a
    checkpoint goes on inside the epoch
    (:meth:`~lect_mm.engine.loops.LectEpochBasedTrainLoop.start_epoch_at`)
    with each rank's own statistics, given the same data, batch size and
    number of processes (else a :class:`~lect_mm.engine.CheckpointError`).
    A run that cannot stop with a checkpoint (no LectEpochBasedTrainLoop or
    SafeCheckpointHook, not in the main thread) says why in its log and
    leaves the signals their usual effect.

    Args:
        stop_signals (str | int | Iterable | None): What
            :func:`parse_stop_signals` accepts; None or ``[]``: none.
    """

    priority = 'LOWEST'  # an iteration's other hooks (its checkpoint) first

    def __init__(self, stop_signals=DEFAULT_STOP_SIGNALS) -> None:
        self.signals = parse_stop_signals(stop_signals)
        self.stop: Optional[StopSignals] = None  # installed ones
        self._resumed = None  # (file, meta, rank_buffers) inside an epoch
        self._resumed_epoch = False  # the epoch goes on: no check before it

    # ------------------------------------------------------------ signals
    def before_train(self, runner) -> None:
        self._resume_inside_epoch(runner)
        self._install(runner)

    def after_train(self, runner) -> None:
        self.restore()

    def restore(self) -> None:
        """Put back the handlers the run found."""
        if self.stop is not None:
            self.stop.restore()
            self.stop = None

    def _install(self, runner) -> None:
        if not self.signals:
            return
        names = ', '.join(sig.name for sig in self.signals)
        missing = []
        if not isinstance(runner.train_loop, LectEpochBasedTrainLoop):
            missing.append('an epoch-based train loop (train_cfg = dict('
                           'by_epoch=True, ...) or LectEpochBasedTrainLoop)')
        if self._checkpoint_hook(runner) is None:
            missing.append('a SafeCheckpointHook (default_hooks.checkpoint)')
        stop = StopSignals(self.signals)
        if not missing and not stop.install():
            missing.append('to run in the main thread')
        if missing:
            runner.logger.warning(
                f'stop_signals: {names} keep their usual effect in this run '
                f'(it ends without a checkpoint): stopping cleanly needs '
                f'{" and ".join(missing)}.')
            return
        self.stop = stop
        for loop in (runner.train_loop, runner.val_loop):
            loader = getattr(loop, 'dataloader', None)
            if isinstance(loader, DataLoader) and loader.num_workers > 0 \
                    and not isinstance(loader.worker_init_fn,
                                       IgnoreStopSignals):
                loader.worker_init_fn = IgnoreStopSignals(
                    loader.worker_init_fn)

    @staticmethod
    def _checkpoint_hook(runner) -> Optional[SafeCheckpointHook]:
        return next((hook for hook in runner.hooks
                     if isinstance(hook, SafeCheckpointHook)), None)

    # ----------------------------------------------------------- the stop
    def before_train_epoch(self, runner) -> None:
        resumed, self._resumed_epoch = self._resumed_epoch, False
        if not resumed and runner.iter > 0:
            self._stop_if_requested(runner, 0, runner.iter)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        # the loop counts this iteration (runner.iter) after its hooks
        self._stop_if_requested(runner, batch_idx + 1, runner.iter + 1)

    def _stop_if_requested(self, runner, inner_iter: int, done: int) -> None:
        """On every rank: when a rank has received a stop signal, save the
        checkpoint of this point and raise :class:`TrainingPreempted`.

        Args:
            inner_iter (int): The iterations of the current epoch done; 0
                before an epoch (its predecessor and validation done).
            done (int): The iterations done.
        """
        stop = self.stop
        if stop is None:
            return
        signum = stop.agreed()
        if not signum:
            return
        loader = runner.train_dataloader
        name = signal_name = signal.Signals(signum).name
        if stop.received is None:
            name += ' (received by another rank)'
        meta = dict(
            epoch=runner.epoch,
            iter=done,
            inner_iter=inner_iter,
            epoch_length=len(loader),
            batch_size=loader.batch_size,
            world_size=runner.world_size,
            stop_signal=signal_name)
        extra = None
        if runner.world_size > 1:
            buffers = {
                key: buffer.detach().cpu().clone()
                for key, buffer in unwrap_model(runner.model).named_buffers()
            }
            extra = dict(rank_buffers=gather_object(buffers, dst=0))
        path = self._checkpoint_hook(runner).save_stop_checkpoint(
            runner, meta, extra)
        if stop.count > 1:  # more signals came while it stopped
            name += f' ({stop.count} signals received)'
        if inner_iter:
            where = (f'epoch {runner.epoch + 1}, iteration {inner_iter} of '
                     f'{len(loader)}')
        else:
            where = f'before epoch {runner.epoch + 1}'
        message = (
            f'{name}: stopped after iteration {done} ({where}). '
            f'Saved {path}; train again with --resume to go on from there.')
        runner.logger.warning(message)
        barrier()  # no rank leaves before rank 0 has written and logged
        self.restore()
        raise TrainingPreempted(message, str(path), signal_name, done)

    # ------------------------------------------- resuming inside an epoch
    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.get('meta') or {}
        self._resumed = None
        if meta.get('inner_iter'):
            filename = getattr(runner, 'checkpoint_file', None) or \
                'the checkpoint'
            self._resumed = (filename, meta, checkpoint.get('rank_buffers'))

    def _resume_inside_epoch(self, runner) -> None:
        """After ``--resume`` (the loop is where the checkpoint's ``meta``
        says; ``load_from`` leaves it at 0) from a checkpoint written inside
        an epoch: go on inside it."""
        resumed, self._resumed = self._resumed, None
        if resumed is None:
            return
        filename, meta, rank_buffers = resumed
        if (runner.epoch, runner.iter) != (meta['epoch'], meta['iter']):
            return
        loader = runner.train_dataloader
        inner_iter = int(meta['inner_iter'])
        here = (len(loader), loader.batch_size, runner.world_size)
        there = (meta.get('epoch_length'), meta.get('batch_size'),
                 meta.get('world_size'))
        where = (f'Checkpoint {filename} was written inside epoch '
                 f'{meta["epoch"] + 1}, after its iteration {inner_iter}')
        if here != there:
            raise CheckpointError(
                f'{where} of {there[0]} ({_processes(there[2])}, batch size '
                f'{there[1]}); this run has {here[0]} iterations per epoch '
                f'({_processes(here[2])}, batch size {here[1]}). Resuming '
                'inside an epoch needs the same data, batch size and number '
                'of processes; resume from an epoch_*.pth checkpoint '
                'instead.')
        if not isinstance(runner.train_loop, LectEpochBasedTrainLoop):
            raise CheckpointError(
                f'{where}; this run\'s train loop, '
                f'{type(runner.train_loop).__name__}, cannot resume inside '
                'an epoch (LectEpochBasedTrainLoop can: train_cfg = dict('
                'by_epoch=True, ...)).')
        runner.train_loop.start_epoch_at(inner_iter)
        self._resumed_epoch = True
        if rank_buffers is not None and \
                len(rank_buffers) == runner.world_size:
            module = unwrap_model(runner.model)
            with torch.no_grad():
                for key, value in rank_buffers[runner.rank].items():
                    module.get_buffer(key).copy_(value)
        runner.logger.info(
            f'{where} of {len(loader)} (stopped by '
            f'{meta.get("stop_signal", "a signal")}): the epoch goes on '
            f'from iteration {inner_iter + 1}.')
