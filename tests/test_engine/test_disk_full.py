"""A full disk stops a run at its first failed write with one error naming
the file and the last intact checkpoint, which --resume then takes.

The disk is filled by injection: from a given iteration on, every write of
the run's process into its work dir fails with ``ENOSPC``, as on a full
file system (the run is a forked process, where Python's ``open`` is
wrapped; no mount needed). A failed checkpoint write is injected in-process
at lect_mm's write function."""
import builtins
import errno
import logging
import os
import re
import sys

import pytest
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmpretrain.registry import HOOKS
from test_preemption import _fork
from tiny_run_utils import TINY_CONFIG, tiny_cfg, wait_for_child

from lect_mm.engine import (DiskFullError, RunCheckpoints, checkpoint_io,
                            verify_checkpoint_file)
from lect_mm.engine.checkpoint_io import atomic_write
from lect_mm.engine.write_errors import GuardedFileHandler

FULL = {'on': False}


class _FullDiskFile:
    """A file whose writes fail with ENOSPC once ``FULL['on']``."""

    def __init__(self, file):
        self._file = file

    def _check(self):
        if FULL['on']:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, data):
        self._check()
        return self._file.write(data)

    def flush(self):
        self._check()
        return self._file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def __iter__(self):
        return iter(self._file)

    def __getattr__(self, name):
        return getattr(self._file, name)


def _fill_the_disk_under(work_dir):
    """In this (child) process: files opened under ``work_dir`` for writing
    fail to write once ``FULL['on']``, and cannot be created then."""
    real_open = builtins.open
    work_dir = os.path.abspath(work_dir)

    def full_open(file, mode='r', *args, **kwargs):
        path = os.path.abspath(os.fspath(file)) if isinstance(
            file, (str, bytes, os.PathLike)) else ''
        writing = any(m in mode for m in 'wax+')
        if not (writing and path.startswith(work_dir)):
            return real_open(file, mode, *args, **kwargs)
        if FULL['on'] and not os.path.exists(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return _FullDiskFile(real_open(file, mode, *args, **kwargs))

    builtins.open = full_open
    logging.FileHandler._builtin_open = full_open


@HOOKS.register_module(force=True)
class FillTheDiskHook(Hook):
    """The disk is full from before iteration ``iteration`` on."""

    def __init__(self, iteration):
        self.iteration = iteration

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == self.iteration:
            FULL['on'] = True


@pytest.mark.heavy
@pytest.mark.skipif(sys.platform == 'win32', reason='needs fork')
def test_disk_full_inside_epoch_2_stops_at_the_first_failed_write(
        load_script, tmp_path):
    work_dir = tmp_path / 'work'
    config = tmp_path / 'full_disk.py'
    config.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        "custom_hooks = [dict(type='FillTheDiskHook', iteration=5)]\n")
    train = load_script('tools/train.py')

    def child():
        _fill_the_disk_under(work_dir)
        train.main([str(config), '--work-dir', str(work_dir),
                    '--cfg-options', 'experiment_name=disk_full'])

    status = wait_for_child(_fork(child, tmp_path / 'run.log'))
    output = (tmp_path / 'run.log').read_text()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1, output
    # one error, naming the log file the iteration's log line went to
    assert 'Logging error' not in output
    log_dirs = [d for d in os.listdir(work_dir)
                if os.path.isdir(work_dir / d)]
    log_file = work_dir / log_dirs[0] / f'{log_dirs[0]}.log'
    assert output.count('could not write') == 1
    assert re.search(
        r'DiskFullError: No space left on device \(errno 28\): could not '
        f'write the log {re.escape(str(log_file))}.', output), output
    assert (f'its last checkpoint, {work_dir / "epoch_1.pth"}, is intact: '
            'free some space, then train again with --resume.') in output
    # it stopped at that write: iteration 6 was logged (on the console),
    # iteration 7 never ran
    assert 'Epoch(train) [2][2/4]' in output
    assert 'Epoch(train) [2][3/4]' not in output
    # the checkpoint of epoch 1 is intact, named, and taken by --resume
    assert sorted(f for f in os.listdir(work_dir) if f.endswith('.pth')) == [
        'best_accuracy_top1_epoch_1.pth', 'epoch_1.pth']
    assert not [f for f in os.listdir(work_dir) if f.endswith('.tmp')]
    assert RunCheckpoints(str(work_dir)).latest() == str(work_dir /
                                                         'epoch_1.pth')
    resumed = train.main([str(TINY_CONFIG), '--work-dir', str(work_dir),
                          '--resume', '--cfg-options',
                          'experiment_name=disk_full_resumed'])
    assert resumed.iter == 8


def test_disk_full_during_a_checkpoint_write(tmp_path, monkeypatch):
    """The write of epoch_2.pth fails: the run stops with the error naming
    it; epoch_1.pth and last_checkpoint are as they were."""

    def full(file, data):
        if '.epoch_2.pth.' in os.path.basename(file.name):
            file.write(data[:100])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        file.write(data)
        file.flush()

    monkeypatch.setattr(checkpoint_io, '_write_synced', full)
    runner = RUNNERS.build(tiny_cfg(
        tmp_path, 'disk_full_checkpoint', log_level='WARNING',
        train_dataloader=dict(dataset=dict(indices=16)),
        val_cfg=None, val_dataloader=None, val_evaluator=None))
    with pytest.raises(DiskFullError) as info:
        runner.train()
    assert str(info.value) == (
        'No space left on device (errno 28): could not write '
        f'{tmp_path / "epoch_2.pth"}.')
    assert info.value.errno == errno.ENOSPC
    assert f'its last checkpoint, {tmp_path / "epoch_1.pth"}, is intact' in \
        info.value.__notes__[0]
    assert sorted(f for f in os.listdir(tmp_path)
                  if f.endswith(('.pth', '.tmp'))) == ['epoch_1.pth']
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path /
                                                             'epoch_1.pth')
    verify_checkpoint_file(str(tmp_path / 'epoch_1.pth'))


def test_atomic_write_on_a_full_disk_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / 'epoch_3.pth'
    path.write_bytes(b'old')

    def full(file, data):
        file.write(data[:2])
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(checkpoint_io, '_write_synced', full)
    with pytest.raises(DiskFullError, match=re.escape(f'write {path}.')) as \
            info:
        atomic_write(str(path), b'new content')
    assert info.value.errno == errno.EDQUOT
    assert isinstance(info.value, OSError)
    assert path.read_bytes() == b'old'
    assert os.listdir(tmp_path) == ['epoch_3.pth']


def test_guarded_log_file_raises_once_then_stays_quiet(tmp_path, capsys):
    handler = GuardedFileHandler(str(tmp_path / 'run.log'))
    logger = logging.getLogger('lect_mm_test_guarded_log')
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.warning('written')
        handler.stream = _FullDiskFile(handler.stream)
        FULL['on'] = True
        with pytest.raises(DiskFullError, match=re.escape(
                f'could not write the log {tmp_path / "run.log"}.')):
            logger.warning('the disk is full')
        logger.warning('dropped, quietly')
    finally:
        FULL['on'] = False
        logger.removeHandler(handler)
        handler.close()
    assert (tmp_path / 'run.log').read_text() == 'written\n'
    assert capsys.readouterr().err == ''
    assert isinstance(handler.error, DiskFullError)
