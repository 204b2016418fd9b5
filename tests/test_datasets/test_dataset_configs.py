"""Each base dataset config builds its loaders on generated data and yields
batches of the expected shape after its data_preprocessor."""
import copy
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401

CFG_DIR = osp.join(
    osp.dirname(__file__), '..', '..', 'configs', '_base_', 'datasets')

# name: (rgb mean, rgb std in 0..1, num_classes, crop, output side)
REPORT = {
    'cifar10': ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010), 10, 32,
                224),
    'cifar100': ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761), 100,
                 32, 224),
    'stl10': ((0.5, ) * 3, (0.5, ) * 3, 10, 96, 224),
}


def _load(name):
    return Config.fromfile(osp.join(CFG_DIR, f'{name}.py'))


def _small(loader_cfg, data_root=None):
    loader = copy.deepcopy(loader_cfg.to_dict())
    loader.update(batch_size=2, num_workers=0, persistent_workers=False)
    if data_root is not None:
        loader['dataset']['data_root'] = data_root
    if loader['dataset']['type'].startswith('CheckedCIFAR'):
        # generated tiny pickles, not the official files
        loader['dataset']['verify_md5'] = False
    return loader


@pytest.mark.parametrize('name', sorted(REPORT))
def test_report_settings(name):
    """Pipelines, batch size and normalisation of the report (SPEC §8)."""
    cfg = _load(name)
    mean, std, num_classes, crop, side = REPORT[name]
    dp = cfg.data_preprocessor
    assert dp.num_classes == num_classes and dp.to_rgb is False
    assert dp.mean == pytest.approx([m * 255 for m in mean])
    assert dp.std == pytest.approx([s * 255 for s in std])

    train = cfg.train_dataloader
    assert train.batch_size == 64 and train.persistent_workers
    assert train.sampler == dict(type='SeededSampler', shuffle=True)
    assert train.dataset.download is False
    if name.startswith('cifar'):
        # the checked datasets, which name a damaged file
        assert train.dataset.type == f'Checked{name.upper()}'
        assert cfg.val_dataloader.dataset.type == train.dataset.type
    assert cfg.val_dataloader.dataset.download is False
    assert cfg.val_dataloader.dataset.split == 'test'
    types = [t['type'] for t in train.dataset.pipeline]
    assert types == [
        'RandomCrop', 'RandomFlip', 'RandAugment', 'Resize', 'PackInputs'
    ]
    crop_t, flip_t, ra, resize, _ = train.dataset.pipeline
    assert (crop_t.crop_size, crop_t.padding) == (crop, 4)
    assert (flip_t.prob, flip_t.direction) == (0.5, 'horizontal')
    assert (ra.policies, ra.num_policies, ra.total_level, ra.magnitude_level,
            ra.magnitude_std) == ('timm_increasing', 2, 10, 9, 0.5)
    assert ra.hparams.pad_val == [round(m * 255) for m in mean]
    assert resize.scale == side
    assert [t['type'] for t in cfg.val_dataloader.dataset.pipeline] == [
        'Resize', 'PackInputs'
    ]
    assert cfg.val_evaluator == dict(type='Accuracy', topk=(1, 5))
    assert cfg.test_dataloader == cfg.val_dataloader


def _check_batches(cfg, data_root, side, num_classes):
    init_default_scope('mmpretrain')
    preprocessor = MODELS.build(
        dict(type='ClsDataPreprocessor', **cfg.data_preprocessor))
    for key, training in (('train_dataloader', True),
                          ('val_dataloader', False)):
        loader = Runner.build_dataloader(_small(cfg[key], data_root), seed=0)
        batch = next(iter(loader))
        out = preprocessor(batch, training=training)
        inputs = out['inputs']
        assert inputs.shape == (2, 3, side, side)
        assert inputs.dtype == torch.float32
        # normalised: raw uint8 values are no longer there
        assert inputs.abs().max() < 10
        labels = [int(s.gt_label) for s in out['data_samples']]
        assert len(labels) == 2
        assert all(0 <= lb < num_classes for lb in labels)


def test_cifar10_loaders(tmp_path, make_cifar10, no_network):
    make_cifar10(str(tmp_path), per_batch=2)
    _check_batches(_load('cifar10'), str(tmp_path), 224, 10)


def test_cifar100_loaders(tmp_path, make_cifar100, no_network):
    make_cifar100(str(tmp_path), num=2)
    _check_batches(_load('cifar100'), str(tmp_path), 224, 100)


def test_stl10_loaders(tmp_path, make_stl10, no_network):
    make_stl10(str(tmp_path), {'train': 2, 'test': 2})
    _check_batches(_load('stl10'), str(tmp_path), 224, 10)


def test_digits_config_and_loaders():
    cfg = _load('digits')
    assert cfg.train_dataloader.batch_size == 64
    assert cfg.train_dataloader.dataset.split == 'train'
    assert cfg.val_dataloader.dataset.split == 'val'
    types = [t['type'] for t in cfg.train_dataloader.dataset.pipeline]
    assert 'RandomFlip' not in types and 'Resize' not in types
    assert cfg.data_preprocessor.num_classes == 10
    _check_batches(cfg, None, 32, 10)
