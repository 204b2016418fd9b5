"""tools/benchmark_accuracy.py: configs per protocol, seeds, training-set
sizes at equal steps, resumable runs and the report.

The orchestration is checked twice: with stand-ins for the tool's
subprocesses (fast, every branch), and with real trainings of a small model
on tiny generated Fashion-MNIST files, run in this process (seeds, sizes,
an interruption and the resumption after it).
"""
import json
import math
import os
import os.path as osp
import time

import numpy as np
import pytest
import torch

from lect_mm.datasets.fashion_mnist import write_idx


@pytest.fixture(scope='module')
def ba(load_script):
    return load_script('tools/benchmark_accuracy.py')


def test_every_model_has_a_config(ba):
    assert sorted(ba.PROTOCOLS) == ['cpu', 'cpu112', 'gpu']
    for protocol in ba.PROTOCOLS:
        for model in ba.available_models(protocol):
            assert osp.isfile(ba.config_path(protocol, model)), model
        assert set(ba.PROTOCOLS[protocol]['models']) <= set(
            ba.available_models(protocol))
        assert ba.PROTOCOLS[protocol]['models'][:2] == ['lect_v1', 'resnet']
    assert ba.available_models('cpu') == list(ba.MODELS)
    with pytest.raises(ValueError, match='convnext has no config under the '
                       "'cpu112' protocol; choose from"):
        ba.config_path('cpu112', 'convnext')
    with pytest.raises(SystemExit):
        ba.parse_args(['--protocol', 'cpu112', '--models', 'convnext'])


def test_cpu112_differs_from_cpu_in_the_input_size_and_geometry(ba):
    from mmengine.config import Config
    for model in ba.available_models('cpu112'):
        small = Config.fromfile(ba.config_path('cpu', model))
        large = Config.fromfile(ba.config_path('cpu112', model))
        assert ba.input_size(small) == 64 and ba.input_size(large) == 112
        for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            pipelines = [cfg[key].dataset.pop('pipeline')
                         for cfg in (small, large)]
            assert [[(t['type'], t.get('scale')) for t in p]
                    for p in pipelines] == [[
                        (t['type'], 64 if t['type'] == 'Resize' else
                         t.get('scale')) for t in pipelines[1]
                    ], [(t['type'], 112 if t['type'] == 'Resize' else
                         t.get('scale')) for t in pipelines[0]]]
        for cfg in (small, large):
            cfg.model.backbone.pop('img_size', None)
            cfg.model.backbone.pop('attn_cfg', None)
            cfg.pop('train_pipeline'), cfg.pop('test_pipeline')
        assert small.to_dict() == large.to_dict(), model


def test_cpu112_lect_pools_to_the_reports_grids(ba):
    from mmengine.config import Config
    from mmpretrain.registry import MODELS as REGISTRY

    from lect_mm.blocks.pooled_attention import PooledKeyAttention
    for model in ('lect_v1', 'lect_v3', 'lect_v1_ablation'):
        cfg = Config.fromfile(ba.config_path('cpu112', model))
        backbone = REGISTRY.build(cfg.model.backbone)
        grids = []
        for m in backbone.modules():
            if isinstance(m, PooledKeyAttention):
                m.register_forward_pre_hook(
                    lambda m, args: grids.append(m.pooled_grid(args[1])))
        backbone(torch.zeros(1, 3, 112, 112))
        # the report's 4x4 grids in stages 1-2, stage 3's whole 7x7 map
        assert sorted(set(map(tuple, grids))) == [(4, 4), (7, 7)], model
        assert [tuple(g) for g in grids[:1]] == [(4, 4)]
        assert tuple(grids[-1]) == (7, 7)


def test_ablation_config_differs_in_the_attention_only(ba):
    from mmengine.config import Config
    plain = Config.fromfile(ba.config_path('cpu', 'lect_v1'))
    ablated = Config.fromfile(ba.config_path('cpu', 'lect_v1_ablation'))
    attn = ablated.model.backbone.pop('attn_cfg')
    assert [a['sr_ratio'] for a in attn] == [
        a['sr_ratio'] for a in plain.model.backbone.pop('attn_cfg')
    ]
    assert all(not a['conv_skip'] and a['qkv_mode'] == 'parallel'
               for a in attn)
    assert ablated.to_dict() == plain.to_dict()


def test_describe_counts_the_protocol_model(ba):
    from mmengine.config import Config
    cfg = Config.fromfile(ba.config_path('cpu', 'lect_v1'))
    assert ba.input_size(cfg) == 64
    cfg = Config.fromfile(ba.config_path('gpu', 'lect_v3'))
    assert ba.input_size(cfg) == 224
    cfg = Config.fromfile(ba.config_path('cpu', 'cct_7_3x1'))
    assert ba.input_size(cfg) == 32


