"""Checkpoints are written atomically with a digest, load without lect_mm,
and a missing, empty, truncated or altered file is refused by name."""
import io
import logging
import os
import shutil
import zipfile

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer, MMLogger
from mmengine.registry import RUNNERS
from tiny_run_utils import tiny_cfg

from lect_mm.engine import (RNGStateHook, SafeCheckpointHook, checkpoint_io,
                            checkpoints, hooks)
from lect_mm.engine.checkpoint_io import (CheckpointError,
                                          CheckpointNotFoundError, add_digest,
                                          atomic_write, from_plain,
                                          read_checkpoint,
                                          remove_stale_temporaries, to_plain,
                                          verify_checkpoint_file)


@pytest.fixture(scope='module')
def run_dir(tmp_path_factory):
    """A real 1-epoch run: epoch_1.pth, best_accuracy_top1_epoch_1.pth."""
    work_dir = tmp_path_factory.mktemp('io_run')
    RUNNERS.build(
        tiny_cfg(work_dir, 'io_run', train_cfg=dict(max_epochs=1),
                 train_dataloader=dict(dataset=dict(indices=16)),
                 log_level='WARNING')).train()
    return work_dir


def test_written_checkpoints_carry_a_digest(run_dir):
    for name in ('epoch_1.pth', 'best_accuracy_top1_epoch_1.pth'):
        path = str(run_dir / name)
        with zipfile.ZipFile(path) as archive:
            assert 'archive/lect_mm_sha256' in archive.namelist()
        assert len(verify_checkpoint_file(path)) == 64
    # the pointer names an intact file; no temporary file is left.
    assert (run_dir / 'last_checkpoint').read_text() == str(
        run_dir / 'epoch_1.pth')
    assert not [f for f in os.listdir(run_dir) if f.endswith('.tmp')]


def test_written_checkpoint_loads_without_lect_mm(run_dir):
    # With no safe globals at all, as in a process that never imported it.
    path = str(run_dir / 'epoch_1.pth')
    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        assert torch.serialization.get_unsafe_globals_in_checkpoint(
            path) == []
        plain = torch.load(path, map_location='cpu', weights_only=True)
    finally:
        torch.serialization.add_safe_globals(registered)
    assert set(plain) >= {'meta', 'state_dict', 'message_hub', 'optimizer',
                          'param_schedulers', 'rng_state'}
    # lect_mm's loader gives mmengine's objects back.
    ckpt = read_checkpoint(path, map_location='cpu')
    loss = ckpt['message_hub']['log_scalars']['train/loss']
    assert isinstance(loss, HistoryBuffer) and np.isfinite(loss.mean())
    assert isinstance(ckpt['rng_state']['numpy'][1], np.ndarray)
    assert ckpt['rng_state']['numpy'][1].dtype == np.uint32
    assert 'lect_mm_sha256' not in str(list(ckpt))


def test_resume_verifies_its_checkpoint_once(run_dir, tmp_path,
                                             monkeypatch):
    """--resume finds the latest checkpoint intact and loads it: its bytes
    are hashed once, not once to find it and once to load it; its plain
    data are decoded once, by the loader, not again by the hooks."""
    work_dir = tmp_path / 'run'
    shutil.copytree(run_dir, work_dir)
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_1.pth'))
    hashed = []
    verify = checkpoint_io.verify_checkpoint_bytes

    def counting(data, path):
        hashed.append(os.path.basename(path))
        return verify(data, path)

    monkeypatch.setattr(checkpoint_io, 'verify_checkpoint_bytes', counting)
    decoded_again = []
    for module in (checkpoints, hooks):
        monkeypatch.setattr(module, 'from_plain', decoded_again.append)
    runner = RUNNERS.build(
        tiny_cfg(work_dir, 'io_resume_once', resume=True,
                 train_cfg=dict(max_epochs=2),
                 train_dataloader=dict(dataset=dict(indices=16)),
                 log_level='WARNING'))
    runner.train()
    assert runner.epoch == 2
    assert hashed.count('epoch_1.pth') == 1
    assert decoded_again == []


def test_hooks_decode_what_mmengines_runner_loads():
    """mmengine's own Runner loads the plain data as written: lect_mm's
    hooks decode it (RNGStateHook first, by its priority)."""
    rng = dict(numpy=('MT19937', np.arange(3, dtype=np.uint32), 1, 0, 0.0))
    buffer = HistoryBuffer([2.0], [1], max_length=5)

    class MMEngineRunner:
        epoch = 0

    rng_hook = RNGStateHook()
    checkpoint = to_plain(dict(meta=dict(epoch=0), rng_state=rng,
                               message_hub=dict(loss=buffer)))
    rng_hook.after_load_checkpoint(MMEngineRunner(), checkpoint)
    assert rng_hook._state['numpy'][1].dtype == np.uint32
    SafeCheckpointHook().after_load_checkpoint(MMEngineRunner(), checkpoint)
    assert isinstance(checkpoint['message_hub']['loss'], HistoryBuffer)
    assert isinstance(checkpoint['rng_state']['numpy'][1], np.ndarray)


def _empty(path, record):
    open(path, 'wb').close()


