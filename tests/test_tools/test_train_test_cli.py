"""tools/train.py, tools/test.py and tools/dist_train.sh on the CPU."""
import contextlib
import os
import os.path as osp
import runpy
import subprocess
import sys

import pytest
import torch
from cli_utils import log_text
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from lect_mm.engine import ConfigError, ConfigMismatchError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')
cpu_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason='tests the CPU path')


# ------------------------------------------------------------ command line
@contextlib.contextmanager
def _restored_local_rank():
    """parse_args exports LOCAL_RANK when no launcher did; a leaked non-zero
    value would make later tests pick a GPU that does not exist."""
    saved = os.environ.pop('LOCAL_RANK', None)
    try:
        yield
    finally:
        os.environ.pop('LOCAL_RANK', None)
        if saved is not None:
            os.environ['LOCAL_RANK'] = saved


@pytest.fixture(autouse=True)
def restored_local_rank():
    with _restored_local_rank():
        yield


@pytest.mark.parametrize('flag', ['--local-rank', '--local_rank'])
def test_both_local_rank_spellings(train_tool, test_tool, flag):
    args = train_tool.parse_args([TINY, flag, '3'])
    assert args.local_rank == 3
    assert os.environ['LOCAL_RANK'] == '3'
    del os.environ['LOCAL_RANK']
    args = test_tool.parse_args([TINY, 'x.pth', flag, '2'])
    assert args.local_rank == 2


def test_merge_args_defaults_and_flags(train_tool):
    from mmengine.config import Config
    args = train_tool.parse_args(
        [TINY, '--amp', '--resume', '--auto-scale-lr'])
    cfg = train_tool.merge_args(Config.fromfile(TINY), args)
    assert cfg.work_dir == osp.join('./work_dirs', 'tiny_digits')
    assert cfg.optim_wrapper.type == 'DeviceAmpOptimWrapper'
    assert cfg.resume is True and cfg.load_from is None
    assert cfg.auto_scale_lr.enable is True
    assert cfg.launcher == 'none'
    # num_workers=0: no persistent_workers (DataLoader would refuse it).
    assert 'persistent_workers' not in cfg.train_dataloader
    assert cfg.train_dataloader.collate_fn == dict(type='default_collate')
    if not torch.cuda.is_available():
        assert cfg.train_dataloader.pin_memory is False
    args = train_tool.parse_args([TINY, '--resume', 'a.pth', '--cfg-options',
                                  'train_cfg.max_epochs=7'])
    cfg = train_tool.merge_args(Config.fromfile(TINY), args)
    assert cfg.load_from == 'a.pth' and cfg.train_cfg.max_epochs == 7


# -------------------------------------- train -> test -> resume -> load_from
@pytest.fixture(scope='module')
def trained(train_tool, tmp_path_factory):
    work_dir = str(tmp_path_factory.mktemp('cli_train'))
    with _restored_local_rank():
        runner = train_tool.main([
            TINY, '--work-dir', work_dir, '--cfg-options',
            'train_cfg.max_epochs=1', 'experiment_name=cli_train'
        ])
    assert runner.epoch == 1
    return work_dir


def test_train_writes_checkpoints(trained):
    files = os.listdir(trained)
    assert 'epoch_1.pth' in files
    assert 'best_accuracy_top1_epoch_1.pth' in files
    assert 'Training took' in log_text(trained)
    # mmengine's deprecation lines, which LectRunner drops from its log
    assert 'FileClient' not in log_text(trained)


def test_test_tool_on_a_written_checkpoint(test_tool, trained, tmp_path):
    out = str(tmp_path / 'preds.pkl')
    metrics = test_tool.main([
        TINY, osp.join(trained, 'epoch_1.pth'), '--work-dir',
        str(tmp_path), '--out', out, '--cfg-options',
        'experiment_name=cli_test'
    ])
    assert 0 <= metrics['accuracy/top1'] <= 100
    assert osp.getsize(out) > 0