def test_smaller_sets_train_for_the_same_steps(ba):
    cfg = ba.load_config(ba.config_path('cpu', 'resnet'))
    # the protocol: 8 epochs of ceil(10,000 / 64) = 157 steps
    assert ba.schedule_for(cfg, 10_000, 10_000) == (10_000, 8, 1256, 1)
    # 16 steps per epoch: 78.5 -> 79 epochs, validated every 10
    assert ba.schedule_for(cfg, 10_000, 1_000) == (1_000, 79, 1264, 10)
    assert ba.schedule_for(cfg, 10_000, 3_000) == (3_000, 27, 1269, 3)
    assert ba.schedule_options(ba.schedule_for(cfg, 10_000, 1_000)) == [
        'train_dataloader.dataset.indices=1000', 'train_cfg.max_epochs=79',
        'train_cfg.val_interval=10', 'default_hooks.checkpoint.interval=10'
    ]
    cfg.train_dataloader.drop_last = True
    with pytest.raises(ValueError, match='smaller than one batch of 64'):
        ba.schedule_for(cfg, 10_000, 63)


def test_pairs_the_report_ranks(ba):
    pairs = ba.report_ranked_pairs(list(ba.REPORT_TOP1))
    # above on all three data sets
    assert ('lect_v1', 'resnet') in pairs and ('lect_v3', 'ceit_gap') in pairs
    assert ('lect_v1', 'lect_v1_ablation') in pairs
    assert ('ceit_gap', 'resnet') in pairs and ('resnet', 'vit') in pairs
    # v1 and v3 swap places between data sets; so do ResNet and the ablation
    for a, b in [('lect_v1', 'lect_v3'), ('resnet', 'lect_v1_ablation')]:
        assert (a, b) not in pairs and (b, a) not in pairs


def _runs(model, top1s):
    return [dict(model=model, seed=s, top1=t) for s, t in enumerate(top1s)]


def test_differences_against_the_seeds_spread(ba):
    rows = ba.compare_pairs({
        'lect_v1': _runs('lect_v1', [88.0, 88.2, 88.4]),  # SD 0.2
        'lect_v3': _runs('lect_v3', [88.1, 88.3, 88.5]),
        'resnet': _runs('resnet', [87.0, 87.1, 87.2]),  # SD 0.1
        'vit': _runs('vit', [88.0, 88.6, 89.2]),  # SD 0.6
    })
    verdicts = {(r['a'], r['b']): r for r in rows}
    assert verdicts['lect_v1', 'resnet']['verdict'] == 'yes, as the report'
    assert verdicts['lect_v1', 'resnet']['diff'] == pytest.approx(1.1)
    assert verdicts['lect_v1', 'resnet']['spread'] == pytest.approx(0.3)
    assert verdicts['resnet', 'vit']['verdict'] == 'yes, against the report'
    assert verdicts['lect_v3', 'vit']['verdict'] == 'no: within the spread'
    assert ('lect_v1', 'lect_v3') not in verdicts
    one = ba.compare_pairs({'lect_v1': _runs('lect_v1', [88.0]),
                            'resnet': _runs('resnet', [87.0])})
    assert one[0]['verdict'] == 'one seed: cannot tell'


# ------------------------------------------------ stand-in subprocesses
class FakeRuns:
    """Stands in for tools/train.py / tools/test.py subprocesses."""

    def __init__(self, run_failed, fail_on=None):
        self.run_failed = run_failed
        self.calls = []
        self.fail_on = fail_on

    def __call__(self, cmd, log_path):
        script, config = cmd[1], cmd[2]
        model = osp.basename(config).split('_fashion_mnist')[0]
        seed = int(next(c for c in cmd if c.startswith('randomness.seed='))
                   .split('=')[1])
        self.calls.append((script, model, seed, cmd))
        if (script, model, seed) == self.fail_on:
            raise self.run_failed('killed', 10.0)
        if script == 'tools/train.py':
            work_dir = cmd[cmd.index('--work-dir') + 1]
            with open(osp.join(work_dir, 'last_checkpoint'), 'w') as f:
                f.write(osp.join(work_dir, 'epoch_8.pth'))
            return 10.0
        out = cmd[cmd.index('--out') + 1]
        top1 = (90.0 if model == 'resnet' else 85.0) + seed
        with open(out, 'w') as f:
            json.dump({'accuracy/top1': top1, 'accuracy/top5': 99.5}, f)
        return 1.0


@pytest.fixture
def fake_tool(ba, monkeypatch):
    # each training's children use 7 CPU seconds
    clock = iter(range(0, 10_000, 7))
    monkeypatch.setattr(ba, 'children_cpu_seconds', lambda: next(clock))
    monkeypatch.setattr(ba, 'describe', lambda config, opts: dict(
        params=1_000_000, flops=50_000_000, resolution=64))
    monkeypatch.setattr(ba, 'train_set_size', lambda cfg: int(
        cfg.train_dataloader.dataset.indices))
    monkeypatch.setattr(ba, 'plot', lambda results, root, png: '| table |')
    fake = FakeRuns(ba.RunFailed)
    monkeypatch.setattr(ba, '_run', fake)
    return fake


