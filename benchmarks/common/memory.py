"""Peak memory: the most tensor memory one call allocates on top of what was
live before it (weights, optimizer state, inputs excluded).

CUDA: ``torch.cuda.max_memory_allocated`` minus ``memory_allocated`` before
the call (the caching allocator's reserve is not counted). CPU: the
allocation and free events of ``torch.profiler`` with
``profile_memory=True``, summed in time order, in a separate untimed call
(exact tensor bytes; RSS would blur them with allocator caching).
"""
import contextlib
import os
import sys
from typing import Callable, Optional

import torch

from .timing import synchronize

os.environ.setdefault('KINETO_LOG_LEVEL', '5')  # quiet profiler on CPU

MEMORY_NOTE = {
    'cuda': 'peak memory = torch.cuda.max_memory_allocated during one call '
    'minus memory_allocated before it (weights, optimizer state and input '
    'excluded)',
    'cpu': 'peak memory = peak of the tensor bytes allocated during one '
    'call on top of those live before it, from the allocation and free '
    'events of torch.profiler (profile_memory=True) in a separate untimed '
    'call (exact allocator bytes, not RSS)',
}


@contextlib.contextmanager
def _quiet_stderr():
    """Mute the C++ profiler's start/stop lines written to fd 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, 'w') as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn: Callable[[], object],
                device: torch.device) -> Optional[int]:
    """Peak bytes one ``fn()`` call allocates above the live baseline.

    See ``MEMORY_NOTE``. Returns None where the profiler's event API is
    unavailable (CPU only). On the CPU the profiler's own lines on stderr
    are muted during the (untimed) call.
    """
    if device.type == 'cuda':
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile
    with _quiet_stderr(), profile(
            activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:
        events = prof.profiler.kineto_results.events()
        events = sorted((e for e in events if e.name() == '[memory]'
                         and e.device_type().name == 'CPU'),
                        key=lambda e: e.start_ns())
    except AttributeError:
        return None
    live = peak = 0
    for event in events:
        live += event.nbytes()  # negative for a free
        peak = max(peak, live)
    return peak


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return 'n/a'
    for unit in ('B', 'KiB', 'MiB', 'GiB'):
        if abs(n) < 1024 or unit == 'GiB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1024
    return f'{n:.1f} GiB'
