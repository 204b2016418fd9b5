"""Every leaf config is coherent and builds; every distinct model trains.

Leaf configs of one model differ in data and schedule only, so training
each would repeat the same work. Instead:

* every leaf config parses, builds its model, optimizer wrapper and
  parameter schedulers, names only registered datasets, transforms,
  samplers, metrics and hooks, and sizes its head for its data set;
* the leaf configs are grouped by their model (``cfg.model`` after
  inheritance, without the data preprocessor's data statistics, the head's
  ``num_classes`` and the backbone's ``img_size`` and ``deploy``, as a
  deploy config folds its model for inference), and one leaf of each
  group, the one with the smallest input (a training config before a
  deploy one), trains one iteration and validates one batch at its input
  size, on tiny generated inputs (no data set needed); its test trains the
  model it built (at seed 0) rather than building it again.

This catches "X is not in the mmpretrain::model registry", stale keys after
inheritance and optimizer/scheduler settings that do not fit the model.
"""
import copy
import json
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmpretrain.registry import (DATA_SAMPLERS, DATASETS, HOOKS, METRICS,
                                 MODELS, PARAM_SCHEDULERS, TRANSFORMS)
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
LEAF_CONFIGS = sorted(
    p for p in (REPO / 'configs').rglob('*.py') if '_base_' not in p.parts)
SPLITS = ('train', 'val', 'test')


def _name(path):
    return path.relative_to(REPO / 'configs').as_posix()


CONFIGS = {_name(p): Config.fromfile(str(p)) for p in LEAF_CONFIGS}


def _input_size(cfg):
    """Side of the images the model sees: the pipeline's Resize, else the
    data preprocessor's size, else the dataset's native size (32 for
    CIFAR/digits, 96 for STL10)."""
    for t in cfg.val_dataloader.dataset.pipeline:
        if t['type'] == 'Resize':
            return t['scale']
        if t['type'] == 'CenterCrop':
            return t['crop_size']
    pre = cfg.get('model', {}).get('data_preprocessor') or cfg.get(
        'data_preprocessor', {})
    if pre.get('size'):
        return pre['size']
    return 96 if cfg.val_dataloader.dataset.type == 'STL10' else 32


def _model_cfg(cfg):
    """``cfg.model`` with the top-level data preprocessor merged in, as the
    runner builds it."""
    model_cfg = copy.deepcopy(cfg.model)
    if 'data_preprocessor' not in model_cfg and 'data_preprocessor' in cfg:
        pre = copy.deepcopy(cfg.data_preprocessor)
        model_cfg['data_preprocessor'] = pre if 'type' in pre else dict(
            type='ClsDataPreprocessor', **pre)
    return model_cfg


def _num_classes_of(model):
    """The classes of a classifier's head (mmpretrain's TimmClassifier has
    none: its timm model has them)."""
    return (model.head.num_classes if hasattr(model, 'head') else
            model.model.num_classes)


def _model_key(cfg):
    """The model a config trains, without what depends on its data."""
    model = copy.deepcopy(cfg.model).to_dict()
    model.pop('data_preprocessor', None)
    model.get('head', {}).pop('num_classes', None)
    model.get('backbone', {}).pop('img_size', None)
    model.get('backbone', {}).pop('deploy', None)
    return json.dumps(model, sort_keys=True, default=repr)


def _model_groups():
    groups = {}
    for name, cfg in CONFIGS.items():
        groups.setdefault(_model_key(cfg), []).append(
            (_input_size(cfg),
             bool(cfg.model.get('backbone', {}).get('deploy')), name))
    return {min(members)[-1]: sorted(n for *_, n in members)
            for members in groups.values()}


MODEL_GROUPS = _model_groups()  # {representative: [its group's leaves]}


def _dataset(dataset_cfg):
    """The innermost dataset config of (possibly wrapped) datasets."""
    while 'dataset' in dataset_cfg:
        dataset_cfg = dataset_cfg['dataset']
    return dataset_cfg


def _num_classes(dataset_cfg):
    """The number of classes a data set config lists; None for class
    folders (found when the data set is built)."""
    metainfo = dataset_cfg.get('metainfo') or {}
    classes = metainfo.get('classes') or DATASETS.get(
        dataset_cfg['type']).METAINFO.get('classes')
    return len(classes) if classes else None


