"""A training that gets SIGTERM (a scheduler's preemption) stops after the
iteration in progress with a resumable checkpoint of it (exit status 75),
and ``--resume`` ends with exactly the weights and the logged losses of an
uninterrupted run, in 1 and 2 processes. The runs are real processes that
the test signals with ``os.kill``, forked from the test so that nothing is
imported again (a ``tools/dist_train.sh`` start costs seconds per rank):
the 2-process runs are ``tools/train.py --launcher pytorch`` in 2 forked
processes given torchrun's environment, leaving through the tool's exit
path for launched processes.
"""
import hashlib
import json
import os
import os.path as osp
import random
import signal
import socket
import sys
import time
import traceback

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmpretrain.registry import HOOKS
from tiny_run_utils import (TINY_CONFIG, final_state, import_what_runs_import,
                            logged_losses, tiny_cfg, tiny_runner,
                            wait_for_child)

from lect_mm.cli import exit_launched_process
from lect_mm.engine import (PREEMPTED_EXIT_CODE, CheckpointError,
                            RunCheckpoints, TrainingPreempted, checkpoint_io,
                            verify_checkpoint_file)
from lect_mm.engine.preemption import StopSignals

# The iteration of epoch 2 at which the signal comes is drawn from this
# seed (epochs of 4 iterations: the 5th to 7th, so that the run stops
# inside the epoch; the epoch's end is the in-process test's).
SEED = 22
STOP_AT = random.Random(SEED).choice([4, 5, 6])  # runner.iter, from 0


def _sha256(path):
    with open(path, 'rb') as file:
        return hashlib.sha256(file.read()).hexdigest()


@pytest.fixture(scope='module')
def uninterrupted_run(tmp_path_factory):
    """The tiny config's 2 epochs, without workers (the stopped runs use 2
    persistent ones), with mmengine's own Runner and training loop."""
    work_dir = tmp_path_factory.mktemp('full')
    runner = tiny_runner(work_dir, 'preempt_full')
    runner.train()
    return final_state(runner), logged_losses(work_dir)


@HOOKS.register_module(force=True)
class WaitForSignalHook(Hook):
    """Before iteration ``iteration`` (``runner.iter``), on rank ``rank``:
    write ``<work_dir>/reached`` (this pid and, on rank 0, which wrote it,
    the SHA-256 of epoch_1.pth) and wait until the test has signalled this
    process (``<work_dir>/sent``).
    """

    def __init__(self, iteration, rank=0):
        self.iteration = iteration
        self.rank = rank

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter != self.iteration or runner.rank != self.rank:
            return
        epoch_1 = osp.join(runner.work_dir, 'epoch_1.pth')
        with open(osp.join(runner.work_dir, 'reached.tmp'), 'w') as f:
            json.dump(dict(pid=os.getpid(), epoch_1=_sha256(epoch_1)
                           if runner.rank == 0 else None), f)
        os.replace(osp.join(runner.work_dir, 'reached.tmp'),
                   osp.join(runner.work_dir, 'reached'))
        deadline = time.monotonic() + 120
        while not osp.exists(osp.join(runner.work_dir, 'sent')):
            assert time.monotonic() < deadline, 'no signal came'
            time.sleep(0.01)


@HOOKS.register_module(force=True)
class SignalSelfHook(Hook):
    """``os.kill(own pid, sig)`` before training iteration ``iteration``,
    or with ``validation=True`` in the validation after it."""

    def __init__(self, iteration, sig='SIGTERM', validation=False):
        self.iteration = iteration
        self.sig = signal.Signals[sig]
        self.validation = validation

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == self.iteration and not self.validation:
            os.kill(os.getpid(), self.sig)

    def before_val_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == self.iteration + 1 and self.validation:
            os.kill(os.getpid(), self.sig)


