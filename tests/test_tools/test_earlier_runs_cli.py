"""What users do with a finished run, through tools/train.py on the tiny
digits (4 iterations an epoch, every validation a new best): branching from
an earlier checkpoint, the same command again, a symlinked work dir, and a
resume with other optimizer settings or another optimizer. No run destroys
checkpoints it did not write (it refuses, naming them and the way out), and
a resume uses, and records, the config's optimizer settings."""
import os.path as osp
import shutil
import sys

import pytest
from cli_utils import log_text, snapshot
from mmengine.config import Config
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from lect_mm.engine import CheckpointConflictError, ConfigMismatchError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')
BEST = 'best_accuracy_top1_epoch_{}.pth'
QUIET = ['log_level=WARNING', 'val_dataloader.dataset.indices=8']


@HOOKS.register_module(force=True)
class EarlierRunsImprovingScoreHook(Hook):
    """Every validation is a new best: the best checkpoint moves along."""

    priority = 'VERY_HIGH'

    def after_val_epoch(self, runner, metrics=None):
        metrics['accuracy/top1'] = float(runner.epoch)


@pytest.fixture(scope='module')
def train(load_script, tmp_path_factory):
    """``tools/train.py`` on the tiny config; each call a log of its own."""
    tool = load_script('tools/train.py')
    config = tmp_path_factory.mktemp('cfg') / 'improving.py'
    config.write_text(
        f'_base_ = [{TINY!r}]\n'
        "custom_hooks = [dict(type='EarlierRunsImprovingScoreHook')]\n")
    calls = []

    def run(work_dir, *args, options=(), config=str(config)):
        calls.append(None)
        return tool.main([config, '--work-dir', str(work_dir), *args,
                          '--cfg-options', *QUIET, *options,
                          f'experiment_name=earlier_{len(calls)}'])

    return run


@pytest.fixture(scope='module')
def finished(train, tmp_path_factory):
    """A finished 2-epoch run: epoch_1.pth, epoch_2.pth, the best of epoch
    2, last_checkpoint naming epoch_2.pth; and the digests of its files."""
    work_dir = tmp_path_factory.mktemp('finished')
    train(work_dir, options=['train_cfg.max_epochs=2'])
    assert (work_dir / BEST.format(2)).is_file()
    return work_dir, snapshot(work_dir)


def test_a_branch_from_an_earlier_checkpoint_is_refused_in_the_same_dir(
        train, finished, tmp_path):
    """Before: ``--resume WD/epoch_1.pth`` with another lr replaced the
    later epoch files and the best checkpoint by the branch's, saying only
    "Removed the outdated checkpoint". Now it stops before training, naming
    the later files and the way out; that way out branches in a new work
    dir and leaves WD as it was."""
    work_dir, before = finished
    branch = ['--resume', str(work_dir / 'epoch_1.pth')]
    lr = ['optim_wrapper.optimizer.lr=0.01', 'train_cfg.max_epochs=2']
    with pytest.raises(CheckpointConflictError) as info:
        train(work_dir, *branch, options=lr)
    message = str(info.value)
    assert message.startswith(
        f'--resume {work_dir / "epoch_1.pth"}: work dir {work_dir} holds '
        f'checkpoints beyond it ({BEST.format(2)} (iteration 8), '
        'epoch_2.pth (iteration 8)), which a run from epoch_1.pth would '
        'overwrite or remove: a run never destroys checkpoints it did not '
        'write. To branch from epoch_1.pth, '
        'pass another --work-dir')
    assert snapshot(work_dir) == before  # the config copy too

    runner = train(tmp_path / 'branch', *branch, options=lr)
    assert runner.iter == 8
    assert snapshot(work_dir) == before
    assert (tmp_path / 'branch' / 'epoch_2.pth').is_file()


@pytest.mark.skipif(sys.platform == 'win32', reason='needs symlinks')
def test_the_same_command_again_is_refused(train, finished, tmp_path):
    """Before: a second run without --resume (into the same work dir, or
    a work dir that is a symlink to it) overwrote the first run's epoch
    files and repointed last_checkpoint, silently. Now it stops first."""
    work_dir, before = finished
    link = tmp_path / 'link'
    link.symlink_to(work_dir, target_is_directory=True)
    for folder in (work_dir, link):
        with pytest.raises(CheckpointConflictError) as info:
            train(folder, options=['train_cfg.max_epochs=2'])
        assert str(info.value).startswith(
            f'Work dir {folder} holds the checkpoints of an earlier run '
            f'({BEST.format(2)}, epoch_1.pth, epoch_2.pth), '
            'which this run would overwrite or remove: a run never destroys '
            'checkpoints it did not write. To go on with that run, add '
            '--resume; to start a new one, pass another --work-dir')
    assert snapshot(work_dir) == before


def test_resume_follows_the_configs_optimizer(train, finished, tmp_path,
                                              load_script):
    """Before: --resume after weight_decay 0.05 -> 0.5 went on with the
    checkpoint's 0.05, silently, while the work dir's config copy said 0.5;
    after AdamW -> SGD the first iteration failed in torch's sgd.py with
    KeyError: 'momentum'. Now the config's weight decay is used and named
    in a warning; another optimizer stops before training, naming both."""
    trace = load_script('benchmarks/resume_files.py')
    work_dir = tmp_path / 'run'
    shutil.copytree(finished[0], work_dir)
    sgd = tmp_path / 'sgd.py'
    sgd.write_text(
        f'_base_ = [{TINY!r}]\n'
        'optim_wrapper = dict(optimizer=dict(\n'
        "    _delete_=True, type='SGD', lr=0.01, momentum=0.9))\n")
    with pytest.raises(ConfigMismatchError) as info:
        train(work_dir, '--resume', config=str(sgd),
              options=['train_cfg.max_epochs=3'])
    assert str(info.value).startswith(
        f'Resuming from {work_dir / "epoch_2.pth"}: its optimizer is AdamW, '
        'the config builds SGD (optim_wrapper.optimizer.type): the state of '
        'one cannot go on in the other. To train with the new optimizer '
        'from these weights, start a new run from them (--cfg-options '
        f'load_from={work_dir / "epoch_2.pth"}, without --resume, in another '
        '--work-dir); to resume, keep the optimizer AdamW.')
    assert not (work_dir / 'epoch_3.pth').exists()

    # A real --resume, traced: the lect_mm files it runs while it loads.
    with trace.files_run_by_load_or_resume() as files:
        runner = train(work_dir, '--resume', options=[
            'optim_wrapper.optimizer.weight_decay=0.5',
            'train_cfg.max_epochs=3'])
    assert runner.epoch == 3
    assert len(files) <= 7, sorted(files)
    assert {g['weight_decay']
            for g in runner.optim_wrapper.optimizer.param_groups} == {0.5}
    assert ("the config's optimizer settings differ from the checkpoint's "
            '(checkpoint -> config): optim_wrapper.optimizer.weight_decay '
            "0.05 -> 0.5. The run goes on with the config's"
            ) in log_text(work_dir)
    copy = Config.fromfile(work_dir / 'improving.py')
    assert copy.optim_wrapper.optimizer.weight_decay == 0.5
