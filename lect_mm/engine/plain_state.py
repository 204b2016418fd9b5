"""mmengine's runtime state as plain data, so that checkpoints load with
``torch.load(path, weights_only=True)`` in a process without lect_mm.

A checkpoint written by mmengine's ``Runner`` holds its ``MessageHub``
(:class:`~mmengine.logging.HistoryBuffer` objects backed by numpy arrays),
numpy scalars and the numpy random state (``RNGStateHook``). torch's safe
unpickler (``weights_only=True``, torch's default since 2.6) refuses those
classes. :func:`to_plain` replaces each of them by a tagged dict of Python
numbers and lists before saving (``SafeCheckpointHook``); :func:`from_plain`
turns them back when lect_mm loads the file
(:func:`~lect_mm.engine.checkpoint_io.load_checkpoint_file`). This is
lect_mm's one answer to ``weights_only``: nothing is added to torch's
process-wide safe globals. Only numeric and boolean numpy data
are converted; values are exact (``tolist`` and back keeps every bit).
"""
from collections import OrderedDict

import numpy as np
from mmengine.logging import HistoryBuffer

TAG = '__lect_mm_plain__'
"""The key that marks a dict as an encoded object (its value: the kind)."""

_NUMERIC_KINDS = 'biuf'


def _map_container(obj, fn):
    """Apply ``fn`` to the items of a dict, list or tuple.

    Returns ``obj`` itself when no item changed, so that nothing shared
    with the live run (e.g. the message hub's ``resumed_keys``) is copied
    or altered; a changed container is rebuilt with the same type.
    """
    if type(obj) in (dict, OrderedDict):
        items = [(key, fn(value)) for key, value in obj.items()]
        if all(new is obj[key] for key, new in items):
            return obj
        return type(obj)(items)
    if type(obj) in (list, tuple):
        items = [fn(value) for value in obj]
        if all(new is old for new, old in zip(items, obj)):
            return obj
        return type(obj)(items)
    return obj


def to_plain(obj):
    """``obj`` with HistoryBuffers and numeric numpy values as plain data."""
    if isinstance(obj, HistoryBuffer):
        log_history, count_history = obj.data
        return {
            TAG: 'HistoryBuffer',
            'log_history': to_plain(log_history),
            'count_history': to_plain(count_history),
            'max_length': int(obj.max_length),
        }
    if isinstance(obj, np.ndarray) and obj.dtype.kind in _NUMERIC_KINDS:
        return {TAG: 'ndarray', 'dtype': obj.dtype.str, 'data': obj.tolist()}
    if isinstance(obj, np.generic) and obj.dtype.kind in _NUMERIC_KINDS:
        return {TAG: 'scalar', 'dtype': obj.dtype.str, 'data': obj.item()}
    return _map_container(obj, to_plain)


def from_plain(obj):
    """Undo :func:`to_plain`; anything else is returned unchanged."""
    if isinstance(obj, dict) and TAG in obj:
        kind = obj[TAG]
        if kind == 'HistoryBuffer':
            return HistoryBuffer(
                from_plain(obj['log_history']),
                from_plain(obj['count_history']), obj['max_length'])
        if kind in ('ndarray', 'scalar'):
            dtype = np.dtype(obj['dtype'])
            if dtype.kind not in _NUMERIC_KINDS:
                raise ValueError(f'not a numeric numpy dtype: {dtype}')
            array = np.array(obj['data'], dtype=dtype)
            return array if kind == 'ndarray' else array[()]
        raise ValueError(f'unknown {TAG} kind {kind!r}')
    return _map_container(obj, from_plain)
