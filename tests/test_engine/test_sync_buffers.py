"""2-process CPU DDP (gloo) trains and validates one model: the ranks'
BatchNorm statistics are averaged after each epoch (``SyncBuffersHook`` of
default_runtime), so the ranks hold the same buffers, and the saved
checkpoint, evaluated again, gives the metric the run logged."""
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

BUFFER_DUMP = textwrap.dedent('''
    import os, torch
    from mmengine.hooks import Hook
    from mmengine.model import is_model_wrapper
    from mmpretrain.registry import HOOKS

    @HOOKS.register_module()
    class BufferDumpHook(Hook):
        """Each rank saves its model's buffers when the run ends."""
        def after_run(self, runner):
            model = runner.model
            module = model.module if is_model_wrapper(model) else model
            torch.save(dict(module.named_buffers()),
                       os.path.join(runner.work_dir,
                                    f'buffers_rank{runner.rank}.pth'))
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


@pytest.mark.skipif(torch.cuda.is_available(), reason='tests the CPU path')
def test_two_cpu_ranks_validate_and_save_one_model(tmp_path):
    work_dir = tmp_path / 'work'
    (tmp_path / 'buffer_dump.py').write_text(BUFFER_DUMP)
    config = tmp_path / 'ddp.py'
    config.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        "custom_imports = dict(imports=['lect_mm', 'buffer_dump'])\n"
        "custom_hooks = [dict(type='BufferDumpHook')]\n"
        "train_cfg = dict(max_epochs=1)\n")
    # The two ranks as torchrun starts them (without torchrun's own start).
    env = dict(
        os.environ, WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',
        MASTER_PORT=str(_free_port()),
        PYTHONPATH=os.pathsep.join(
            [str(tmp_path), REPO, os.environ.get('PYTHONPATH', '')]))
    procs = []
    for rank in (0, 1):
        log = open(tmp_path / f'rank{rank}.log', 'w')
        procs.append(subprocess.Popen(
            [sys.executable, osp.join(REPO, 'tools', 'train.py'),
             str(config), '--work-dir', str(work_dir), '--launcher',
             'pytorch'],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
            stdout=log, stderr=subprocess.STDOUT))
        log.close()
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], (tmp_path / 'rank0.log').read_text()[-3000:] + (
        tmp_path / 'rank1.log').read_text()[-3000:]

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
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'lect_tools_test_sync', osp.join(REPO, 'tools', 'test.py'))
    test_tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test_tool)
    metrics = test_tool.main([
        TINY_CONFIG, str(work_dir / 'best_accuracy_top1_epoch_1.pth'),
        '--work-dir', str(tmp_path / 'test'), '--cfg-options',
        'experiment_name=sync_buffers_test'])
    assert metrics['accuracy/top1'] == _logged_metric(work_dir,
                                                      'accuracy/top1')
