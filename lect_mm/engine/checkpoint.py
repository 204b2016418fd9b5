"""Load mmengine's own checkpoints under ``torch.load(weights_only=True)``.

Since torch 2.6 ``torch.load`` defaults to ``weights_only=True``, and
mmengine 0.10.7 calls it without the argument. A checkpoint written by
mmengine's ``Runner`` holds, besides tensors, its ``MessageHub`` (a dict of
:class:`~mmengine.logging.HistoryBuffer` objects backed by numpy arrays) and
numpy scalars, so ``--resume``, ``load_from`` and ``tools/test.py`` fail on
the files the same library just wrote.

Rather than turning the safety off (``weights_only=False``), we allowlist
exactly the globals such a checkpoint contains, found by disassembling real
checkpoints (plain, AMP, resumed, with our RNG state): numpy's array, dtype
(numeric dtype classes only) and scalar reconstructors, ``HistoryBuffer``,
and ``getattr`` -- the latter
only through :func:`_history_buffer_getattr`, which resolves nothing but the
statistics methods that ``HistoryBuffer.__getstate__`` pickles by reference
(``getattr(HistoryBuffer, 'mean')``). Any other class or function in a file
still makes ``torch.load`` raise ``UnpicklingError``.
"""
import pickle

import numpy as np
import torch
from mmengine.logging import HistoryBuffer

# The methods ``HistoryBuffer._set_default_statistics`` registers; they are
# the only attributes ``getattr`` may fetch while unpickling.
_HISTORY_BUFFER_STATISTICS = ('min', 'max', 'current', 'mean')


def _history_buffer_getattr(obj, name):
    """``getattr`` restricted to ``HistoryBuffer``'s statistics methods."""
    if obj is HistoryBuffer and name in _HISTORY_BUFFER_STATISTICS:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'getattr({obj!r}, {name!r}) is not allowed while loading a '
        'checkpoint with weights_only=True; lect_mm only allows '
        f'HistoryBuffer.{{{", ".join(_HISTORY_BUFFER_STATISTICS)}}}')


def _numpy_globals():
    """numpy's reconstructors, under the names numpy 1.x and 2.x pickle."""
    multiarray = np._core.multiarray if hasattr(
        np, '_core') else np.core.multiarray
    entries = [np.ndarray, np.dtype]
    # numpy >= 1.25 gives every dtype instance its own class (``Float64DType``
    # ...), which the unpickler must be allowed to ``BUILD``. Numeric and
    # boolean ones only: mmengine writes no object, string or void arrays.
    codes = '?' + np.typecodes['AllInteger'] + np.typecodes['AllFloat']
    entries += sorted({type(np.dtype(c))
                       for c in codes} - {np.dtype},
                      key=lambda t: t.__name__)
    for name in ('_reconstruct', 'scalar'):
        func = getattr(multiarray, name)
        # A checkpoint written under numpy 1.x names ``numpy.core``; one
        # written under numpy 2.x names ``numpy._core``.
        entries += [(func, f'numpy.core.multiarray.{name}'),
                    (func, f'numpy._core.multiarray.{name}')]
    return entries


MMENGINE_CHECKPOINT_GLOBALS = [
    HistoryBuffer,
    (_history_buffer_getattr, 'builtins.getattr'),
    *_numpy_globals(),
]
"""The globals a checkpoint written by mmengine's ``Runner`` contains."""


def allow_mmengine_checkpoints() -> None:
    """Allowlist :data:`MMENGINE_CHECKPOINT_GLOBALS` for ``torch.load``.

    Called on ``import lect_mm``. Idempotent.
    """
    torch.serialization.add_safe_globals(MMENGINE_CHECKPOINT_GLOBALS)
