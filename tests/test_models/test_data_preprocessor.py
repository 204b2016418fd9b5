"""ResizeClsDataPreprocessor: device resize == CPU pipeline resize."""
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmpretrain.registry import MODELS, TRANSFORMS

import lect_mm  # noqa: F401
from lect_mm.models.data_preprocessor import ResizeClsDataPreprocessor

MEAN = [0.4914 * 255, 0.4822 * 255, 0.4465 * 255]
STD = [0.2023 * 255, 0.1994 * 255, 0.2010 * 255]
# one grey level after normalisation by the smallest std
ONE_LEVEL = 1.0 / min(STD)


def _batch(pipeline, n=4, size=32, seed=0):
    rng = np.random.default_rng(seed)
    transforms = [TRANSFORMS.build(t) for t in pipeline]
    samples = []
    for i in range(n):
        results = dict(
            img=rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            gt_label=i % 10)
        for t in transforms:
            results = t(results)
        samples.append(results)
    return pseudo_collate(samples)


def _build(**kwargs):
    cfg = dict(
        type='ResizeClsDataPreprocessor',
        mean=MEAN,
        std=STD,
        num_classes=10)
    cfg.update(kwargs)
    return MODELS.build(cfg)


def test_registered():
    pre = _build(size=224)
    assert isinstance(pre, ResizeClsDataPreprocessor)


def test_matches_cpu_resize():
    pack = [dict(type='PackInputs')]
    cpu_pipeline = [dict(type='Resize', scale=224)] + pack
    cpu = MODELS.build(
        dict(type='ClsDataPreprocessor', mean=MEAN, std=STD,
             num_classes=10))(_batch(cpu_pipeline))['inputs']
    dev = _build(size=224)(_batch(pack))['inputs']
    assert dev.shape == cpu.shape == (4, 3, 224, 224)
    assert dev.dtype == torch.float32
    diff = (dev - cpu).abs()
    # The CPU path rounds to uint8 (cv2 INTER_LINEAR, fixed-point weights):
    # at most one grey level apart, and on average well under half a level.
    assert diff.max().item() <= ONE_LEVEL + 1e-4
    assert diff.mean().item() < 0.5 * ONE_LEVEL


def test_resize_commutes_with_normalisation():
    pack = [dict(type='PackInputs')]
    data = _batch(pack, n=3)
    raw = torch.stack(data['inputs']).float()
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    ref = torch.nn.functional.interpolate(
        raw, size=(64, 96), mode='bilinear', align_corners=False)
    ref = (ref - mean) / std
    out = _build(size=(64, 96))(data)['inputs']
    assert out.shape == (3, 3, 64, 96)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('training', [False, True])
def test_no_batch_augments(training):
    data = _batch([dict(type='PackInputs')], n=2)
    out = _build(size=48, mode='bicubic')(data, training=training)
    assert out['inputs'].shape == (2, 3, 48, 48)
    labels = [s.gt_label.item() for s in out['data_samples']]
    assert labels == [0, 1]
    assert 'gt_score' not in out['data_samples'][0]


def test_batch_augments_run_at_output_size():
    torch.manual_seed(0)
    pre = _build(
        size=40,
        batch_augments=dict(augments=dict(type='CutMix', alpha=1.0)))
    out = pre(_batch([dict(type='PackInputs')], n=4), training=True)
    assert out['inputs'].shape == (4, 3, 40, 40)
    scores = torch.stack([s.gt_score for s in out['data_samples']])
    assert scores.shape == (4, 10)
    torch.testing.assert_close(scores.sum(1), torch.ones(4))
    # evaluation: no mixing, one-hot scores
    out = pre(_batch([dict(type='PackInputs')], n=4), training=False)
    scores = torch.stack([s.gt_score for s in out['data_samples']])
    assert set(scores.unique().tolist()) == {0.0, 1.0}


def test_same_size_is_identity():
    data = _batch([dict(type='PackInputs')], n=2)
    ref = MODELS.build(
        dict(type='ClsDataPreprocessor', mean=MEAN, std=STD))(data)
    out = _build(size=32)(_batch([dict(type='PackInputs')], n=2))
    torch.testing.assert_close(out['inputs'], ref['inputs'])


@pytest.mark.parametrize('kwargs, err', [
    (dict(size=0), ValueError),
    (dict(size=(224, )), ValueError),
    (dict(size='224'), TypeError),
    (dict(mode='linear'), ValueError),
    (dict(mode='nearest', antialias=True), ValueError),
])
def test_bad_arguments(kwargs, err):
    with pytest.raises(err):
        _build(**kwargs)


@pytest.mark.parametrize('name', ['cifar10', 'cifar100', 'stl10'])
def test_device_resize_configs(name):
    cfg = Config.fromfile(
        f'configs/_base_/datasets/{name}_device_resize.py')
    base = Config.fromfile(f'configs/_base_/datasets/{name}.py')
    assert cfg.data_preprocessor.type == 'ResizeClsDataPreprocessor'
    assert cfg.data_preprocessor.size == 224
    assert cfg.data_preprocessor.mean == base.data_preprocessor.mean
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        types = [t['type'] for t in cfg[key].dataset.pipeline]
        base_types = [t['type'] for t in base[key].dataset.pipeline]
        assert 'Resize' not in types
        assert types == [t for t in base_types if t != 'Resize']
    MODELS.build(cfg.data_preprocessor)
