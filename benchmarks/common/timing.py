"""Timing: warm-up calls, then timed calls; median and inter-quartile range.

On CUDA each call is bracketed by CUDA events on the current stream and the
device is synchronised after every call, so a figure is the GPU time of one
call (including any gaps where the GPU waits for Python). On CPU it is
``time.perf_counter`` wall time, or with ``cpu_time=True``
``time.process_time``: the CPU seconds of the process's threads, which the
time spent waiting for a core that other processes hold does not inflate
(for single-threaded runs on a shared machine; caches and memory bandwidth
are still shared).
"""
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, List, Sequence

import torch


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


@dataclass
class Stats:
    """Per-call times in seconds and their summary."""
    times: List[float] = field(default_factory=list)

    def _q(self, p: float) -> float:
        xs = sorted(self.times)
        if len(xs) == 1:
            return xs[0]
        pos = p * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def q1(self) -> float:
        return self._q(0.25)

    @property
    def q3(self) -> float:
        return self._q(0.75)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def ms(self) -> str:
        """``median [q1–q3]`` in milliseconds."""
        return (f'{self.median * 1e3:.2f} '
                f'[{self.q1 * 1e3:.2f}–{self.q3 * 1e3:.2f}]')

    def rate(self, items: int) -> str:
        """Items per second: ``median [IQR]`` (the IQR of the rate)."""
        return (f'{fmt_rate(items / self.median)} '
                f'[{fmt_rate(items / self.q3)}–{fmt_rate(items / self.q1)}]')


def fmt_rate(x: float) -> str:
    """A rate with three significant digits and thousands separators."""
    if x >= 100:
        return f'{x:,.0f}'
    return f'{x:.1f}' if x >= 10 else f'{x:.2f}'


def _time_call(fn: Callable[[], object],
               device: torch.device,
               cpu_time: bool = False) -> float:
    """Seconds of one ``fn()``: CUDA events (synchronised), perf_counter or
    (``cpu_time``) process_time."""
    if device.type == 'cuda':
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    clock = time.process_time if cpu_time else time.perf_counter
    t0 = clock()
    fn()
    return clock() - t0


def measure(fn: Callable[[], object],
            device: torch.device,
            warmup: int = 3,
            repeats: int = 10,
            cpu_time: bool = False) -> Stats:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    CUDA: events around each call, synchronised after each call. CPU:
    ``perf_counter``, or ``process_time`` with ``cpu_time``.
    """
    return measure_interleaved([fn], device, warmup, repeats,
                               cpu_time=cpu_time)[0]


def measure_interleaved(fns: Sequence[Callable[[], object]],
                        device: torch.device,
                        warmup: int = 3,
                        repeats: int = 10,
                        turn: int = 1,
                        cpu_time: bool = False) -> List[Stats]:
    """Time several competitors in turns, so that a drift of the machine's
    load (CPU) or clocks (GPU) during the measurement affects all of them
    alike. The order reverses every round (``A B``, ``B A``, ``A B``...):
    a call right after another model's can pay for what that one left
    behind (on the CPU, e.g. fresh pages for the memory it freed), and
    alternating shares that cost out evenly. Warm-up calls first, in the
    given order.

    With ``turn > 1`` each turn is one untimed call and then ``turn`` timed
    calls in a row (the last turn fewer, to make ``repeats``): for very
    different models, whose steps would otherwise each start in what the
    other model left, the times are those of the steady state of a training
    loop. ``cpu_time``: CPU seconds instead of wall time on the CPU (see the
    module's documentation).
    """
    if repeats < 1 or turn < 1:
        raise ValueError(f'repeats and turn must be >= 1, got {repeats} '
                         f'and {turn}')
    for _ in range(warmup):
        for fn in fns:
            fn()
    synchronize(device)
    stats = [Stats() for _ in fns]
    order = list(range(len(fns)))
    done = 0
    while done < repeats:
        calls = min(turn, repeats - done)
        for i in order:
            if turn > 1:
                fns[i]()
                synchronize(device)
            for _ in range(calls):
                stats[i].times.append(
                    _time_call(fns[i], device, cpu_time))
        done += calls
        order.reverse()
    return stats