def _batch(size, num_classes, n=2):
    g = torch.Generator().manual_seed(0)
    inputs = [
        torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g)
        for _ in range(n)
    ]
    samples = [DataSample().set_gt_label(i % num_classes) for i in range(n)]
    return dict(inputs=inputs, data_samples=samples)


def test_all_leaf_configs_are_collected_and_grouped():
    names = set(CONFIGS)
    for required in ('lect/lect_v3_stl10.py', 'demo/lect_digits.py',
                     'baselines/alternet_cifar100.py',
                     'cct/cct_7_3x1_cifar10.py'):
        assert required in names
    assert len(names) >= 50
    grouped = [n for members in MODEL_GROUPS.values() for n in members]
    assert sorted(grouped) == sorted(names)  # each leaf in one group
    # CIFAR-10/100 and STL10 leaves of a model share its training run.
    group = next(m for m in MODEL_GROUPS.values()
                 if 'lect/lect_v1_cifar10.py' in m)
    assert {'lect/lect_v1_cifar100.py', 'lect/lect_v1_stl10.py'} <= set(group)
    assert 'lect/lect_v1_ablation_cifar10.py' not in group


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_config_is_coherent_and_builds(name):
    cfg = CONFIGS[name]
    assert cfg.default_scope == 'mmpretrain'
    assert 'lect_mm' in cfg.custom_imports['imports']
    # Resume-exact augmentation, divergence stop, one model in DDP.
    assert cfg.train_dataloader.sampler.type == 'SeededSampler'
    for hook in ('rng_state', 'non_finite_loss', 'sync_buffers'):
        assert cfg.default_hooks[hook] is not None
    torch.manual_seed(0)
    model = MODELS.build(_model_cfg(cfg))
    num_classes = _num_classes_of(model)
    pre = cfg.get('data_preprocessor') or {}
    assert pre.get('num_classes', num_classes) == num_classes

    for split in SPLITS:
        loader = cfg[f'{split}_dataloader']
        assert loader.batch_size > 0
        dataset = _dataset(loader.dataset)
        assert DATASETS.get(dataset.type) is not None, dataset.type
        assert _num_classes(dataset) in (num_classes, None), split
        for transform in dataset.pipeline:
            assert TRANSFORMS.get(transform['type']) is not None, transform
        assert DATA_SAMPLERS.get(loader.sampler.type) is not None
    for split in ('val', 'test'):
        evaluators = cfg[f'{split}_evaluator']
        for evaluator in (evaluators if isinstance(evaluators, list) else
                          [evaluators]):
            assert METRICS.get(evaluator['type']) is not None, evaluator
    hooks = list(cfg.get('default_hooks', {}).values()) + list(
        cfg.get('custom_hooks', []))
    for hook in hooks:
        assert HOOKS.get(hook['type']) is not None, hook

    train_cfg = cfg.train_cfg
    assert train_cfg.by_epoch and train_cfg.max_epochs > 0
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    schedulers = cfg.param_scheduler
    for scheduler in (schedulers
                      if isinstance(schedulers, list) else [schedulers]):
        scheduler = copy.deepcopy(scheduler)
        scheduler.setdefault('end', train_cfg.max_epochs)  # as the runner
        PARAM_SCHEDULERS.build(
            scheduler,
            default_args=dict(optimizer=optim_wrapper, epoch_length=10))
    assert cfg.auto_scale_lr.base_batch_size == 64
    if name in MODEL_GROUPS:
        _trains_one_iteration_and_validates(cfg, model)


def _trains_one_iteration_and_validates(cfg, model):
    """One training iteration (a fresh optimizer wrapper of the config)
    and one validation batch of ``model``, as just built, at the config's
    input size. A LeViT distillation head (FAIR's LeViT-128S weights)
    validates only: mmpretrain cannot train it, and says so."""
    num_classes = _num_classes_of(model)
    size = _input_size(cfg)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)

    model.train()
    if getattr(getattr(model, 'head', None), 'distillation', False):
        with pytest.raises(NotImplementedError, match='distillation'):
            model.train_step(_batch(size, num_classes), optim_wrapper)
    else:
        losses = model.train_step(_batch(size, num_classes), optim_wrapper)
        loss = sum(v for k, v in losses.items() if 'loss' in k)
        assert torch.isfinite(loss)

    model.eval()
    with torch.no_grad():
        out = model.val_step(_batch(size, num_classes))
    assert len(out) == 2
    assert out[0].pred_score.shape == (num_classes, )
