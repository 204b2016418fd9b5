"""mmengine's runtime state as plain data, so that checkpoints load with
``torch.load(weights_only=True)`` without lect_mm and without adding to
torch's safe globals: ``HistoryBuffer``s and numeric numpy values become
tagged dicts of Python numbers (bit-exact), turned back on load."""
from collections import OrderedDict

import numpy as np
from mmengine.logging import HistoryBuffer

TAG = '__lect_mm_plain__'  # marks an encoded object; its value: the kind

_NUMERIC_KINDS = 'biuf'


def _map_container(obj, fn):
    """``fn`` applied to the items of a dict, list or tuple; ``obj`` itself
    when no item changed (nothing shared with the live run is copied)."""
    if type(obj) in (dict, OrderedDict):
        items = [(key, fn(value)) for key, value in obj.items()]
        changed = any(new is not obj[key] for key, new in items)
    elif type(obj) in (list, tuple):
        items = [fn(value) for value in obj]
        changed = any(new is not old for new, old in zip(items, obj))
    else:
        return obj
    return type(obj)(items) if changed else obj


def to_plain(obj):
    """``obj`` with HistoryBuffers and numeric numpy values as plain data."""
    if isinstance(obj, HistoryBuffer):
        log_history, count_history = obj.data
        return {TAG: 'HistoryBuffer', 'log_history': to_plain(log_history),
                'count_history': to_plain(count_history),
                'max_length': int(obj.max_length)}
    if isinstance(obj, (np.ndarray, np.generic)) and \
            obj.dtype.kind in _NUMERIC_KINDS:
        kind = 'ndarray' if isinstance(obj, np.ndarray) else 'scalar'
        return {TAG: kind, 'dtype': obj.dtype.str, 'data': obj.tolist()}
    return _map_container(obj, to_plain)


def from_plain(obj):
    """Undo :func:`to_plain`; anything else is returned unchanged."""
    if not (isinstance(obj, dict) and TAG in obj):
        return _map_container(obj, from_plain)
    kind = obj[TAG]
    if kind == 'HistoryBuffer':
        return HistoryBuffer(
            from_plain(obj['log_history']),
            from_plain(obj['count_history']), obj['max_length'])
    if kind not in ('ndarray', 'scalar'):
        raise ValueError(f'unknown {TAG} kind {kind!r}')
    dtype = np.dtype(obj['dtype'])
    if dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f'not a numeric numpy dtype: {dtype}')
    array = np.array(obj['data'], dtype=dtype)
    return array if kind == 'ndarray' else array[()]
