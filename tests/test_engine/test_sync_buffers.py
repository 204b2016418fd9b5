"""``tools/dist_train.sh CONFIG 2``: 2-process CPU DDP (gloo, torchrun)
trains and validates one model. The replicas stay identical, the ranks'
BatchNorm statistics are averaged after each epoch (``SyncBuffersHook`` of
default_runtime), so the ranks hold the same buffers, and the saved
checkpoint, evaluated again, gives the metric the run logged. (One run
checks all of it: each 2-process start costs seconds.)"""
import json
import os
import os.path as osp
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from tiny_run_utils import TINY_CONFIG

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

RANK_DUMP = textwrap.dedent('''
    import json, os, torch
    from mmengine.hooks import Hook
    from mmengine.model import is_model_wrapper
    from mmpretrain.registry import HOOKS

    @HOOKS.register_module()
    class RankDumpHook(Hook):
        """Each rank saves its model's buffers and describes its run."""
        def after_run(self, runner):
            model = runner.model
            module = model.module if is_model_wrapper(model) else model
            torch.save(dict(module.named_buffers()),
                       os.path.join(runner.work_dir,
                                    f'buffers_rank{runner.rank}.pth'))
            total = sum(float(p.detach().double().sum())
                        for p in module.parameters())
            with open(os.path.join(runner.work_dir,
                                   f'rank{runner.rank}.json'), 'w') as f:
                json.dump(dict(world_size=runner.world_size,
                               wrapper=type(model).__name__,
                               iters=runner.iter, param_sum=total), f)
    ''')


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _logged_metric(work_dir, key):
    values = []
    for root, _, files in os.walk(work_dir):
        if 'scalars.json' in files:
            with open(osp.join(root, 'scalars.json')) as f:
                values += [json.loads(line).get(key) for line in f]
    values = [v for v in values if v is not None]
    assert len(values) == 1, values
    return values[0]


def _log_text(work_dir):
    logs = [
        osp.join(root, f) for root, _, files in os.walk(work_dir)
        for f in files if f.endswith('.log')
    ]
    assert len(logs) == 1, logs
    with open(logs[0]) as f:
        return f.read()


@pytest.mark.heavy
@pytest.mark.skipif(torch.cuda.is_available(), reason='tests the CPU path')
def test_dist_train_sh_two_cpu_ranks_train_one_model(tmp_path, load_script):
    work_dir = tmp_path / 'work'
    (tmp_path / 'rank_dump.py').write_text(RANK_DUMP)
    config = tmp_path / 'ddp.py'
    config.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        "custom_imports = dict(imports=['lect_mm', 'rank_dump'])\n"
        "custom_hooks = [dict(type='RankDumpHook')]\n"
        "train_cfg = dict(max_epochs=1)\n")
    env = dict(
        os.environ,
        PORT=str(_free_port()),
        # the checkout's lect_mm, not an installed one
        PYTHONPATH=os.pathsep.join([str(tmp_path), REPO]),
        PATH=osp.dirname(sys.executable) + os.pathsep + os.environ['PATH'])
    with open(tmp_path / 'dist_train.log', 'w') as out:
        proc = subprocess.run(
            ['bash', osp.join(REPO, 'tools', 'dist_train.sh'),
             str(config), '2', '--work-dir', str(work_dir)],
            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600)
    output = (tmp_path / 'dist_train.log').read_text()
    assert proc.returncode == 0, output[-6000:]
    # no warning lect_mm causes (DDP arguments, gradient layouts)
    assert 'broadcast_buffers' not in output
    assert 'Grad strides do not match' not in output

    ranks = [
        json.loads((work_dir / f'rank{r}.json').read_text()) for r in (0, 1)
    ]
    for rank in ranks:
        assert rank['world_size'] == 2
        assert rank['wrapper'] == 'MMDistributedDataParallel'
        assert rank['iters'] == 2  # 64 images / (2 ranks x batch 16)
    # DDP kept the replicas identical.
    assert ranks[0]['param_sum'] == ranks[1]['param_sum']
    log = _log_text(str(work_dir))
    assert 'Distributed training: True' in log
    assert 'Training took' in log

    # Both ranks end with the same BatchNorm statistics (without the
    # average, each keeps the statistics of its own half of the data).
    buffers = [
        torch.load(work_dir / f'buffers_rank{r}.pth', weights_only=True)
        for r in (0, 1)
    ]
    assert any('running_mean' in k for k in buffers[0])
    assert [k for k in buffers[0]
            if not torch.equal(buffers[0][k], buffers[1][k])] == []
    # ... which are the ones saved by rank 0.
    saved = torch.load(
        work_dir / 'epoch_1.pth', weights_only=True)['state_dict']
    persistent = [k for k in buffers[1] if k in saved]
    assert any('running_var' in k for k in persistent)
    assert [k for k in persistent
            if not torch.equal(saved[k], buffers[1][k])] == []
    assert os.path.isfile(work_dir / 'best_accuracy_top1_epoch_1.pth')

    # The saved model, evaluated again in one process, scores what the
    # 2-process validation logged.
    metrics = load_script('tools/test.py').main([
        TINY_CONFIG, str(work_dir / 'best_accuracy_top1_epoch_1.pth'),
        '--work-dir', str(tmp_path / 'test'), '--cfg-options',
        'experiment_name=sync_buffers_test'])
    assert metrics['accuracy/top1'] == _logged_metric(work_dir,
                                                      'accuracy/top1')
