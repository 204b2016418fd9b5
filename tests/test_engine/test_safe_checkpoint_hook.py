"""SafeCheckpointHook: a crash while a checkpoint is being saved never loses
the previous best or the last intact checkpoint, and a kill -9 mid-write
leaves no partial file under a checkpoint's name."""
import os
import signal
import traceback

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmpretrain.registry import HOOKS
from tiny_run_utils import import_what_runs_import, tiny_cfg, wait_for_child

from lect_mm.engine import checkpoint_io, verify_checkpoint_file

BEST = 'best_accuracy_top1_epoch_{}.pth'
# one iteration per epoch, quiet
FAST = dict(train_dataloader=dict(dataset=dict(indices=16)),
            log_level='WARNING')


class SimulatedCrash(Exception):
    pass


@HOOKS.register_module(force=True)
class ImprovingScoreHook(Hook):
    """Every validation scores its epoch, so each one is a new best."""

    priority = 'VERY_HIGH'

    def after_val_epoch(self, runner, metrics=None):
        metrics['accuracy/top1'] = float(runner.epoch)


@HOOKS.register_module(force=True)
class CrashOnSaveHook(Hook):
    """Raises when the run starts to save the given checkpoint of ``epoch``
    (``best``: the one without optimizer state)."""

    def __init__(self, epoch, best):
        self.epoch = epoch
        self.best = best

    def before_save_checkpoint(self, runner, checkpoint):
        if (checkpoint['meta']['epoch'] == self.epoch
                and ('optimizer' not in checkpoint) == self.best):
            raise SimulatedCrash


def _run(work_dir, name, checkpoint, crash=None, **options):
    hooks = [dict(type='ImprovingScoreHook')]
    if crash is not None:
        hooks.append(dict(type='CrashOnSaveHook', **crash))
    cfg = tiny_cfg(
        work_dir, name, custom_hooks=hooks,
        default_hooks=dict(checkpoint=checkpoint), **FAST, **options)
    return RUNNERS.build(cfg)


def test_crash_while_saving_the_new_best_keeps_the_old_one(tmp_path):
    # (mmengine's CheckpointHook removes the old best before writing the
    # new one: with type='CheckpointHook' here, no best is left.)
    runner = _run(tmp_path, 'best_crash', dict(type='SafeCheckpointHook'),
                  crash=dict(epoch=2, best=True))
    with pytest.raises(SimulatedCrash):
        runner.train()
    assert not (tmp_path / BEST.format(2)).exists()
    verify_checkpoint_file(str(tmp_path / BEST.format(1)))


def test_max_keep_ckpts_never_removes_the_last_intact_checkpoint(tmp_path):
    # (mmengine's CheckpointHook removes epoch_1 before writing epoch_2:
    # with type='CheckpointHook' here, no checkpoint is left.)
    runner = _run(
        tmp_path, 'keep_crash',
        dict(type='SafeCheckpointHook', max_keep_ckpts=1, save_best=None),
        crash=dict(epoch=2, best=False),
        val_cfg=None, val_dataloader=None, val_evaluator=None)
    with pytest.raises(SimulatedCrash):
        runner.train()
    assert [f for f in os.listdir(tmp_path) if f.endswith('.pth')
            ] == ['epoch_1.pth']
    verify_checkpoint_file(str(tmp_path / 'epoch_1.pth'))


@HOOKS.register_module(force=True)
class KillDuringBestWriteHook(ImprovingScoreHook):
    """Each validation is a new best; the write of epoch 2's best is killed
    (SIGKILL) after half of its bytes are on disk."""

    def after_val_epoch(self, runner, metrics=None):
        super().after_val_epoch(runner, metrics)
        if runner.epoch == 2:

            def write_half_then_die(file, data):
                file.write(data[:len(data) // 2])
                file.flush()
                os.kill(os.getpid(), signal.SIGKILL)

            checkpoint_io._write_synced = write_half_then_die


def _train_in_a_child_and_kill_it(work_dir, timeout=300):
    """Fork (no re-import, unlike a subprocess): the child trains and is
    killed by KillDuringBestWriteHook."""
    import_what_runs_import()
    pid = os.fork()
    if pid == 0:
        try:
            torch.set_num_threads(1)  # as DataLoader's forked workers
            RUNNERS.build(
                tiny_cfg(work_dir, 'kill_child', **FAST,
                         custom_hooks=[dict(type='KillDuringBestWriteHook')
                                       ])).train()
        except BaseException:
            with open(work_dir / 'child_error.txt', 'w') as f:
                traceback.print_exc(file=f)
        finally:
            os._exit(1)  # never back into pytest
    return wait_for_child(pid, timeout)


@pytest.mark.heavy
def test_kill_9_during_a_checkpoint_write(tmp_path):
    status = _train_in_a_child_and_kill_it(tmp_path)
    error = tmp_path / 'child_error.txt'
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
        error.read_text() if error.exists() else status
    files = os.listdir(tmp_path)
    # Nothing partial under a checkpoint's name; the old best is intact.
    assert BEST.format(2) not in files
    verify_checkpoint_file(str(tmp_path / BEST.format(1)))
    partial = [f for f in files if f.endswith('.tmp')]
    assert len(partial) == 1 and partial[0].startswith(f'.{BEST.format(2)}.')
    # epoch_2.pth was saved before validation; the pointer names it.
    latest = (tmp_path / 'last_checkpoint').read_text()
    assert latest == str(tmp_path / 'epoch_2.pth')
    verify_checkpoint_file(latest)

    # The next run (the killed one's lock is gone) removes the partial
    # file, resumes, and its new best replaces the old one.
    runner = RUNNERS.build(
        tiny_cfg(tmp_path, 'kill_resume', resume=True,
                 train_cfg=dict(max_epochs=3), **FAST,
                 custom_hooks=[dict(type='ImprovingScoreHook')]))
    runner.train()
    assert runner.epoch == 3
    files = os.listdir(tmp_path)
    assert not [f for f in files if f.endswith('.tmp')]
    assert [f for f in files if f.startswith('best_')] == [BEST.format(3)]
    verify_checkpoint_file(str(tmp_path / BEST.format(3)))