def test_resume_and_load_from_a_written_checkpoint(train_tool, trained,
                                                   tmp_path):
    resumed_dir = str(tmp_path / 'resumed')
    runner = train_tool.main([
        TINY, '--work-dir', resumed_dir, '--resume',
        osp.join(trained, 'epoch_1.pth'), '--cfg-options',
        'train_cfg.max_epochs=2', 'experiment_name=cli_resume'
    ])
    assert runner.epoch == 2
    assert 'resumed epoch: 1, iter: 4' in log_text(resumed_dir)
    assert osp.isfile(osp.join(resumed_dir, 'epoch_2.pth'))

    loaded_dir = str(tmp_path / 'loaded')
    ckpt = osp.join(trained, 'epoch_1.pth')
    runner = train_tool.main([
        TINY, '--work-dir', loaded_dir, '--no-validate', '--cfg-options',
        f'load_from={ckpt}', 'train_cfg.max_epochs=1',
        'experiment_name=cli_load'
    ])
    assert runner.epoch == 1
    assert f'Load checkpoint from {ckpt}' in log_text(loaded_dir)


def test_a_script_that_runs_the_tool_twice_goes_on(tmp_path, monkeypatch):
    """Before: tools/train.py exported LOCAL_RANK=0 itself, so its exit
    took a plain run for a launched rank and left through os._exit: a
    script that runs the tool in its own process (runpy, a sweep driver, a
    notebook) was killed when the first run ended, its atexit handlers
    never ran. Now only a rank of a --launcher run leaves that way."""
    exits = []
    monkeypatch.setattr(os, '_exit', exits.append)  # would end pytest
    for run in ('first', 'second'):
        monkeypatch.setattr(sys, 'argv', [
            'tools/train.py', TINY, '--work-dir', str(tmp_path / run),
            '--no-validate', '--cfg-options', 'train_cfg.max_epochs=1',
            'train_dataloader.dataset.indices=16', 'log_level=WARNING',
            f'experiment_name=runpy_{run}'])
        runpy.run_path(osp.join(REPO, 'tools', 'train.py'),
                       run_name='__main__')
        assert os.environ['LOCAL_RANK'] == '0'  # what used to trigger it
    assert exits == []
    assert (tmp_path / 'second' / 'epoch_1.pth').is_file()


# --------------------------------------------------------------- --amp
AUTOCAST_RECORDS = []


@HOOKS.register_module(force=True)
class AutocastProbeHook(Hook):
    """Records the autocast state seen by the backbone's training forward."""

    def before_train(self, runner):

        def probe(module, inputs, output):
            if module.training:
                AUTOCAST_RECORDS.append(
                    (torch.is_autocast_enabled('cpu'),
                     torch.get_autocast_dtype('cpu'), output[0].dtype))

        runner.model.backbone.register_forward_hook(probe)


@cpu_only
def test_amp_training_on_cpu_runs_under_bf16(train_tool, tmp_path):
    config = tmp_path / 'amp_probe.py'
    config.write_text(
        f"_base_ = [{TINY!r}]\n"
        "custom_hooks = [dict(type='AutocastProbeHook')]\n")
    AUTOCAST_RECORDS.clear()
    runner = train_tool.main([
        str(config), '--amp', '--work-dir',
        str(tmp_path), '--no-validate', '--cfg-options',
        'train_cfg.max_epochs=1', 'experiment_name=cli_amp'
    ])
    assert type(runner.optim_wrapper).__name__ == 'DeviceAmpOptimWrapper'
    assert len(AUTOCAST_RECORDS) == 4  # 64 images / batch 16
    assert set(AUTOCAST_RECORDS) == {(True, torch.bfloat16, torch.bfloat16)}
    assert all(p.dtype == torch.float32 for p in runner.model.parameters())
    assert osp.isfile(osp.join(str(tmp_path), 'epoch_1.pth'))
    # the run's log says once what --amp does on the CPU
    log = log_text(str(tmp_path))
    assert log.count('AMP on the CPU: forward passes run under bfloat16 '
                     'autocast, without loss scaling') == 1


# ------------------------------------------------------ errors users meet
def test_unknown_config_key_is_named(train_tool, tmp_path):
    with pytest.raises(ConfigError) as info:
        train_tool.main([
            TINY, '--work-dir',
            str(tmp_path), '--cfg-options', 'model.backbone.foo=1',
            'experiment_name=cli_badkey'
        ])
    assert str(info.value).startswith(
        "model.backbone.foo: ResNet has no argument 'foo'.")


def test_misspelt_type_is_named(train_tool, tmp_path):
    with pytest.raises(ConfigError) as info:
        train_tool.main([
            TINY, '--work-dir',
            str(tmp_path), '--cfg-options', 'model.head.type=LinearClsHed',
            'experiment_name=cli_badtype'
        ])
    assert "type='LinearClsHed' (at model.head.type)" in str(info.value)
    assert "Did you mean 'LinearClsHead'" in str(info.value)