def test_interrupted_runs_continue_where_they_stopped(ba, tmp_path,
                                                      fake_tool):
    fake_tool.fail_on = ('tools/train.py', 'resnet', 1)
    args = ['--protocol', 'cpu', '--models', 'lect_v1', 'resnet',
            '--seeds', '0', '1', '--work-dir', str(tmp_path / 'wd'),
            '--out-dir', str(tmp_path / 'out')]
    with pytest.raises(RuntimeError, match='killed'):
        ba.main(args)
    done = sorted(p.parent.name for p in (tmp_path / 'wd').glob(
        '*/*/result.json'))
    assert done == ['n10000_seed0', 'n10000_seed0', 'n10000_seed1']

    fake_tool.fail_on, fake_tool.calls = None, []
    results = ba.main(args)
    # only the interrupted run trains again (with --resume) and tests
    assert [c[:3] for c in fake_tool.calls] == [
        ('tools/train.py', 'resnet', 1), ('tools/test.py', 'resnet', 1)]
    assert '--resume' in fake_tool.calls[0][3]
    # the interrupted attempt and the finished one are both counted
    resnet = results['resnet/n10000_seed1']
    assert resnet['train_attempts'] == 2 and resnet['train_seconds'] == 20.0
    assert resnet['train_cpu_seconds'] == 14
    assert resnet['images_per_s'] == 8 * 10_000 / 20.0
    assert resnet['steps'] == 1256 and resnet['seed'] == 1

    text = (tmp_path / 'out' / 'fashion_mnist_cpu.md').read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith('| ResNet |')
            or ln.startswith('| LeCT (v1) |')]
    # sorted by mean top-1, seeds side by side, with the measured figures
    assert rows[0].startswith('| ResNet | 90.50 ± 0.71 | 90.00 | 91.00 | '
                              '99.50 | 1.0000 | 0.0500 |')
    assert rows[1].startswith('| LeCT (v1) | 85.50 ± 0.71 | 85.00 | 86.00 |')
    # the report ranks LeCT v1 above ResNet; here ResNet is 5 points ahead
    assert ('| LeCT (v1) > ResNet | +3.82 | -5.00 | 1.41 | yes, against '
            'the report |') in text
    assert '| table |' in text and 'fashion_mnist_cpu_cost.png' in text
    assert (tmp_path / 'out' / 'fashion_mnist_cpu_cost.png').stat().st_size
    # both commands are listed, once each
    assert text.count('--seeds 0 1') == 1


def test_sizes_add_a_data_efficiency_table(ba, tmp_path, fake_tool):
    ba.main(['--protocol', 'cpu', '--models', 'lect_v1', 'resnet',
             '--train-images', '1000', '10000', '--work-dir',
             str(tmp_path / 'wd'), '--out-dir', str(tmp_path / 'out')])
    train = [c[3] for c in fake_tool.calls if c[0] == 'tools/train.py']
    assert len(train) == 4
    assert 'train_cfg.max_epochs=79' in train[0]
    assert 'train_dataloader.dataset.indices=1000' in train[0]
    text = (tmp_path / 'out' / 'fashion_mnist_cpu.md').read_text()
    assert ('| model | 1,000 images (79 epochs, 1,264 steps) | 10,000 images '
            '(8 epochs, 1,256 steps) |') in text
    assert '| ResNet | 90.00 | 90.00 |' in text
    assert (tmp_path / 'out' /
            'fashion_mnist_cpu_data_efficiency.png').stat().st_size
    # the seeds table holds the protocol's size only
    assert '## Seeds: 10,000 training images' in text


# --------------------------------------------------------- real trainings
def _loader_options(root):
    """``--cfg-options`` of the three loaders for the files at ``root``, in
    this process: no worker processes to share a serialised copy of the
    data set with (mmengine serialises it after a gc.collect())."""
    return [
        f'{split}_dataloader.{key}'
        for split in ('train', 'val', 'test')
        for key in ('dataset.data_root=' + root, 'num_workers=0',
                    'persistent_workers=False',
                    'dataset.serialize_data=False')
    ]


def _train_and_test_in_process(ba, load_script, monkeypatch):
    """The tool's tools/train.py and tools/test.py runs as their main() in
    this process."""
    tools = {t: load_script(t) for t in ('tools/train.py', 'tools/test.py')}

    def in_process(cmd, log_path):
        tools[cmd[1]].main(cmd[2:])
        return 1.0

    monkeypatch.setattr(ba, '_run', in_process)


def _write_tiny_fashion_mnist(root, train=48, test=24):
    rng = np.random.RandomState(0)
    for prefix, num in (('train', train), ('t10k', test)):
        labels = (np.arange(num) % 10).astype(np.uint8)
        # a class-dependent brightness, so there is something to learn
        images = (rng.randint(0, 80, (num, 28, 28)) +
                  labels[:, None, None] * 17).astype(np.uint8)
        write_idx(osp.join(root, f'{prefix}-images-idx3-ubyte.gz'), images)
        write_idx(osp.join(root, f'{prefix}-labels-idx1-ubyte.gz'), labels)