def _truncate(path, record):
    size = os.path.getsize(path)
    with open(path, 'r+b') as file:
        file.truncate(size // 2)


def _flip(path, record):
    offset, _ = record(path)
    with open(path, 'r+b') as file:
        file.seek(offset + 5)
        byte = file.read(1)
        file.seek(offset + 5)
        file.write(bytes([byte[0] ^ 0xFF]))


def _alter(path, record):
    """Change a tensor and fix its zip CRC: only the digest can tell."""
    _, info = record(path)
    with zipfile.ZipFile(path) as archive:
        records = [(i, archive.read(i)) for i in archive.infolist()]
    with zipfile.ZipFile(path, 'w') as archive:
        for record, data in records:
            if record.filename == info.filename:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            archive.writestr(record, data)


@pytest.mark.parametrize('damage, reason', [
    (_empty, 'is empty'),
    (_truncate, 'is truncated'),
    (_flip, 'Bad CRC-32'),
    (_alter, 'SHA-256'),
])
def test_damaged_checkpoint_is_refused_by_name(run_dir, tmp_path, damage,
                                               reason, largest_tensor_record):
    path = str(tmp_path / 'epoch_1.pth')
    shutil.copy(run_dir / 'epoch_1.pth', path)
    damage(path, largest_tensor_record)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path, map_location='cpu')  # LectRunner's
    assert path in str(info.value) and reason in str(info.value)
    # torch alone would have accepted a flipped tensor byte.
    if damage is _flip:
        torch.load(path, weights_only=True)


def test_missing_checkpoint_is_named(tmp_path):
    path = str(tmp_path / 'nope.pth')
    with pytest.raises(CheckpointNotFoundError, match='nope.pth') as info:
        read_checkpoint(path)
    assert isinstance(info.value, FileNotFoundError)


def test_checkpoint_that_is_no_dict_is_named(tmp_path):
    from lect_mm.engine import load_weights
    path = str(tmp_path / 'list.pth')
    torch.save([torch.ones(2)], path)
    with pytest.raises(CheckpointError, match='list.pth holds a list, not a'):
        load_weights(torch.nn.Linear(2, 2), path)


def test_file_without_digest_still_loads(tmp_path, largest_tensor_record):
    # converted / third-party weights: loaded, said so, CRCs still checked.
    path = str(tmp_path / 'converted.pth')
    torch.save({'state_dict': {'w': torch.arange(1000.)}}, path)
    logger = MMLogger.get_current_instance()
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        ckpt = read_checkpoint(path, map_location='cpu')
    finally:
        logger.removeHandler(handler)
    assert torch.equal(ckpt['state_dict']['w'], torch.arange(1000.))
    assert any('carries no lect_mm digest' in r.getMessage()
               for r in records)
    _flip(path, largest_tensor_record)
    with pytest.raises(CheckpointError, match='Bad CRC-32'):
        read_checkpoint(path)


def test_add_digest_keeps_torch_loading():
    buffer = io.BytesIO()
    torch.save({'x': torch.ones(3)}, buffer)
    data = add_digest(buffer.getvalue())
    assert torch.equal(torch.load(io.BytesIO(data))['x'], torch.ones(3))
    assert add_digest(data) == data  # idempotent
    assert add_digest(b'not a zip') == b'not a zip'


def test_atomic_write_leaves_old_file_when_killed_midway(tmp_path,
                                                         monkeypatch):
    path = str(tmp_path / 'epoch_2.pth')
    atomic_write(path, b'old complete content')

    class Killed(BaseException):
        pass

    def write_half(file, data):
        file.write(data[:len(data) // 2])
        file.flush()
        raise Killed

    monkeypatch.setattr(checkpoint_io, '_write_synced', write_half)
    with pytest.raises(Killed):
        atomic_write(path, b'new content that never completes')
    with open(path, 'rb') as file:
        assert file.read() == b'old complete content'
    assert os.listdir(tmp_path) == ['epoch_2.pth']


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = tmp_path / '.epoch_3.pth.999999999.tmp'
    alive = tmp_path / f'.epoch_4.pth.{os.getpid()}.tmp'
    other = tmp_path / 'epoch_3.pth'
    for path in (dead, alive, other):
        path.write_bytes(b'x')
    assert remove_stale_temporaries(str(tmp_path)) == [str(dead)]
    assert sorted(os.listdir(tmp_path)) == sorted([alive.name, other.name])


def test_plain_state_round_trip_is_exact():
    buffer = HistoryBuffer([1.5, 2.25], [1, 2], max_length=7)
    state = dict(
        hub=dict(loss=buffer, score=np.float64(0.1), n=np.int64(3)),
        rng=('MT19937', np.arange(5, dtype=np.uint32), 2, 0, 0.0),
        weights=torch.ones(2),
        flags=dict(keep=True))
    plain = to_plain(state)
    assert plain['flags'] is state['flags']  # untouched parts are shared
    assert plain['weights'] is state['weights']
    back = from_plain(plain)
    assert back['hub']['loss'].max_length == 7
    assert np.array_equal(back['hub']['loss'].data[0], [1.5, 2.25])
    assert back['hub']['score'] == np.float64(0.1)
    assert type(back['hub']['n']) is np.int64
    assert isinstance(back['rng'], tuple)
    assert back['rng'][1].dtype == np.uint32
    assert np.array_equal(back['rng'][1], np.arange(5))
