"""Every leaf config builds, trains one iteration and validates one batch.

Catches "X is not in the mmpretrain::model registry", stale keys after
inheritance and optimizer/scheduler settings that do not fit the model, on
tiny generated inputs of each config's size (no data set needed).
"""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
LEAF_CONFIGS = sorted(
    p for p in (REPO / 'configs').rglob('*.py') if '_base_' not in p.parts)


def _input_size(cfg):
    """Side of the images the model sees: the pipeline's Resize, else the
    dataset's native size (32 for CIFAR/digits, 96 for STL10)."""
    for t in cfg.val_dataloader.dataset.pipeline:
        if t['type'] == 'Resize':
            return t['scale']
    pre = cfg.get('model', {}).get('data_preprocessor') or cfg.get(
        'data_preprocessor', {})
    if pre.get('size'):
        return pre['size']
    return 96 if cfg.val_dataloader.dataset.type == 'STL10' else 32


def _batch(size, num_classes, n=2):
    g = torch.Generator().manual_seed(0)
    inputs = [
        torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g)
        for _ in range(n)
    ]
    samples = [DataSample().set_gt_label(i % num_classes) for i in range(n)]
    return dict(inputs=inputs, data_samples=samples)


def test_all_leaf_configs_are_collected():
    names = {p.relative_to(REPO / 'configs').as_posix() for p in LEAF_CONFIGS}
    for required in ('lect/lect_v3_stl10.py', 'demo/lect_digits.py',
                     'baselines/alternet_cifar100.py',
                     'cct/cct_7_3x1_cifar10.py'):
        assert required in names
    assert len(LEAF_CONFIGS) >= 50


@pytest.mark.parametrize(
    'path',
    LEAF_CONFIGS,
    ids=lambda p: p.relative_to(REPO / 'configs').as_posix())
def test_config_trains_one_iteration_and_validates(path):
    torch.manual_seed(0)
    cfg = Config.fromfile(str(path))
    assert cfg.default_scope == 'mmpretrain'
    assert 'lect_mm' in cfg.custom_imports['imports']
    # Resume-exact augmentation, divergence stop, one model in DDP.
    assert cfg.train_dataloader.sampler.type == 'SeededSampler'
    for hook in ('rng_state', 'non_finite_loss', 'sync_buffers'):
        assert cfg.default_hooks[hook] is not None
    model_cfg = cfg.model.copy()
    if 'data_preprocessor' not in model_cfg and 'data_preprocessor' in cfg:
        model_cfg['data_preprocessor'] = dict(
            type='ClsDataPreprocessor', **cfg.data_preprocessor) \
            if 'type' not in cfg.data_preprocessor else cfg.data_preprocessor
    model = MODELS.build(model_cfg)
    num_classes = model.head.num_classes
    size = _input_size(cfg)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)

    model.train()
    losses = model.train_step(_batch(size, num_classes), optim_wrapper)
    loss = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(loss)

    model.eval()
    with torch.no_grad():
        out = model.val_step(_batch(size, num_classes))
    assert len(out) == 2
    assert out[0].pred_score.shape == (num_classes, )