@pytest.mark.heavy
def test_seeds_and_sizes_train_for_real(ba, load_script, tmp_path,
                                        monkeypatch):
    root = str(tmp_path / 'fm')
    os.makedirs(root)
    _write_tiny_fashion_mnist(root)
    options = _loader_options(root) + [
        'train_dataloader.dataset.indices=32',
        'train_dataloader.batch_size=16', 'val_dataloader.dataset.indices=12',
        'train_cfg.max_epochs=2', 'default_hooks.logger.interval=1',
        # no best checkpoint (a copy of the weights after each validation):
        # the runs are resumed and tested from the last one
        'default_hooks.checkpoint.save_best=None',
        # 32x32 instead of the protocol's 64x64: the claims are about seeds,
        # sizes and resumption, not the resolution (test_cpu112_* is)
        *[f'{split}_dataloader.dataset.pipeline.{i}.scale=32'
          for split, i in (('train', 2), ('val', 0), ('test', 0))]
    ]
    tools = {t: load_script(t) for t in ('tools/train.py', 'tools/test.py')}
    interrupt = {'seed': 1}

    def in_process(cmd, log_path):
        """tools/*.py main() in this process; the test of seed 1 is
        interrupted once."""
        start = time.perf_counter()
        if cmd[1] == 'tools/test.py' and any(
                c == f'randomness.seed={interrupt.get("seed")}' for c in cmd):
            interrupt.clear()
            raise ba.RunFailed('interrupted', 0.5)
        tools[cmd[1]].main(cmd[2:])
        return time.perf_counter() - start

    monkeypatch.setattr(ba, '_run', in_process)
    # the convergence plot reads the runs' logs in a process of its own
    # (tested with tools/analysis_tools/plot_convergence.py); the cost and
    # data-efficiency plots are drawn by the tests above, here they record
    # what the report hands them
    monkeypatch.setattr(ba, 'plot', lambda results, root, png: '| table |')
    plotted = {}
    for name in ('plot_cost', 'plot_data_efficiency'):
        monkeypatch.setattr(ba, name, lambda data, png, title: plotted.update(
            {osp.basename(png): data}))
    common = ['--protocol', 'cpu', '--models', 'resnet', '--work-dir',
              str(tmp_path / 'wd'), '--out-dir', str(tmp_path / 'out'),
              '--cfg-options', *options]
    seeds = common + ['--seeds', '0', '1']
    with pytest.raises(ba.RunFailed):
        ba.main(seeds)
    results = ba.main(seeds)
    results.update(ba.main(common + ['--train-images', '16']))
    assert sorted(results) == [
        'resnet/n16_seed0', 'resnet/n32_seed0', 'resnet/n32_seed1'
    ]
    # 16 images: one step per epoch, so 4 epochs make the 2 x 2 steps of 32
    small, full = results['resnet/n16_seed0'], results['resnet/n32_seed0']
    assert small['epochs'] == 4 and small['steps'] == 4
    assert small['val_interval'] == 2
    assert (full['epochs'], full['steps'], full['train_images']) == (2, 4, 32)
    assert full['resolution'] == 32
    assert results['resnet/n32_seed1']['train_attempts'] == 2

    def weights(result):
        ckpt = torch.load(osp.join(tmp_path / 'wd', result['work_dir'],
                                   osp.basename(result['checkpoint'])),
                          weights_only=True)
        assert ckpt['meta']['epoch'] == result['epochs']
        return ckpt['state_dict']

    # the seed changes the run
    a, b = weights(full), weights(results['resnet/n32_seed1'])
    assert any(not torch.equal(a[k], b[k]) for k in a)
    config_dump = (tmp_path / 'wd' / 'resnet' / 'n32_seed1' /
                   'resnet_fashion_mnist_cpu.py').read_text()
    assert 'seed=1' in config_dump
    text = (tmp_path / 'out' / 'fashion_mnist_cpu.md').read_text()
    assert '## Seeds: 32 training images' in text
    assert '| 16 images (4 epochs, 4 steps) | 32 images (2 epochs, 4 steps)' \
        in text
    assert '| ResNet | ' in text and 'fashion_mnist_cpu_cost.png' in text
    # the plots get the runs of the protocol's size, and each size's top-1s
    assert [r['seed'] for r in plotted['fashion_mnist_cpu_cost.png'][
        'resnet']] == [0, 1]
    assert plotted['fashion_mnist_cpu_data_efficiency.png'] == {
        'resnet': {16: [small['top1']],
                   32: [full['top1'], results['resnet/n32_seed1']['top1']]}
    }


@pytest.mark.heavy
def test_cpu112_trains_lect_at_112_for_real(ba, load_script, tmp_path,
                                            monkeypatch):
    root = str(tmp_path / 'fm')
    os.makedirs(root)
    # one step of 4 images, validated and tested on 4: the claims are the
    # resolution, the steps and the protocol model's size, not the data
    _write_tiny_fashion_mnist(root, train=4, test=4)
    options = _loader_options(root) + [
        'train_dataloader.dataset.indices=4',
        'train_dataloader.batch_size=4', 'val_dataloader.dataset.indices=4',
        'train_cfg.max_epochs=1',
        # tested from the last checkpoint; no best one to write
        'default_hooks.checkpoint.save_best=None']
    _train_and_test_in_process(ba, load_script, monkeypatch)
    # the report's plots are drawn by the tests with stand-in runs
    for name in ('plot', 'plot_cost'):
        monkeypatch.setattr(ba, name, lambda *args: '| table |')
    out = tmp_path / 'out'
    results = ba.main(['--protocol', 'cpu112', '--models', 'lect_v1',
                       '--work-dir', str(tmp_path / 'wd'), '--out-dir',
                       str(out), '--cfg-options', *options])
    result = results['lect_v1/n4_seed0']
    assert result['resolution'] == 112 and result['steps'] == 1
    assert result['config'] == 'configs/fashion_mnist/' \
        'lect_v1_fashion_mnist_cpu112.py'
    # the same parameters as at 64x64, 3.07x the FLOPs (quadratic in the side
    # but for the pooled grids, fixed at 4x4, 4x4, 7x7)
    assert result['params'] == 1_151_562
    assert 3.0 < result['flops'] / 53_043_072 < 3.2
    runs = json.loads((out / 'fashion_mnist_cpu112_runs.json').read_text())
    assert [(r['model'], r['resolution'], r['top1']) for r in runs] == [
        ('lect_v1', 112, result['top1'])]


