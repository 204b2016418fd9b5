"""A run interrupted after epoch k, or killed with SIGKILL anywhere, and
resumed ends with exactly the weights (and logs exactly the losses) of an
uninterrupted run (CPU, fixed seed, deterministic), whatever the loader's
workers."""
import importlib.util
import os
import os.path as osp
import random
import signal
import sys
import textwrap
import traceback

import numpy as np
import pytest
import torch
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS
from mmpretrain.registry import HOOKS
from tiny_run_utils import (TINY_CONFIG, final_state, import_what_runs_import,
                            logged_losses, tiny_cfg, tiny_runner,
                            wait_for_child)

from lect_mm.engine import RNGStateHook
from lect_mm.engine.hooks import get_rng_state, set_rng_state

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


class Interrupted(Exception):
    pass


@HOOKS.register_module(force=True)
class InterruptAfterEpochHook(Hook):
    """Stops the run after the checkpoint of ``epoch`` has been saved."""

    priority = 'LOWEST'

    def __init__(self, epoch):
        self.epoch = epoch

    def after_train_epoch(self, runner):
        if runner.epoch + 1 == self.epoch:
            raise Interrupted


@pytest.fixture(scope='module')
def uninterrupted_run(tmp_path_factory):
    # num_workers=0: the killed run below uses 2 persistent workers and
    # must end the same (SeededSampler makes the loader settings irrelevant).
    work_dir = tmp_path_factory.mktemp('full')
    runner = tiny_runner(work_dir, 'resume_full', train_cfg=dict(max_epochs=3))
    runner.train()
    return final_state(runner), logged_losses(work_dir)


@pytest.fixture(scope='module')
def uninterrupted(uninterrupted_run):
    return uninterrupted_run[0]


def _interrupted_then_resumed(work_dir, name, rng_state_hook=True):

    def runner(part, **options):
        cfg = tiny_cfg(
            work_dir, f'{name}_{part}', train_cfg=dict(max_epochs=3),
            **options)
        if not rng_state_hook:
            cfg.default_hooks.pop('rng_state')
        return RUNNERS.build(cfg)

    with pytest.raises(Interrupted):
        runner(
            'part1',
            custom_hooks=[dict(type='InterruptAfterEpochHook',
                               epoch=2)]).train()
    assert (work_dir / 'epoch_2.pth').is_file()
    assert not (work_dir / 'epoch_3.pth').exists()
    resumed = runner('part2', resume=True)
    resumed.train()
    assert resumed.epoch == 3
    return final_state(resumed)


@pytest.mark.heavy
def test_resumed_run_equals_uninterrupted_run(uninterrupted, tmp_path):
    resumed = _interrupted_then_resumed(tmp_path, 'resume_rng')
    assert resumed.keys() == uninterrupted.keys()
    different = [
        k for k in uninterrupted if not torch.equal(uninterrupted[k],
                                                    resumed[k])
    ]
    assert not different


@pytest.mark.heavy
def test_without_rng_state_hook_resume_differs(uninterrupted, tmp_path):
    # The cause the hook fixes: mmengine re-seeds on resume, so the flips
    # (numpy) and drop path (torch) of epoch 3 differ. The sampler order
    # and the schedulers resume correctly by themselves.
    resumed = _interrupted_then_resumed(
        tmp_path, 'resume_norng', rng_state_hook=False)
    assert any(not torch.equal(uninterrupted[k], resumed[k])
               for k in uninterrupted)


def test_rng_state_round_trip():
    state = get_rng_state()
    draws = (random.random(), np.random.rand(), torch.rand(1))
    set_rng_state(state)
    assert draws == (random.random(), np.random.rand(), torch.rand(1))


def test_rng_state_of_another_epoch_is_not_applied():
    # load_from a checkpoint of epoch 5 to fine-tune from epoch 0: the
    # generators keep the fresh run's seed.
    class FakeRunner:
        epoch = 0

    hook = RNGStateHook()
    state = get_rng_state()
    hook.after_load_checkpoint(
        FakeRunner(), dict(meta=dict(epoch=5), rng_state=state))
    np.random.rand()
    after = np.random.get_state()[2]
    hook.before_train_epoch(FakeRunner())
    assert np.random.get_state()[2] == after


SIGKILL_HOOK = textwrap.dedent('''
    import os, signal
    from mmengine.hooks import Hook
    from mmpretrain.registry import HOOKS

    @HOOKS.register_module()
    class SigkillHook(Hook):
        """kill -9 this training process before iteration ``iteration``."""
        def __init__(self, iteration):
            self.iteration = iteration
        def before_train_iter(self, runner, batch_idx, data_batch=None):
            if runner.iter == self.iteration:
                os.kill(os.getpid(), signal.SIGKILL)
    ''')


def _load_train_tool():
    spec = importlib.util.spec_from_file_location(
        'lect_tools_train_resume', osp.join(REPO, 'tools', 'train.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.heavy
@pytest.mark.skipif(sys.platform == 'win32', reason='needs SIGKILL')
def test_sigkilled_run_with_persistent_workers_resumes_exactly(
        uninterrupted_run, tmp_path):
    """tools/train.py with 2 persistent workers is killed with SIGKILL in
    the middle of epoch 2 (after epoch_1.pth), then ``--resume``d: final
    weights and every logged loss equal the uninterrupted run's (which used
    no workers at all). The killed run is a forked child (it inherits the
    imported stack, which a fresh interpreter takes seconds to import),
    as the runs stopped by a signal in test_preemption.py."""
    work_dir = tmp_path / 'work'
    (tmp_path / 'sigkill_hook.py').write_text(SIGKILL_HOOK)
    killed = tmp_path / 'killed.py'
    killed.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        "custom_imports = dict(imports=['lect_mm', 'sigkill_hook'])\n"
        # 4 iterations an epoch: before the 3rd of epoch 2
        "custom_hooks = [dict(type='SigkillHook', iteration=6)]\n")
    loader = ['train_dataloader.num_workers=2',
              'train_dataloader.persistent_workers=True',
              'train_cfg.max_epochs=3']
    log = tmp_path / 'killed.log'
    train = _load_train_tool()
    import_what_runs_import()
    pid = os.fork()
    if pid == 0:  # the child: train until killed, never back into pytest
        try:
            sys.path.insert(0, str(tmp_path))  # custom_imports' sigkill_hook
            # To a file, not a pipe: orphaned workers would hold a pipe open.
            out = open(log, 'w', buffering=1)
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            sys.stdout = sys.stderr = out
            torch.set_num_threads(1)  # as DataLoader's forked workers
            train.main([str(killed), '--work-dir', str(work_dir),
                        '--cfg-options', *loader,
                        'experiment_name=resume_killed'])
        except BaseException:  # noqa: B036  (report anything)
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(1)  # not killed
    status = wait_for_child(pid, timeout=900)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
        log.read_text()[-3000:]
    assert (work_dir / 'epoch_1.pth').is_file()
    assert not (work_dir / 'epoch_2.pth').exists()

    resumed = train.main([
        TINY_CONFIG, '--work-dir', str(work_dir), '--resume',
        '--cfg-options', *loader, 'experiment_name=resume_sigkill'])
    assert resumed.iter == 12
    assert resumed.train_dataloader.persistent_workers
    state = final_state(resumed)
    reference, reference_losses = uninterrupted_run
    assert [k for k in reference if not torch.equal(reference[k],
                                                    state[k])] == []
    losses = logged_losses(work_dir)
    assert sorted(losses) == list(range(1, 13))  # 1-6 killed, 5-12 resumed
    assert losses == reference_losses
