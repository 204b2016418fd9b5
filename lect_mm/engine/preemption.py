"""Stopping a training cleanly on a scheduler's signal.

SLURM and most schedulers send ``SIGTERM`` before they kill a job (after a
grace period), and ``SIGUSR1`` where the job asks for a warning
(``sbatch --signal=USR1@120``). :class:`StopSignals` turns those signals
into a request: its handler only records the signal, and the training loop
(:class:`~lect_mm.engine.loops.LectEpochBasedTrainLoop`) acts on it at the
end of the iteration in progress, on every rank at the same iteration: it
writes a resumable checkpoint of that iteration and raises
:class:`TrainingPreempted`, a ``SystemExit`` with the code
:data:`PREEMPTED_EXIT_CODE`.

:class:`~lect_mm.engine.LectRunner` installs the handlers when ``train()``
starts and puts the previous ones back when it returns or raises; importing
lect_mm installs nothing. The signals are the config's ``stop_signals``.
"""
import signal
import threading
from typing import Dict, Iterable, List, Optional, Union

import torch
from mmengine.dist import all_reduce, get_world_size

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
    :class:`~lect_mm.engine.LectRunner` gives its loaders this function.

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
    @property
    def name(self) -> Optional[str]:
        """The first signal received (``'SIGTERM'``), or None."""
        if self.received is None:
            return None
        return signal.Signals(self.received).name

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