@pytest.mark.heavy
def test_timm_model_at_a_flops_budget_on_held_out_images_for_real(
        ba, load_script, tmp_path, monkeypatch):
    root = str(tmp_path / 'fm')
    os.makedirs(root)
    _write_tiny_fashion_mnist(root, train=24, test=4)
    options = _loader_options(root) + [
        'train_dataloader.dataset.indices=24',
        'train_dataloader.batch_size=8', 'train_cfg.max_epochs=1',
        'default_hooks.checkpoint.save_best=None',
        *[f'{split}_dataloader.dataset.pipeline.{i}.scale=32'
          for split, i in (('train', 2), ('val', 0), ('test', 0))]]
    _train_and_test_in_process(ba, load_script, monkeypatch)
    out = tmp_path / 'out'
    results = ba.main(['--protocol', 'cpu', '--models', 'timm/test_resnet',
                       '--budget', 'flops', '--budget-ref', 'resnet',
                       '--holdout', '8', '--work-dir', str(tmp_path / 'wd'),
                       '--out-dir', str(out), '--cfg-options', *options])
    (name, result), = results.items()
    # ResNet's 3 steps (7.5 MFLOPs an image at 32x32) buy test_resnet (4.2
    # MFLOPs) 5.4 steps: 2.7 epochs of the 16 images left -> 3 epochs
    assert name == 'timm-test_resnet/n16_e3_holdout8_seed0'
    assert (result['epochs'], result['steps']) == (3, 6)
    assert result['lr'] == 6e-3 and result['params'] == 373_658
    assert result['scored_on'] == 'training images 16-23'
    # validated and scored on the 8 held-out training images
    held = (tmp_path / 'wd' / name / 'config' / 'holdout.py').read_text()
    assert "indices=list(range(16, 24))" in held
    assert result['top1'] * 8 / 100 == pytest.approx(
        round(result['top1'] * 8 / 100))
    ckpt = torch.load(tmp_path / 'wd' / name / 'epoch_3.pth',
                      weights_only=True)
    # mmpretrain's TimmClassifier saves timm's own keys
    assert 'conv1.0.weight' in ckpt['state_dict']
    assert not (out / 'fashion_mnist_cpu.md').exists()  # not the protocol's


def _write_runs(path, size, top1s):
    runs = [dict(model=m, seed=s, train_images=10_000, top1=t,
                 resolution=size) for m, ts in top1s.items()
            for s, t in enumerate(ts)]
    path.write_text(json.dumps(runs))


def test_resolution_report_compares_margins_across_sizes(ba, tmp_path):
    with pytest.raises(SystemExit, match='fashion_mnist_cpu_runs.json is '
                       'missing; write it with --protocol cpu --report-only'):
        ba.main(['--resolution-report', '--out-dir', str(tmp_path)])
    _write_runs(tmp_path / 'fashion_mnist_cpu_runs.json', 64, {
        'lect_v1': [88.0, 88.2, 88.4], 'lect_v3': [88.0, 88.1, 88.2],
        'resnet': [87.0, 87.1, 87.2], 'vit': [72.0, 72.1, 72.2]})
    _write_runs(tmp_path / 'fashion_mnist_cpu112_runs.json', 112, {
        'lect_v1': [90.0, 90.2, 90.4], 'lect_v3': [88.3, 88.4, 88.5],
        'resnet': [87.0, 87.1, 87.2]})
    ba.main(['--resolution-report', '--out-dir', str(tmp_path)])
    text = (tmp_path / 'fashion_mnist_resolution.md').read_text()
    assert ('| LeCT (v1) | 88.20 ± 0.20 (3) | 90.20 ± 0.20 (3) | +2.00 |'
            in text)
    assert 'ViT' not in text  # not run at 112
    # v1's margin over ResNet grows by 2.00, beyond 0.2 + 0.1 + 0.2 + 0.1;
    # v3's by 0.30, within 0.1 + 0.1 + 0.1 + 0.1
    assert ('| LeCT (v1) > ResNet | +1.10 | +3.10 | +2.00 | 0.60 | yes, it '
            'grows |') in text
    assert ('| LeCT v3 > ResNet | +1.00 | +1.30 | +0.30 | 0.40 | no: within '
            'the spread |') in text
    assert (tmp_path / 'fashion_mnist_resolution.png').stat().st_size


