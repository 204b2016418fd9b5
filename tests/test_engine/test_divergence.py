"""A diverging run stops with an error naming the iteration and learning
rate, and leaves the checkpoints written before the divergence intact."""
import json
import os
import os.path as osp
import re
from types import SimpleNamespace

import pytest
import torch
from tiny_run_utils import TINY_CONFIG

from lect_mm.engine import DivergenceError, NonFiniteLossHook

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _train(argv):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'lect_tools_train_divergence', osp.join(REPO, 'tools', 'train.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def _logged_lr(work_dir, step):
    for root, _, files in os.walk(work_dir):
        if 'scalars.json' in files:
            with open(osp.join(root, 'scalars.json')) as f:
                for line in f:
                    record = json.loads(line)
                    if record.get('step') == step and 'lr' in record:
                        return record['lr']
    raise AssertionError(f'step {step} not logged')


def test_lr_1e6_after_a_good_epoch_stops_and_keeps_epoch_1(tmp_path):
    # Epoch 1 at the tiny config's lr (1e-3), then lr 1e6 (x 1e9).
    config = tmp_path / 'diverge.py'
    config.write_text(
        f"_base_ = [{TINY_CONFIG!r}]\n"
        "param_scheduler = [dict(type='MultiStepLR', by_epoch=True,\n"
        "                        milestones=[1], gamma=1e9)]\n"
        "train_cfg = dict(max_epochs=3)\n")
    work_dir = tmp_path / 'work'
    with pytest.raises(DivergenceError) as info:
        _train([str(config), '--work-dir', str(work_dir), '--cfg-options',
                'experiment_name=diverge'])
    message = str(info.value)
    match = re.search(r'at iteration (\d+) \(epoch (\d+)\), learning rate '
                      r'(\S+)\.', message)
    assert match, message
    iteration, epoch = int(match[1]), int(match[2])
    assert epoch == 2 and 5 <= iteration <= 8  # within epoch 2
    assert float(match[3]) == pytest.approx(1e6)
    assert match[3] == f'{_logged_lr(work_dir, iteration):.4g}'
    assert 'epoch_1.pth' in message  # the last good checkpoint is named

    # Nothing was written after the divergence; what was is finite.
    saved = sorted(f for f in os.listdir(work_dir) if f.endswith('.pth'))
    assert saved == ['best_accuracy_top1_epoch_1.pth', 'epoch_1.pth']
    with open(work_dir / 'last_checkpoint') as f:
        assert f.read().strip().endswith('epoch_1.pth')
    for name in saved:
        state = torch.load(work_dir / name, weights_only=True)['state_dict']
        assert all(torch.isfinite(v).all() for v in state.values()
                   if v.is_floating_point())


def test_hook_is_on_by_default_and_can_be_turned_off(tmp_path):
    from mmengine.config import Config
    cfg = Config.fromfile(TINY_CONFIG)
    assert cfg.default_hooks.non_finite_loss == dict(
        type='NonFiniteLossHook', patience=3)
    runner = _fake_runner(tmp_path)
    nan = dict(loss=torch.tensor(float('nan')))
    hook = NonFiniteLossHook(patience=1, enabled=False)
    hook.after_train_iter(runner, 0, outputs=nan)
    hook.before_save_checkpoint(runner, dict(state_dict=nan))


def _fake_runner(tmp_path):
    optim_wrapper = SimpleNamespace(get_lr=lambda: dict(lr=[0.5, 0.5]))
    return SimpleNamespace(
        iter=9, epoch=2, work_dir=str(tmp_path), optim_wrapper=optim_wrapper,
        train_loop=SimpleNamespace(max_epochs=5))


def test_patience_counts_non_finite_losses_in_a_row(tmp_path):
    runner = _fake_runner(tmp_path)
    hook = NonFiniteLossHook(patience=2)
    nan, one = dict(loss=torch.tensor(float('nan'))), dict(
        loss=torch.tensor(1.))
    for outputs in (nan, one, nan, one):  # never 2 in a row
        hook.after_train_iter(runner, 0, outputs=outputs)
    hook.after_train_iter(runner, 0, outputs=nan)
    with pytest.raises(DivergenceError, match=r'the loss is inf for 2 '
                       r'iteration\(s\) in a row at iteration 10 \(epoch 3\)'
                       r', learning rate 0.5\. .* no checkpoint was'):
        hook.after_train_iter(
            runner, 0, outputs=dict(loss=torch.tensor(float('inf'))))
    with pytest.raises(ValueError, match='patience'):
        NonFiniteLossHook(patience=0)
