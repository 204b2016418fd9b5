"""tools/train.py runs that start from another work dir's checkpoint, or in
a copy of a work dir, touch files in their own work dir only; --resume
takes the newest checkpoint by training progress, not by file name. The
checkpoints record absolute paths (last_checkpoint; the message hub's
best_ckpt, last_ckpt, stop_ckpt) that name the work dir they were written
in."""
import os
import os.path as osp
import shutil

import pytest
from cli_utils import log_text, snapshot
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from lect_mm.engine import CheckpointError, TrainingPreempted

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')
BEST = 'best_accuracy_top1_epoch_{}.pth'
QUIET = ['log_level=WARNING', 'val_dataloader.dataset.indices=8']


@HOOKS.register_module(force=True)
class OwnershipImprovingScoreHook(Hook):
    """Every validation scores its epoch: each one is a new best (and the
    previous best is removed)."""

    priority = 'VERY_HIGH'

    def after_val_epoch(self, runner, metrics=None):
        metrics['accuracy/top1'] = float(runner.epoch)


@HOOKS.register_module(force=True)
class OwnershipSigtermHook(Hook):
    """SIGTERM to this process before training iteration ``iteration``
    (``runner.iter``): the run stops after it with ``iter_{N+1}.pth``."""

    def __init__(self, iteration):
        self.iteration = iteration

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == self.iteration:
            os.kill(os.getpid(), 15)


@pytest.fixture(scope='module')
def train(load_script, tmp_path_factory):
    """``tools/train.py`` with the tiny config (4 iterations an epoch) and
    every validation a new best; each call a log of its own."""
    tool = load_script('tools/train.py')
    folder = tmp_path_factory.mktemp('cfg')
    configs = dict(improving=folder / 'improving.py',
                   stopping=folder / 'stopping.py')
    configs['improving'].write_text(
        f'_base_ = [{TINY!r}]\n'
        "custom_hooks = [dict(type='OwnershipImprovingScoreHook')]\n")
    configs['stopping'].write_text(
        f"_base_ = [{str(configs['improving'])!r}]\n"
        "custom_hooks = [dict(type='OwnershipImprovingScoreHook'),\n"
        "                dict(type='OwnershipSigtermHook', iteration=5)]\n")
    calls = []

    def run(work_dir, *args, options=(), config='improving'):
        calls.append(None)
        return tool.main([str(configs[config]), '--work-dir', str(work_dir),
                          *args,
                          '--cfg-options', *QUIET, *options,
                          f'experiment_name=ownership_{len(calls)}'])

    return run


@pytest.fixture(scope='module')
def stopped(train, tmp_path_factory):
    """A work dir whose run got SIGTERM in epoch 2 (after iteration 6):
    epoch_1.pth, best_..._epoch_1.pth, iter_6.pth, last_checkpoint naming
    iter_6.pth; and its files' digests."""
    work_dir = tmp_path_factory.mktemp('stopped')
    with pytest.raises(TrainingPreempted):
        train(work_dir, config='stopping')
    assert (work_dir / 'last_checkpoint').read_text() == str(
        work_dir / 'iter_6.pth')
    assert (work_dir / BEST.format(1)).is_file()
    return work_dir, snapshot(work_dir)


def test_resume_from_another_work_dir_leaves_it_alone(train, tmp_path):
    """--resume OTHER/epoch_2.pth --work-dir NEW: NEW gets its own best and
    last checkpoints; OTHER's best (which the checkpoint's message hub names
    as the run's best) is neither removed nor republished."""
    other, new = tmp_path / 'other', tmp_path / 'new'
    train(other, options=['train_dataloader.dataset.indices=16'])
    assert (other / BEST.format(2)).is_file()
    before = snapshot(other)

    runner = train(new, '--resume', str(other / 'epoch_2.pth'),
                   options=['train_dataloader.dataset.indices=16',
                            'train_cfg.max_epochs=3'])
    assert runner.epoch == 3
    assert snapshot(other) == before
    assert (new / BEST.format(3)).is_file()
    assert (new / 'last_checkpoint').read_text() == str(new / 'epoch_3.pth')
    log = log_text(str(new))
    assert f'Removed the outdated checkpoint {other}' not in log
    assert (f'its best checkpoint, {other / BEST.format(2)}, is left where '
            'it is') in log