# ------------------------------------------------------- budgets and timm
def test_budgets_give_every_model_the_reference_runs_cost(ba):
    # epochs: the reference's steps whatever a step costs
    assert ba.budget_steps('epochs', 1., 1256, 0.5, 0.1) == 1256
    assert ba.budget_steps('epochs', 0.5, 1256) == 628
    # a step at half the reference's cost: twice the steps
    assert ba.budget_steps('cpu-time', 1., 1256, 0.5, 0.25) == 2512
    assert ba.budget_steps('cpu-time', 2., 1256, 0.5, 0.25) == 5024
    # FLOPs of the report's ResNet (30.1 M) against LeCT v1's (53.0 M)
    assert ba.budget_steps('flops', 1., 1256, 53_043_072, 30_090_000) == 2214
    with pytest.raises(ValueError, match="--budget: 'joules'; choose from"):
        ba.budget_steps('joules', 1., 1256)
    with pytest.raises(ValueError, match='must be positive'):
        ba.budget_steps('cpu-time', 1., 1256, 0.5, 0.)
    cfg = ba.load_config(ba.config_path('cpu', 'resnet'))
    # the reference's own steps are the protocol's schedule
    assert ba.schedule_for(cfg, 10_000, 10_000, 1256) == (10_000, 8, 1256, 1)
    # 2214 steps: 14.1 epochs of 157 -> 14, validated every 2 epochs, so as
    # often as the protocol's 8 epochs
    assert ba.schedule_for(cfg, 10_000, 10_000, 2214) == (10_000, 14, 2198,
                                                          2)
    assert ba.schedule_for(cfg, 10_000, 10_000, 5024) == (10_000, 32, 5024,
                                                          4)
    # held out 2,000: the same steps over 125-step epochs
    assert ba.schedule_for(cfg, 10_000, 8_000, 1256) == (8_000, 10, 1250, 1)
    run = ba.Run('timm/resnet18', 8_000, 0, 10, 0.5, 2_000)
    assert run.name == 'timm-resnet18/n8000_e10_lr0.5_holdout2000_seed0'
    assert not run.on_protocol and ba.Run('resnet', 10_000, 1).on_protocol


def test_timm_models_by_name(ba):
    assert ba.config_path('cpu', 'timm/test_vit').endswith(
        'configs/fashion_mnist/timm_fashion_mnist_cpu.py')
    assert ba.label('timm/test_vit') == 'timm test_vit'
    assert ba.model_order('timm/a') > ba.model_order('cct_7_3x1')
    # the report's lr of the model's kind
    assert ba.model_options('cpu', 'timm/test_vit') == (
        'model.model_name=test_vit', 'optim_wrapper.optimizer.lr=0.001')
    assert ba.model_options('cpu', 'timm/test_resnet') == (
        'model.model_name=test_resnet', 'optim_wrapper.optimizer.lr=0.006')
    assert ba.model_options('cpu', 'resnet') == ()
    with pytest.raises(ValueError, match="timm has no model 'resnet_18'; "
                       r"similar names: \[.*'resnet18'"):
        ba.check_model('cpu', 'timm/resnet_18')
    with pytest.raises(ValueError, match='timm models have no config under '
                       "the 'cpu112' protocol"):
        ba.check_model('cpu112', 'timm/test_vit')
    with pytest.raises(ValueError, match=r"restnet has no config .* or "
                       'timm/NAME for any timm model'):
        ba.check_model('cpu', 'restnet')
    with pytest.raises(SystemExit):
        ba.parse_args(['--protocol', 'cpu', '--budget-ref', 'timm/nope'])
    with pytest.raises(SystemExit):
        ba.parse_args(['--protocol', 'cpu', '--holdout', '10',
                       '--train-images', '100'])


def test_attention_is_a_softmax_in_the_forward(ba):
    import torch.nn as nn

    class Attend(nn.Module):

        def forward(self, x):
            t = x.flatten(2)
            return (t.transpose(1, 2) @ t).softmax(-1).mean((1, 2))

    assert ba.has_attention(Attend())
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1),
                         nn.Sigmoid())
    assert not ba.has_attention(conv) and conv.training


class CostedRuns(FakeRuns):
    """FakeRuns whose trainings cost CPU seconds: 2 per start-up plus the
    model's per-step cost times the steps of the command."""

    PER_STEP = {'lect_v1': 0.5, 'resnet': 0.2, 'timm': 0.25}

    def __init__(self, run_failed, ba):
        super().__init__(run_failed)
        self.ba, self.cpu = ba, 0.

    def __call__(self, cmd, log_path):
        model = osp.basename(cmd[2]).split('_fashion_mnist')[0]
        opts = dict(c.split('=', 1) for c in cmd if '=' in c)
        if cmd[1] == 'tools/train.py':
            images = int(opts['train_dataloader.dataset.indices'])
            epochs = int(opts['train_cfg.max_epochs'])
            self.cpu += 2 + self.PER_STEP[model] * epochs * math.ceil(
                images / 64)
        if 'randomness.seed' not in opts:  # a calibration run
            self.calls.append(('calibration', model, None, cmd))
            return 1.
        return super().__call__(cmd, log_path)