def _signal_in_the_middle_of_stop_writes(sig):
    """In this (child) process: every write of an ``iter_*.pth`` checkpoint
    sends ``sig`` to the process when half of its bytes are on disk."""
    write = checkpoint_io._write_synced

    def write_and_signal(file, data):
        if '.iter_' not in osp.basename(file.name):
            return write(file, data)
        file.write(data[:len(data) // 2])
        file.flush()
        os.kill(os.getpid(), sig)
        file.write(data[len(data) // 2:])
        file.flush()
        os.fsync(file.fileno())

    checkpoint_io._write_synced = write_and_signal


def _fork(body, log):
    """Run ``body()`` in a forked child, the leader of a new process group
    (so that ``os.killpg`` signals it and the loader workers it starts, as a
    scheduler signals every process of a job), whose output goes to
    ``log``; its exit status: 0, a ``SystemExit``'s code, or 1 on an
    exception."""
    import_what_runs_import()
    pid = os.fork()
    if pid != 0:
        return pid
    status = 1
    try:
        os.setpgid(0, 0)
        out = open(log, 'w', buffering=1)
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.stdout = sys.stderr = out
        torch.set_num_threads(1)  # as DataLoader's forked workers
        body()
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(status)  # never back into pytest


def _wait_for_file(path, pid, timeout=300):
    deadline = time.monotonic() + timeout
    while not osp.exists(path):
        done, status = os.waitpid(pid, os.WNOHANG)
        assert not done, f'the run ended before {path} ({status})'
        assert time.monotonic() < deadline, f'no {path}'
        time.sleep(0.02)


LOADER = ['train_dataloader.num_workers=2',
          'train_dataloader.persistent_workers=True']


def _no_temporary_files(work_dir):
    return [f for f in os.listdir(work_dir) if f.endswith('.tmp')] == []


@pytest.mark.heavy
@pytest.mark.skipif(sys.platform == 'win32', reason='needs fork, SIGTERM')
def test_sigterm_inside_epoch_2_then_resume_is_exact(uninterrupted_run,
                                                     load_script, tmp_path):
    """tools/train.py with 2 persistent workers gets SIGTERM from this test
    at a (seeded) random iteration inside epoch 2, sent to its process
    group (its loader workers get it too, as from a scheduler), and a
    second SIGTERM while it writes its checkpoint: it writes ``iter_N.pth``
    whole, leaves epoch_1.pth as it was, exits with 75; ``--resume`` ends
    exactly as the uninterrupted run (which used no workers at all)."""
    work_dir = tmp_path / 'work'
    train = load_script('tools/train.py')
    config = tmp_path / 'stopped.py'
    config.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        f"custom_hooks = [dict(type='WaitForSignalHook', "
        f"iteration={STOP_AT})]\n")

    def child():
        _signal_in_the_middle_of_stop_writes(signal.SIGTERM)
        train.main([str(config), '--work-dir', str(work_dir), '--cfg-options',
                    *LOADER, 'experiment_name=preempt_stopped'])

    pid = _fork(child, tmp_path / 'stopped.log')
    _wait_for_file(work_dir / 'reached', pid)
    reached = json.loads((work_dir / 'reached').read_text())
    assert reached['pid'] == pid
    os.killpg(pid, signal.SIGTERM)
    (work_dir / 'sent').touch()
    status = wait_for_child(pid)
    log = (tmp_path / 'stopped.log').read_text()
    assert os.WIFEXITED(status), log[-3000:]
    assert os.WEXITSTATUS(status) == PREEMPTED_EXIT_CODE, log[-3000:]

    done = STOP_AT + 1
    # the second signal came during the write, and did not interrupt it
    assert (f'SIGTERM (2 signals received): stopped after iteration {done} '
            f'(epoch 2, iteration {done - 4} of 4)') in log
    stop_checkpoint = work_dir / f'iter_{done}.pth'
    assert (work_dir / 'last_checkpoint').read_text() == str(stop_checkpoint)
    verify_checkpoint_file(str(stop_checkpoint))
    meta = torch.load(stop_checkpoint, weights_only=True)['meta']
    assert (meta['epoch'], meta['iter'], meta['inner_iter']) == (1, done,
                                                                 done - 4)
    assert meta['stop_signal'] == 'SIGTERM'
    # the earlier checkpoints untouched, nothing partial anywhere
    assert _sha256(work_dir / 'epoch_1.pth') == reached['epoch_1']
    assert not (work_dir / 'epoch_2.pth').exists()
    assert _no_temporary_files(work_dir)
    assert 'Traceback' not in log

    resumed = train.main([
        TINY_CONFIG, '--work-dir', str(work_dir), '--resume',
        '--cfg-options', *LOADER, 'experiment_name=preempt_resumed'])
    assert resumed.iter == 8
    reference, reference_losses = uninterrupted_run
    state = final_state(resumed)
    assert [k for k in reference if not torch.equal(reference[k],
                                                    state[k])] == []
    losses = logged_losses(work_dir)
    assert sorted(losses) == list(range(1, 9))
    assert losses == reference_losses
    # epoch_2.pth replaced the stop checkpoint
    assert not stop_checkpoint.exists()
    assert (work_dir / 'last_checkpoint').read_text() == str(
        work_dir / 'epoch_2.pth')


@pytest.mark.heavy
@pytest.mark.skipif(sys.platform == 'win32', reason='needs fork, SIGTERM')
def test_sigterm_at_the_end_of_an_epoch_then_resume_is_exact(
        uninterrupted_run, tmp_path):
    """The signal comes in the last iteration of epoch 2 (the last one):
    the run stops before that epoch's checkpoint and validation; the
    resumed run does them and ends exactly as the uninterrupted one. A
    checkpoint written inside an epoch is not resumed with another batch
    size."""

    def lect_runner(name, **options):
        return RUNNERS.build(tiny_cfg(tmp_path, name, **options))

    pid = _fork(lambda: lect_runner(
        'preempt_edge',
        custom_hooks=[dict(type='SignalSelfHook', iteration=7)]).train(),
        tmp_path / 'stopped.log')
    status = wait_for_child(pid)
    log = (tmp_path / 'stopped.log').read_text()
    assert os.WIFEXITED(status), log[-3000:]
    assert os.WEXITSTATUS(status) == PREEMPTED_EXIT_CODE, log[-3000:]
    assert 'stopped after iteration 8 (epoch 2, iteration 4 of 4)' in log
    assert not (tmp_path / 'epoch_2.pth').exists()

    with pytest.raises(CheckpointError, match='iter_8.pth was written inside '
                       'epoch 2, after its iteration 4 of 4 .*this run has 8 '
                       r'iterations per epoch \(1 process, batch size 8\)'):
        lect_runner('preempt_edge_bs8', resume=True,
                    train_dataloader=dict(batch_size=8)).train()

    resumed = lect_runner('preempt_edge_resumed', resume=True)
    resumed.train()
    reference, reference_losses = uninterrupted_run
    state = final_state(resumed)
    assert [k for k in reference if not torch.equal(reference[k],
                                                    state[k])] == []
    assert logged_losses(tmp_path) == reference_losses
    assert not (tmp_path / 'iter_8.pth').exists()


@pytest.mark.skipif(sys.platform == 'win32', reason='needs fork, SIGKILL')
def test_grace_period_running_out_during_the_write(tmp_path):
    """SIGTERM, then the scheduler's SIGKILL while the stop checkpoint is
    written: no file under its name, the previous checkpoint intact and
    named by last_checkpoint, so --resume takes it."""
    options = dict(train_dataloader=dict(dataset=dict(indices=32)),
                   val_cfg=None, val_dataloader=None, val_evaluator=None,
                   log_level='WARNING')

    def child():
        _signal_in_the_middle_of_stop_writes(signal.SIGKILL)
        RUNNERS.build(tiny_cfg(
            tmp_path, 'preempt_killed', **options,
            custom_hooks=[dict(type='SignalSelfHook', iteration=2)])).train()

    status = wait_for_child(_fork(child, tmp_path / 'killed.log'))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
        (tmp_path / 'killed.log').read_text()[-3000:]
    assert not (tmp_path / 'iter_3.pth').exists()
    partial = [f for f in os.listdir(tmp_path) if f.endswith('.tmp')]
    assert len(partial) == 1 and partial[0].startswith('.iter_3.pth.')
    assert RunCheckpoints(str(tmp_path)).latest() == str(tmp_path /
                                                         'epoch_1.pth')


def test_handlers_are_installed_only_while_training(tmp_path):
    """import and build install nothing; train() installs the handlers and
    puts the previous ones back when it returns or raises; a run stopped
    in-process raises TrainingPreempted, a SystemExit with status 75."""
    seen = []

    @HOOKS.register_module(force=True)
    class RecordHandlerHook(Hook):

        def before_train_iter(self, runner, batch_idx, data_batch=None):
            seen.append(signal.getsignal(signal.SIGUSR1))

    def previous(signum, frame):
        raise AssertionError('the run must catch the signal')

    # 1 iteration per epoch
    options = dict(train_dataloader=dict(dataset=dict(indices=16)),
                   val_dataloader=dict(dataset=dict(indices=8)),
                   train_cfg=dict(max_epochs=2), log_level='WARNING')
    old = signal.signal(signal.SIGUSR1, previous)
    try:
        runner = RUNNERS.build(tiny_cfg(
            tmp_path / 'a', 'preempt_handlers', **options,
            custom_hooks=[dict(type='RecordHandlerHook')]))
        assert signal.getsignal(signal.SIGUSR1) is previous
        runner.train()
        assert signal.getsignal(signal.SIGUSR1) is previous
        assert len(seen) == 2 and seen[0] is not previous

        # the signal comes during the validation of epoch 1: the run stops
        # before epoch 2
        stopped = RUNNERS.build(tiny_cfg(
            tmp_path / 'b', 'preempt_in_process', **options,
            stop_signals='SIGUSR1',
            custom_hooks=[dict(type='SignalSelfHook', iteration=0,
                               sig='SIGUSR1', validation=True)]))
        with pytest.raises(TrainingPreempted) as info:
            stopped.train()
        assert signal.getsignal(signal.SIGUSR1) is previous
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert isinstance(info.value, SystemExit) and info.value.code == 75
    assert str(info.value) == (
        f'SIGUSR1: stopped after iteration 1 (before epoch 2). Saved '
        f'{tmp_path / "b" / "iter_1.pth"}; train again with --resume to go '
        'on from there.')
    assert info.value.signal == 'SIGUSR1' and info.value.iteration == 1
    assert info.value.checkpoint == str(tmp_path / 'b' / 'iter_1.pth')
    meta = torch.load(info.value.checkpoint, weights_only=True)['meta']
    assert (meta['epoch'], meta['iter'], meta['inner_iter']) == (1, 1, 0)


def test_a_run_that_cannot_stop_cleanly_says_so(tmp_path, capsys):
    """mmengine's own loop cannot resume inside an epoch: the signals keep
    their usual effect, and the log says why."""
    seen = []

    @HOOKS.register_module(force=True)
    class RecordTermHandlerHook(Hook):

        def before_train_iter(self, runner, batch_idx, data_batch=None):
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    RUNNERS.build(tiny_cfg(
        tmp_path, 'preempt_cannot', log_level='WARNING',
        train_dataloader=dict(dataset=dict(indices=16)),
        val_cfg=None, val_dataloader=None, val_evaluator=None,
        train_cfg=dict(_delete_=True, type='EpochBasedTrainLoop',
                       max_epochs=1),
        custom_hooks=[dict(type='RecordTermHandlerHook')])).train()
    assert seen == [before]
    assert ('stop_signals: SIGTERM, SIGUSR1 keep their usual effect in this '
            'run (it ends without a checkpoint): stopping cleanly needs an '
            'epoch-based train loop') in capsys.readouterr().out


@pytest.mark.parametrize('value, names', [
    (None, []), ([], []), ('SIGTERM', ['SIGTERM']),
    ('TERM,usr1', ['SIGTERM', 'SIGUSR1']),
    (['SIGUSR1', 15, 'SIGUSR1'], ['SIGUSR1', 'SIGTERM']),
])
def test_stop_signals_values(value, names):
    assert [s.name for s in StopSignals(value).signals] == names


@pytest.mark.parametrize('value, message', [
    ('SIGTERN', "'SIGTERN' is not a signal"),
    (['SIGKILL'], 'SIGKILL cannot be caught'),
])
def test_stop_signals_mistakes_are_named(value, message):
    with pytest.raises(ValueError, match=f'stop_signals: {message}'):
        StopSignals(value)


# ------------------------------------------------------------ 2 processes
def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _fork_ranks(train, args, log_prefix):
    """``tools/train.py ARGS --launcher pytorch`` in 2 forked processes
    with the environment torchrun gives its ranks; their pids."""
    port = _free_port()
    pids = []
    for rank in (0, 1):

        def rank_body(rank=rank):
            os.environ.update(RANK=str(rank), WORLD_SIZE='2',
                              LOCAL_RANK=str(rank), MASTER_ADDR='127.0.0.1',
                              MASTER_PORT=str(port))
            exit_launched_process(train.main,
                                  [*args, '--launcher', 'pytorch'])

        pids.append(_fork(rank_body, f'{log_prefix}_rank{rank}.log'))
    return pids


@pytest.fixture
def leftovers():
    """Pids to kill at the end of the test if they still run (a rank left
    waiting in a collective when the test fails)."""
    pids = []
    yield pids
    for pid in pids:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # already reaped


def _exit_statuses(pids):
    # ranks that do not agree hang in a collective: fail within minutes
    statuses = [wait_for_child(pid, timeout=120) for pid in pids]
    return [os.WEXITSTATUS(s) if os.WIFEXITED(s) else -os.WTERMSIG(s)
            for s in statuses]


@pytest.mark.heavy
@pytest.mark.skipif(torch.cuda.is_available(), reason='tests the CPU path')
@pytest.mark.skipif(sys.platform == 'win32', reason='needs fork, SIGTERM')
def test_two_ranks_stop_at_the_same_iteration_and_resume_exactly(
        load_script, tmp_path, leftovers):
    """Rank 1 of a 2-process run (gloo; no validation, no loader workers:
    the 1-process test has them) gets SIGTERM at a random iteration inside
    epoch 2: both ranks stop after it (rank 0 learns it from the
    all-reduce), rank 0 writes the checkpoint, both leave with 75;
    ``--resume`` on 2 processes ends with the weights and the logged losses
    of an uninterrupted 2-process run, BatchNorm statistics included (each
    rank has its own until the epoch's end)."""
    train = load_script('tools/train.py')
    # 64 images, 2 ranks, batch 8: 4 iterations an epoch
    base = tmp_path / 'ddp.py'
    base.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        "train_dataloader = dict(batch_size=8)\n"
        "val_cfg = None\nval_dataloader = None\nval_evaluator = None\n")
    stopped_config = tmp_path / 'ddp_stopped.py'
    stopped_config.write_text(
        "_base_ = ['ddp.py']\n"
        f"custom_hooks = [dict(type='WaitForSignalHook', iteration={STOP_AT},"
        " rank=1)]\n")
    full, work = tmp_path / 'full', tmp_path / 'work'

    reference = _fork_ranks(
        train, [str(base), '--work-dir', str(full), '--cfg-options',
                'experiment_name=ddp_full'], tmp_path / 'full')
    stopped = _fork_ranks(
        train, [str(stopped_config), '--work-dir', str(work),
                '--cfg-options', 'experiment_name=ddp_stopped'],
        tmp_path / 'stopped')
    leftovers += reference + stopped
    _wait_for_file(work / 'reached', stopped[1])
    assert json.loads((work / 'reached').read_text())['pid'] == stopped[1]
    os.kill(stopped[1], signal.SIGTERM)  # rank 1 only: rank 0 must stop too
    (work / 'sent').touch()
    rank0_log = (tmp_path / 'stopped_rank0.log')
    assert _exit_statuses(stopped) == [PREEMPTED_EXIT_CODE] * 2, \
        rank0_log.read_text()[-3000:]
    assert _exit_statuses(reference) == [0, 0], \
        (tmp_path / 'full_rank0.log').read_text()[-3000:]
    done = STOP_AT + 1
    assert (f'SIGTERM (received by another rank): stopped after iteration '
            f'{done} (epoch 2, iteration {done - 4} of 4)'
            ) in rank0_log.read_text()
    stop_checkpoint = work / f'iter_{done}.pth'
    verify_checkpoint_file(str(stop_checkpoint))
    assert (work / 'last_checkpoint').read_text() == str(stop_checkpoint)
    saved = torch.load(stop_checkpoint, weights_only=True)
    assert saved['meta']['world_size'] == 2
    assert len(saved['rank_buffers']) == 2
    assert _no_temporary_files(work)

    resumed = _fork_ranks(
        train, [str(base), '--work-dir', str(work), '--resume',
                '--cfg-options', 'experiment_name=ddp_resumed'],
        tmp_path / 'resumed')
    leftovers += resumed
    assert _exit_statuses(resumed) == [0, 0], \
        (tmp_path / 'resumed_rank0.log').read_text()[-3000:]
    assert 'the epoch goes on from iteration' in (
        tmp_path / 'resumed_rank0.log').read_text()
    final = [
        torch.load(d / 'epoch_2.pth', weights_only=True)['state_dict']
        for d in (full, work)
    ]
    assert [k for k in final[0] if not torch.equal(final[0][k],
                                                   final[1][k])] == []
    losses = logged_losses(work)
    assert sorted(losses) == list(range(1, 9))
    assert losses == logged_losses(full)
    assert not stop_checkpoint.exists()