def test_typo_inside_lect_blocks_is_named(train_tool, tmp_path):
    """The demo's attn_cfg is a list (one dict per stage): naming it like a
    dict says which index to use; the indexed typo names its path."""
    demo = osp.join(REPO, 'configs', 'demo', 'lect_digits.py')
    argv = [demo, '--work-dir', str(tmp_path), '--cfg-options']
    with pytest.raises(ConfigError, match=r'e\.g\. model\.backbone\.attn_cfg'
                       r'\.0\.sr_ratoi$'):
        train_tool.main(argv + ['model.backbone.attn_cfg.sr_ratoi=7'])
    with pytest.raises(ConfigError) as info:
        train_tool.main(argv + [
            'model.backbone.attn_cfg.0.sr_ratoi=7',
            'experiment_name=cli_deep_typo'
        ])
    assert str(info.value).startswith(
        "model.backbone.attn_cfg[0].sr_ratoi: LeMSA has no argument "
        "'sr_ratoi'. Did you mean 'sr_ratio'?")


def test_too_few_classes_stop_before_the_first_iteration(train_tool,
                                                         tmp_path):
    with pytest.raises(ConfigMismatchError) as info:
        train_tool.main([
            TINY, '--work-dir',
            str(tmp_path), '--cfg-options', 'model.head.num_classes=5',
            'experiment_name=cli_few_classes'
        ])
    assert str(info.value).startswith(
        'model.head.num_classes=5 and data_preprocessor.num_classes=10, but '
        'train_dataloader.dataset (Digits: 10 classes, labels up to 9) '
        "needs 10 ('0', '1', '2', '3', '4', '5', '6', '7', ... (10 in all)): "
        'the first loss would fail with "Target 9 is out of bounds". Set '
        'model.head.num_classes=10.')
    assert 'Epoch(train)' not in log_text(str(tmp_path))


# ------------------------------------------------------------------ CI
def test_ci_runs_the_readme_test_command():
    lines = open(osp.join(REPO, 'README.md')).read().splitlines()
    start = lines.index('```bash')
    expected = lines[start + 2]
    proc = subprocess.run([osp.join(REPO, '.ci', 'run'), '--print-command'],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == expected
    assert 'pytest' in expected


# ---------------------------------------------------------- compile switch
def test_compile_switch_becomes_compile_model_hook(train_tool):
    from mmengine.config import Config
    for value, kwargs in ((True, {}), (dict(mode='max-autotune'),
                                       dict(mode='max-autotune'))):
        cfg = Config.fromfile(TINY)
        cfg.compile = value
        cfg.custom_hooks = [dict(type='EMAHook')]
        cfg = train_tool.merge_args(cfg, train_tool.parse_args([TINY]))
        assert cfg.compile is None  # mmengine's train_step compile is off
        assert cfg.custom_hooks == [
            dict(type='EMAHook'),
            dict(type='CompileModelHook', **kwargs)
        ]


def test_compile_switch_trains_with_backbone_and_neck_compiled(
        train_tool, tmp_path):
    # backend='eager' runs dynamo's capture without inductor's code
    # generation, so the test stays fast; the default backend takes ~30 s.
    runner = train_tool.main([
        TINY, '--work-dir',
        str(tmp_path), '--no-validate', '--cfg-options',
        'train_cfg.max_epochs=1', 'experiment_name=cli_compile',
        'compile.backend=eager'
    ])
    model = runner.model
    assert model.backbone._compiled_call_impl is not None
    assert model.neck._compiled_call_impl is not None
    assert model.head._compiled_call_impl is None
    assert 'torch.compile' in log_text(str(tmp_path))
    state = torch.load(
        osp.join(str(tmp_path), 'epoch_1.pth'), weights_only=True)
    keys = list(state['state_dict'])
    assert keys and not any('_orig_mod' in k for k in keys)
    assert set(keys) == set(model.state_dict())


def test_compile_hook_names_a_missing_target():
    from types import SimpleNamespace

    from lect_mm.engine import CompileModelHook
    runner = SimpleNamespace(model=torch.nn.Module(), logger=None)
    with pytest.raises(AttributeError, match="no submodule 'backbone'"):
        CompileModelHook().before_run(runner)