def test_cpu_time_budget_calibrates_once_and_sets_epochs(ba, tmp_path,
                                                         fake_tool,
                                                         monkeypatch):
    costed = CostedRuns(ba.RunFailed, ba)
    monkeypatch.setattr(ba, '_run', costed)
    monkeypatch.setattr(ba, 'children_cpu_seconds', lambda: costed.cpu)
    args = ['--protocol', 'cpu', '--budget', 'cpu-time', '--models',
            'resnet', 'timm/test_vit', '--work-dir', str(tmp_path / 'wd'),
            '--out-dir', str(tmp_path / 'out')]
    ba.main(args + ['--budget-scale', '1', '0.5'])
    calibrations = [c for c in costed.calls if c[0] == 'calibration']
    # the reference and both models, a short and a long run each
    assert [c[1] for c in calibrations] == ['lect_v1'] * 2 + [
        'resnet'] * 2 + ['timm'] * 2
    assert 'train_dataloader.dataset.indices=320' in calibrations[0][3]
    cache = json.loads((tmp_path / 'wd' / 'calibration.json').read_text())
    assert cache['cpu resnet']['cpu_seconds_per_step'] == pytest.approx(.2)
    # 0.5 / 0.2 x 1256 = 3140 steps = 20 epochs; 0.5 / 0.25 -> 16 epochs
    epochs = [next(c for c in cmd if c.startswith('train_cfg.max_epochs='))
              for s, m, _, cmd in costed.calls if s == 'tools/train.py']
    assert epochs == ['train_cfg.max_epochs=20', 'train_cfg.max_epochs=16',
                      'train_cfg.max_epochs=10', 'train_cfg.max_epochs=8']
    done = sorted(str(p.parent.relative_to(tmp_path / 'wd')) for p in (
        tmp_path / 'wd').glob('*/*/result.json'))
    assert done == ['resnet/n10000_e10_seed0', 'resnet/n10000_e20_seed0',
                    'timm-test_vit/n10000_e16_seed0',
                    'timm-test_vit/n10000_seed0']
    # a second command reuses the calibration and the finished runs
    costed.calls.clear()
    ba.main(args)
    assert costed.calls == []


def _result(root, model, seed, epochs, top1, cpu_min, lr=1e-3,
            lr_scale=1., holdout=0):
    name = (f'{model.replace("/", "-")}/n{10_000 - holdout}_e{epochs}'
            f'_lr{lr_scale:g}_holdout{holdout}_seed{seed}')
    os.makedirs(root / name)
    (root / name / 'result.json').write_text(json.dumps(dict(
        model=model, seed=seed, epochs=epochs, top1=top1, top5=99.,
        train_images=10_000 - holdout, holdout=holdout, lr=lr * lr_scale,
        lr_scale=lr_scale, train_seconds=cpu_min * 60,
        train_cpu_seconds=cpu_min * 60, params=1_000_000 if
        model != 'resnet' else 2_000_000, flops=50_000_000 if
        model == 'lect_v1' else 25_000_000, resolution=64,
        commit='abc1234', work_dir=name)))


