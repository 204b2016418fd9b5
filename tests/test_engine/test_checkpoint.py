"""mmengine's own checkpoints load under torch.load(weights_only=True) once
lect_mm is imported; anything else stays refused."""
import pickle

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import _load_checkpoint
from tiny_run_utils import tiny_runner

from lect_mm.engine import MMENGINE_CHECKPOINT_GLOBALS


class Payload:
    """An arbitrary class: loading an instance must stay refused."""

    def __init__(self, value=1):
        self.value = value


class Sneaky:
    """Pickles as ``getattr(np.ndarray, 'tofile')`` -- a way to reach a
    function with side effects if ``getattr`` were allowlisted wholesale."""

    def __reduce__(self):
        return getattr, (np.ndarray, 'tofile')


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    # mmengine's own CheckpointHook pickles its objects (lect_mm's
    # SafeCheckpointHook saves them as plain data; see test_checkpoint_io):
    # such files, e.g. from before SafeCheckpointHook, must still load.
    work_dir = tmp_path_factory.mktemp('ckpt_run')
    tiny_runner(
        work_dir, 'ckpt_run', train_cfg=dict(max_epochs=1),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook'))).train()
    return str(work_dir / 'epoch_1.pth')


def _allowed_names():
    names = set()
    for entry in MMENGINE_CHECKPOINT_GLOBALS:
        if isinstance(entry, tuple):
            names.add(entry[1])
        else:
            names.add(f'{entry.__module__}.{entry.__qualname__}')
    return names


def test_runner_checkpoint_loads_with_weights_only(checkpoint):
    ckpt = torch.load(checkpoint, map_location='cpu', weights_only=True)
    assert set(ckpt) >= {'meta', 'state_dict', 'message_hub', 'optimizer',
                         'param_schedulers', 'rng_state'}
    loss = ckpt['message_hub']['log_scalars']['train/loss']
    assert isinstance(loss, HistoryBuffer)
    assert np.isfinite(loss.mean())
    assert isinstance(ckpt['rng_state']['numpy'][1], np.ndarray)
    # mmengine's loader (used by resume, load_from, tools/test.py) too.
    assert 'state_dict' in _load_checkpoint(checkpoint, map_location='cpu')


def test_allowlist_covers_exactly_what_is_needed(checkpoint):
    # Every global the file needs beyond torch's defaults is in our list,
    # found by disassembling the pickle.
    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        unsafe = set(
            torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint))
    finally:
        torch.serialization.add_safe_globals(registered)
    assert 'mmengine.logging.history_buffer.HistoryBuffer' in unsafe
    assert unsafe <= _allowed_names(), unsafe - _allowed_names()


def test_arbitrary_class_still_refused(tmp_path):
    path = str(tmp_path / 'evil.pth')
    torch.save({'state_dict': {}, 'payload': Payload()}, path)
    with pytest.raises(pickle.UnpicklingError, match='Payload'):
        torch.load(path)
    with pytest.raises(pickle.UnpicklingError, match='Payload'):
        _load_checkpoint(path, map_location='cpu')


def test_getattr_only_reaches_history_buffer_statistics(tmp_path):
    path = str(tmp_path / 'getattr.pth')
    torch.save({'x': Sneaky()}, path)
    with pytest.raises(pickle.UnpicklingError, match='tofile'):
        torch.load(path)


def test_numpy1_checkpoint_names_are_accepted(tmp_path):
    # A checkpoint written under numpy 1.x names numpy.core.multiarray.
    path = str(tmp_path / 'np1.pth')
    buffer = HistoryBuffer([1.0, 2.0], [1, 1])
    torch.save({'buffer': buffer, 'score': np.float64(0.5)},
               path,
               _use_new_zipfile_serialization=False)
    with open(path, 'rb') as f:
        data = f.read()
    assert b'numpy._core.multiarray' in data
    with open(path, 'wb') as f:
        f.write(data.replace(b'numpy._core.multiarray',
                             b'numpy.core.multiarray'))
    ckpt = torch.load(path)
    assert ckpt['buffer'].mean() == 1.5
    assert ckpt['score'] == 0.5
