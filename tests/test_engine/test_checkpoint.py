"""``weights_only``: lect_mm's loader reads plain-data checkpoints with
``torch.load(weights_only=True)`` and adds nothing to torch's process-wide
safe globals; a checkpoint pickled by mmengine's own CheckpointHook is
refused with a way out, and arbitrary classes stay refused."""
import pickle

import pytest
import torch
from tiny_run_utils import tiny_runner

from lect_mm.engine.checkpoint_io import read_checkpoint


class Payload:
    """An arbitrary class: loading an instance must stay refused."""

    def __init__(self, value=1):
        self.value = value


@pytest.fixture(scope='module')
def mmengine_checkpoint(tmp_path_factory):
    # mmengine's own CheckpointHook pickles its message hub (HistoryBuffer
    # objects, numpy arrays); lect_mm's SafeCheckpointHook saves plain data
    # (see test_checkpoint_io).
    work_dir = tmp_path_factory.mktemp('ckpt_run')
    tiny_runner(
        work_dir, 'ckpt_run', train_cfg=dict(max_epochs=1),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook'))).train()
    return str(work_dir / 'epoch_1.pth')


def test_mmengine_pickled_checkpoint_is_refused_with_a_way_out(
        mmengine_checkpoint, monkeypatch):
    monkeypatch.delenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', raising=False)
    safe_globals = torch.serialization.get_safe_globals()
    with pytest.raises(pickle.UnpicklingError,
                       match='HistoryBuffer') as info:
        read_checkpoint(mmengine_checkpoint)
    assert mmengine_checkpoint in str(info.value)
    assert 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1' in str(info.value)
    assert 'SafeCheckpointHook' in str(info.value)
    assert torch.serialization.get_safe_globals() == safe_globals


def test_torch_opt_out_loads_a_trusted_file(mmengine_checkpoint,
                                            monkeypatch):
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    ckpt = read_checkpoint(mmengine_checkpoint)
    assert set(ckpt) >= {'meta', 'state_dict', 'message_hub', 'optimizer'}


def test_arbitrary_class_still_refused(tmp_path, monkeypatch):
    monkeypatch.delenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', raising=False)
    path = str(tmp_path / 'evil.pth')
    torch.save({'state_dict': {}, 'payload': Payload()}, path)
    with pytest.raises(pickle.UnpicklingError, match='Payload') as info:
        read_checkpoint(path)
    assert 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD' not in str(info.value)


class Marker:
    """Unpickling this writes a file: code run from data."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, 'w')


def test_http_checkpoints_load_with_weights_only(tmp_path, monkeypatch):
    import functools
    import http.server
    import threading

    monkeypatch.delenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', raising=False)
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    served = tmp_path / 'served'
    served.mkdir()
    torch.save({'state_dict': {'w': torch.ones(2)}}, served / 'good.pth')
    marker = tmp_path / 'marker'
    torch.save({'state_dict': {}, 'x': Marker(str(marker))},
               served / 'evil.pth')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(served))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f'http://127.0.0.1:{server.server_address[1]}'
    try:
        good = read_checkpoint(f'{url}/good.pth')
        assert torch.equal(good['state_dict']['w'], torch.ones(2))
        with pytest.raises(pickle.UnpicklingError):
            read_checkpoint(f'{url}/evil.pth')
    finally:
        server.shutdown()
    assert not marker.exists()