def test_cost_report(ba, tmp_path, monkeypatch):
    wd = tmp_path / 'wd'
    monkeypatch.setattr(ba, 'describe', lambda config, opts: dict(
        params=1, flops=50_000_000 if 'lect_v1' in config else 25_000_000,
        resolution=64))
    wd.mkdir()
    (wd / 'calibration.json').write_text(json.dumps({
        f'cpu {m}': dict(cpu_seconds_per_step=s, machine='CPU (box, 1 '
                         'intra-op thread per run)') for m, s in (
            ('lect_v1', 0.5), ('resnet', 0.2), ('timm/test_vit', 1.0))}))
    # at the CPU-time budget: lect_v1 8 epochs, resnet 20, timm/x 4
    for seed, (a, b, c) in enumerate([(88.0, 87.0, 80.0), (88.2, 87.5, 81.0),
                                      (88.4, 88.0, 82.0)]):
        _result(wd, 'lect_v1', seed, 8, a, 10.)
        _result(wd, 'resnet', seed, 20, b, 11., lr=6e-3)
        _result(wd, 'timm/test_vit', seed, 4, c, 9.)
        _result(wd, 'resnet', seed, 16, b - 0.5, 8., lr=6e-3)  # FLOPs
    _result(wd, 'resnet', 0, 8, 85.0, 4., lr=6e-3)  # epochs: a curve point
    _result(wd, 'lect_v1', 0, 16, 89.0, 20.)  # --budget-scale 2: another
    for scale, (a, b) in {0.5: (84.0, 86.0), 1.: (85.6, 85.5),
                          2.: (85.2, 84.0)}.items():
        _result(wd, 'lect_v1', 0, 10, a, 10., lr_scale=scale, holdout=2000)
        _result(wd, 'timm/test_vit', 0, 5, b, 9., lr_scale=scale, holdout=2000)
    (tmp_path / 'lat.json').write_text(json.dumps(dict(
        setup='ONNX Runtime, 2 threads', command='python benchmarks/'
        'inference.py --engine ort', models={'lect_v1': {'ms': 2.5}})))
    out = tmp_path / 'out'
    ba.main(['--protocol', 'cpu', '--cost-report', '--work-dir', str(wd),
             '--out-dir', str(out), '--latency', str(tmp_path / 'lat.json')])
    text = (out / 'fashion_mnist_cost.md').read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith('| ')]
    # the machine is the one the runs were calibrated on, not this process's
    assert 'Measured on: CPU (box, 1 intra-op thread per run); commit' in text
    # ranked by mean top-1; ResNet's 87.50 ± 0.50 is behind LeCT v1's
    # 88.20 ± 0.20 by 0.70 = the spread exactly: not beyond it
    assert rows[1].startswith('| LeCT (v1) | 88.20 ± 0.20 | 88.00, 88.20, '
                              '88.40 | 8 | 0.001 |')
    assert '| 0.500 | 10.0 | 2.50 | — |' in rows[1]
    assert rows[2].startswith('| ResNet | 87.50 ± 0.50 | 87.00, 87.50, '
                              '88.00 | 20 | 0.006 |')
    assert rows[2].endswith('| no: within the spread |')
    assert rows[3].startswith('| timm test_vit | 81.00 ± 1.00 |')
    assert rows[3].endswith('| — | yes, behind |')
    # the FLOP budget: 50 / 25 M x 1256 steps = 16 epochs of ResNet
    assert '| ResNet | 87.00 ± 0.50 | 86.50, 87.00, 87.50 | 16 | 8.0 |' \
        in text
    # the curve lists every budget ResNet ran
    assert '| ResNet | 8 | epochs x1, flops x0.5 | 1 | 4.0 | 85.00 |' in text
    assert '| LeCT (v1) | 16 | cpu-time x2, flops x2, epochs x2 | 1 | 20.0 ' \
        '| 89.00 |' in text
    assert '| ResNet | 20 | cpu-time x1 | 3 | 11.0 | 87.50 ± 0.50 |' in text
    # the lr check on held-out images changes the ranking
    assert ('| timm test_vit | 86.00 (0.0005) | 85.50 (0.001) | 84.00 '
            '(0.002) | x0.5 |') in text
    assert '- Ranking at the report\'s lr: LeCT (v1) > timm test_vit.' \
        in text
    assert '- Ranking at each model\'s best lr: timm test_vit > LeCT ' \
        '(v1).' in text
    # the commands that make every run, then the latency and the page
    tool = 'python tools/benchmark_accuracy.py --protocol cpu'
    commands = text.split('```bash\n')[-1].split('\n```')[0].splitlines()
    assert commands[1:] == [
        f'{tool} --budget cpu-time --models lect_v1 resnet timm/test_vit '
        '--seeds 0 1 2',
        f'{tool} --budget cpu-time --budget-scale 2 --models lect_v1 '
        '--seeds 0',
        f'{tool} --budget epochs --models resnet --seeds 0',
        f'{tool} --budget flops --models resnet --seeds 0 1 2',
        f'{tool} --budget cpu-time --holdout 2000 --lr-scale 0.5 1 2 '
        '--models lect_v1 timm/test_vit --seeds 0',
        'python benchmarks/inference.py --engine ort',
        f'{tool} --cost-report --latency {tmp_path / "lat.json"}']
    runs = json.loads((out / 'fashion_mnist_cost_runs.json').read_text())
    assert len(runs) == 20
    assert {r['epochs']: r['budgets'] for r in runs
            if r['model'] == 'lect_v1' and not r['holdout']} == {
                8: ['cpu-time x1', 'flops x1', 'epochs x1'],
                16: ['cpu-time x2', 'flops x2', 'epochs x2']}
    assert (out / 'fashion_mnist_cost_pareto.png').stat().st_size
    assert ba.pareto_front([(2, 80.), (1, 70.), (3, 79.), (4, 85.),
                            (1, 72.)]) == [(1, 72.), (2, 80.), (4, 85.)]
    # another session takes the page's runs and calibration instead of
    # running them again: the same page
    again = tmp_path / 'again'
    ba.main(['--protocol', 'cpu', '--cost-report', '--work-dir',
             str(tmp_path / 'wd2'), '--out-dir', str(again), '--latency',
             str(tmp_path / 'lat.json'), '--import-runs',
             str(out / 'fashion_mnist_cost_runs.json'),
             str(out / 'fashion_mnist_cost_calibration.json')])
    assert (again / 'fashion_mnist_cost.md').read_text() == text


def test_cost_configs_train_for_the_calibrated_budget(ba):
    # configs/fashion_mnist/*_fashion_mnist_cost.py hold the epochs that
    # --budget cpu-time gives each model from the page's calibration file
    from mmengine.config import Config
    calibration = json.loads(open(osp.join(
        ba.REPO, 'docs', 'results',
        'fashion_mnist_cost_calibration.json')).read())
    ref = calibration['cpu lect_v1']['cpu_seconds_per_step']
    protocol = ba.load_config(ba.config_path('cpu', 'lect_v1'))
    checked = []
    for key, entry in calibration.items():
        model = key.split(' ', 1)[1]
        cfg = Config.fromfile(osp.join(
            ba.CONFIG_DIR, ba.model_dir(model) + '_fashion_mnist_cost.py'))
        steps = ba.budget_steps('cpu-time', 1., 1256, ref,
                                entry['cpu_seconds_per_step'])
        schedule = ba.schedule_for(protocol, 10_000, 10_000, steps)
        assert (cfg.train_cfg.max_epochs, cfg.train_cfg.val_interval) == (
            schedule.epochs, schedule.val_interval), model
        if ba.is_timm(model):  # the lr of its kind: test_timm_models_by_name
            assert cfg.model.model_name == model[len('timm/'):]
        checked.append(model)
    assert len(checked) == 9 and 'timm/mobilevit_xxs' in checked