def test_resume_in_a_copied_work_dir_uses_its_own_files(train, stopped,
                                                        tmp_path):
    """``cp -a`` of a stopped run's work dir, then --resume in the copy:
    the copy's last_checkpoint names the original's iter_6.pth; the copy
    says so and resumes from its own iter_6.pth, then replaces its own stop
    and best checkpoints, never the original's."""
    original, before = stopped
    copy = tmp_path / 'copy'
    shutil.copytree(original, copy, symlinks=True)
    runner = train(copy, '--resume')
    assert runner.iter == 8
    assert snapshot(original) == before
    log = log_text(str(copy))
    assert (f'{copy / "last_checkpoint"} names {original / "iter_6.pth"}, '
            f'outside this work dir, {copy} (a copied or moved work dir?): '
            f'not followed; taking {copy / "iter_6.pth"}') in log
    assert (f'its best checkpoint, {original / BEST.format(1)}, is taken as '
            f'{copy / BEST.format(1)}') in log
    assert not (copy / 'iter_6.pth').exists()  # epoch_2.pth replaced it
    assert not (copy / BEST.format(1)).exists()  # the new best replaced it
    assert (copy / BEST.format(2)).is_file()
    assert (copy / 'last_checkpoint').read_text() == str(copy / 'epoch_2.pth')


def test_newest_intact_is_newest_in_training_progress(
        train, stopped, tmp_path, largest_tensor_record):
    """A run writes epoch_1..3.pth (iteration 12) in a folder that also
    holds iter_6.pth of a stopped run (copied in: a run no longer writes
    into a folder with another run's checkpoints); epoch_3.pth is damaged:
    the newest intact checkpoint is epoch_2.pth (iteration 8), not
    iter_6.pth (6 > 2)."""
    work_dir = tmp_path / 'run'
    train(work_dir, options=['train_cfg.max_epochs=3'])
    shutil.copy(stopped[0] / 'iter_6.pth', work_dir)
    damaged = work_dir / 'epoch_3.pth'
    offset, _ = largest_tensor_record(str(damaged))
    with open(damaged, 'r+b') as file:
        file.seek(offset)
        chunk = file.read(8)
        file.seek(offset)
        file.write(bytes(b ^ 0xFF for b in chunk))

    with pytest.raises(CheckpointError) as info:
        train(work_dir, '--resume',
              options=['train_cfg.max_epochs=3'])
    assert (f'The newest intact checkpoint is {work_dir / "epoch_2.pth"}'
            in str(info.value))
    runner = train(work_dir, '--resume-intact',
                   options=['train_cfg.max_epochs=3'])
    assert runner.iter == 12
    assert ('Resuming from the newest intact checkpoint, '
            f'{work_dir / "epoch_2.pth"}') in log_text(str(work_dir))


def test_resume_inside_an_epoch_on_other_data_stops(train, stopped,
                                                    tmp_path):
    """Before: a resume inside an epoch (after SIGTERM) on a data set of
    another length but as many iterations per epoch went on silently,
    though docs/cluster.md says --resume stops on other data. Now the stop
    checkpoint records the data set's length, and --resume names both; the
    way out of docs/cluster.md, --resume WD/epoch_1.pth, goes on there and
    leaves the stop checkpoint as it is."""
    copy = tmp_path / 'copy'
    shutil.copytree(stopped[0], copy, symlinks=True)
    other_data = ['train_dataloader.dataset.indices=56']
    with pytest.raises(CheckpointError) as info:
        train(copy, '--resume', options=other_data)
    assert (f'Checkpoint {copy / "iter_6.pth"} was written inside epoch 2, '
            'after its iteration 2 of 4 (1 process, batch size 16) on 64 '
            'samples; this run has 4 iterations per epoch (1 process, batch '
            'size 16) on 56 samples.') in str(info.value)
    stop = snapshot(copy)['iter_6.pth']
    runner = train(copy, '--resume', str(copy / 'epoch_1.pth'),
                   options=other_data)
    assert runner.iter == 8
    assert snapshot(copy)['iter_6.pth'] == stop
