"""tools/benchmark_accuracy.py: configs per protocol, resumable runs, table.

Training itself is stubbed here (each model trains one iteration in
tests/test_configs); the stub writes what tools/train.py and tools/test.py
write, so the orchestration, resumption and report are checked for real.
"""
import json
import os.path as osp

import pytest


@pytest.fixture(scope='module')
def ba(load_script):
    return load_script('tools/benchmark_accuracy.py')


def test_every_model_has_a_config(ba):
    assert sorted(ba.PROTOCOLS) == ['cpu', 'gpu']
    for protocol in ba.PROTOCOLS:
        for model in ba.MODELS:
            assert osp.isfile(ba.config_path(protocol, model)), model
        assert ba.PROTOCOLS[protocol]['models'][:2] == ['lect_v1', 'resnet']


def test_describe_counts_the_protocol_model(ba):
    from mmengine.config import Config
    cfg = Config.fromfile(ba.config_path('cpu', 'lect_v1'))
    assert ba.input_size(cfg) == 64
    cfg = Config.fromfile(ba.config_path('gpu', 'lect_v3'))
    assert ba.input_size(cfg) == 224
    cfg = Config.fromfile(ba.config_path('cpu', 'cct_7_3x1'))
    assert ba.input_size(cfg) == 32


class FakeRuns:
    """Stands in for tools/train.py / tools/test.py subprocesses."""

    def __init__(self, run_failed, fail_on=None):
        self.run_failed = run_failed
        self.calls = []
        self.fail_on = fail_on

    def __call__(self, cmd, log_path):
        script, config = cmd[1], cmd[2]
        model = osp.basename(config).split('_fashion_mnist')[0]
        self.calls.append((script, model, cmd))
        if (script, model) == self.fail_on:
            raise self.run_failed('killed', 10.0)
        if script == 'tools/train.py':
            work_dir = cmd[cmd.index('--work-dir') + 1]
            with open(osp.join(work_dir, 'last_checkpoint'), 'w') as f:
                f.write(osp.join(work_dir, 'epoch_8.pth'))
            return 10.0
        out = cmd[cmd.index('--out') + 1]
        top1 = 90.0 if model == 'resnet' else 85.0
        with open(out, 'w') as f:
            json.dump({'accuracy/top1': top1, 'accuracy/top5': 99.5}, f)
        return 1.0


def test_interrupted_table_continues_where_it_stopped(ba, tmp_path,
                                                      monkeypatch):
    fake = FakeRuns(ba.RunFailed, fail_on=('tools/train.py', 'resnet'))
    monkeypatch.setattr(ba, '_run', fake)
    monkeypatch.setattr(ba, 'describe', lambda config, opts: dict(
        params=1_000_000, flops=50_000_000, resolution=64, epochs=8,
        train_images=10_000, seed=0))
    monkeypatch.setattr(ba, 'plot', lambda results, root, png: '| table |')
    args = ['--protocol', 'cpu', '--models', 'lect_v1', 'resnet',
            '--work-dir', str(tmp_path / 'wd'), '--out-dir',
            str(tmp_path / 'out')]
    with pytest.raises(RuntimeError, match='killed'):
        ba.main(args)
    assert (tmp_path / 'wd' / 'lect_v1' / 'result.json').is_file()
    assert not (tmp_path / 'wd' / 'resnet' / 'result.json').exists()

    fake.fail_on, fake.calls = None, []
    results = ba.main(args)
    # lect_v1 is not run again; resnet trains (with --resume) and tests
    assert [(s, m) for s, m, _ in fake.calls] == [
        ('tools/train.py', 'resnet'), ('tools/test.py', 'resnet')]
    assert '--resume' in fake.calls[0][2]
    # the interrupted attempt and the finished one are both counted
    assert results['resnet']['train_attempts'] == 2
    assert results['resnet']['train_seconds'] == 20.0
    assert results['resnet']['images_per_s'] == 8 * 10_000 / 20.0

    text = (tmp_path / 'out' / 'fashion_mnist_cpu.md').read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith('| ResNet')
            or ln.startswith('| LeCT')]
    # sorted by top-1, with the measured figures
    assert rows[0].startswith('| ResNet | 90.00 | 99.50 | 1.0000 | 0.0500 |')
    assert rows[1].startswith('| LeCT (v1) | 85.00 |')
    assert '| table |' in text and 'fashion_mnist_cpu.png' in text
