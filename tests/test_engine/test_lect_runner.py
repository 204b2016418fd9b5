"""LectRunner: one run per work dir, with a lock that a kill -9 does not
leave stale and that never leaves a DDP rank waiting."""
import multiprocessing
import os
import os.path as osp
import subprocess
import sys
import textwrap

import pytest
from mmengine.registry import RUNNERS
from tiny_run_utils import tiny_cfg

from lect_mm.engine import LectRunner, WorkDirInUseError
from lect_mm.engine import runner as runner_module
from lect_mm.engine import workdir
from lect_mm.engine.workdir import WorkDirLock


def _log_dirs(work_dir):
    return [d for d in os.listdir(work_dir)
            if osp.isdir(osp.join(work_dir, d))]


# ------------------------------------------------------- one run per dir
def test_second_run_in_a_work_dir_refuses(tmp_path):
    first = RUNNERS.build(
        tiny_cfg(tmp_path, 'lock_first', train_cfg=dict(max_epochs=1),
                 train_dataloader=dict(dataset=dict(indices=16)),
                 val_cfg=None, val_dataloader=None, val_evaluator=None,
                 log_level='WARNING'))
    assert isinstance(first, LectRunner)
    with pytest.raises(WorkDirInUseError) as info:
        RUNNERS.build(tiny_cfg(tmp_path, 'lock_second'))
    assert str(tmp_path) in str(info.value)
    assert f'pid {os.getpid()}' in str(info.value)
    assert len(_log_dirs(tmp_path)) == 1  # the refused run wrote nothing
    first.train()  # releases the work dir when it returns
    RUNNERS.build(tiny_cfg(tmp_path, 'lock_third')).release_work_dir()


def test_lock_of_a_killed_run_is_not_stale(tmp_path):
    # A bare process (no torch) takes the lock, then is killed with -9.
    code = textwrap.dedent(f'''
        import importlib.util, time
        spec = importlib.util.spec_from_file_location(
            'workdir', {workdir.__file__!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        lock = module.WorkDirLock({str(tmp_path)!r}).acquire()
        print('locked', flush=True)
        time.sleep(600)
        ''')
    proc = subprocess.Popen([sys.executable, '-c', code],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == 'locked'
        with pytest.raises(WorkDirInUseError, match=f'pid {proc.pid} '):
            WorkDirLock(str(tmp_path)).acquire()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with WorkDirLock(str(tmp_path)) as lock:
        assert lock.held


def test_every_rank_raises_when_rank_0_finds_the_dir_taken(
        tmp_path, monkeypatch):
    # Rank 1 does not touch the lock; it gets rank 0's verdict and raises
    # too, instead of waiting in a collective for a rank that stopped.
    def broadcast(box, src=0):
        assert src == 0
        box[0] = 'Work dir X is in use by another run (pid 1)'

    monkeypatch.setattr(runner_module, 'get_dist_info', lambda: (1, 2))
    monkeypatch.setattr(runner_module, 'broadcast_object_list', broadcast)
    with pytest.raises(WorkDirInUseError, match='pid 1'):
        runner_module._claim_work_dir(str(tmp_path), 'run', True)
    assert not os.listdir(tmp_path)


def test_a_failed_log_folder_leaves_the_work_dir_unlocked(
        tmp_path, monkeypatch):
    mkdir = os.mkdir

    def full_disk(path, *args):
        if osp.basename(path) == 'run':  # the log folder, not the lock's
            raise OSError(28, 'No space left on device', path)
        mkdir(path, *args)

    monkeypatch.setattr(runner_module.os, 'mkdir', full_disk)
    with pytest.raises(OSError, match='No space left') as info:
        runner_module._claim_work_dir(str(tmp_path), 'run', True)
    monkeypatch.undo()
    # free while the error (and its traceback's frames) is still held
    WorkDirLock(str(tmp_path)).acquire().release()
    assert info.value.errno == 28


def test_forked_children_do_not_keep_the_work_dir_locked(tmp_path):
    """A data loader worker forked while the lock is held must not hold it
    after the run is gone (kill -9 of a run with persistent workers)."""
    import os

    from lect_mm.engine.workdir import WorkDirInUseError, WorkDirLock
    lock = WorkDirLock(str(tmp_path)).acquire()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the "worker": outlives the parent's lock below
        os.close(read)
        os.read(os.open(os.devnull, os.O_RDONLY), 1)
        os.write(write, b'x')
        os.close(write)
        import time
        time.sleep(2)
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b'x'
        # a second run is refused while this one holds the lock ...
        with pytest.raises(WorkDirInUseError):
            WorkDirLock(str(tmp_path)).acquire()
        # ... and free as soon as this one lets go, though the child lives
        lock._file.close()
        WorkDirLock(str(tmp_path)).acquire().release()
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


# ------------------------------------------------- persistent loader workers
def test_persistent_workers_end_when_train_returns(tmp_path):
    # Left to the garbage collector (the runner is in reference cycles),
    # each worker would stop only after torch's 5 s join timeout.
    runner = RUNNERS.build(
        tiny_cfg(tmp_path, 'workers_end', train_cfg=dict(max_epochs=1),
                 train_dataloader=dict(num_workers=2, persistent_workers=True,
                                       dataset=dict(indices=16)),
                 val_dataloader=dict(num_workers=1, persistent_workers=True),
                 log_level='WARNING'))
    runner.train()
    assert multiprocessing.active_children() == []
    assert runner.val()['accuracy/top1'] >= 0  # a later loop starts anew
    assert multiprocessing.active_children() == []
