"""Strict loading is chosen, never imposed: lect_mm's loaders stop on a
checkpoint that does not fit (``lect_mm.engine.load_weights``,
``init_cfg=dict(type='Pretrained')`` in the ``lect_mm`` scope, which is
where ``LectRunner`` initialises a model) and their documented opt-outs
load what fits, while mmpretrain's ``get_model(..., pretrained=...)`` and
mmengine's ``Pretrained`` keep their own non-strict behaviour."""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmpretrain.apis import get_model
from mmpretrain.registry import MODELS
from tiny_run_utils import TINY_CONFIG, tiny_cfg

from lect_mm.engine import CheckpointMismatchError, LectRunner, load_weights

HEAD_MISMATCH = (r'head\.fc\.weight: \[10, 8\] in the checkpoint, '
                 r'\[100, 8\] in the model')


@pytest.fixture(scope='module')
def ten_class_checkpoint(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('ten') / 'ten_classes.pth')
    model = get_model(Config.fromfile(TINY_CONFIG))
    torch.save({'state_dict': model.state_dict()}, path)
    return path


def _hundred_class_cfg():
    cfg = Config.fromfile(TINY_CONFIG)
    cfg.model.head.num_classes = 100
    return cfg


def test_load_weights_is_strict_and_get_model_is_mmpretrains(
        ten_class_checkpoint):
    model = get_model(_hundred_class_cfg())
    with pytest.raises(CheckpointMismatchError, match=HEAD_MISMATCH) as info:
        load_weights(model, ten_class_checkpoint)
    assert ten_class_checkpoint in str(info.value)
    assert 'strict=False' in str(info.value)
    # the documented opt-out
    load_weights(model, ten_class_checkpoint, strict=False)
    # mmpretrain's get_model loads what fits, as without lect_mm
    model = get_model(_hundred_class_cfg(), pretrained=ten_class_checkpoint)
    expected = torch.load(ten_class_checkpoint)['state_dict']
    assert torch.equal(model.backbone.conv1.weight,
                       expected['backbone.conv1.weight'])


def _init_from(checkpoint, part='model', scope='lect_mm', **init_cfg):
    cfg = _hundred_class_cfg()
    module_cfg = cfg.model if part == 'model' else cfg.model[part]
    module_cfg.init_cfg = dict(
        type='Pretrained', checkpoint=checkpoint, **init_cfg)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
    with DefaultScope.overwrite_default_scope(scope):
        model.init_weights()
    return model


def test_pretrained_in_the_lect_mm_scope_is_strict(ten_class_checkpoint):
    with pytest.raises(CheckpointMismatchError, match=HEAD_MISMATCH) as info:
        _init_from(ten_class_checkpoint)
    assert 'strict=False' in str(info.value)
    expected = torch.load(ten_class_checkpoint)['state_dict']
    for model in (_init_from(ten_class_checkpoint, strict=False),
                  _init_from(ten_class_checkpoint, 'backbone',
                             prefix='backbone.'),
                  _init_from(ten_class_checkpoint, scope='mmpretrain')):
        assert torch.equal(model.backbone.conv1.weight,
                           expected['backbone.conv1.weight'])


def test_lect_runner_builds_pretrained_strictly(tmp_path):
    checkpoint = str(tmp_path / 'hundred_classes.pth')
    torch.save({'state_dict': get_model(_hundred_class_cfg()).state_dict()},
               checkpoint)
    options = dict(model=dict(init_cfg=dict(type='Pretrained',
                                            checkpoint=checkpoint)),
                   train_cfg=dict(max_epochs=1))
    runner = LectRunner.from_cfg(
        tiny_cfg(tmp_path / 'strict', 'strict_pretrained', **options))
    with pytest.raises(CheckpointMismatchError,
                       match=r'head\.fc\.weight: \[100, 8\] in the '
                       r'checkpoint, \[10, 8\] in the model'):
        runner.train()
    # mmengine's Runner keeps mmengine's Pretrained: a warning, no error
    Runner.from_cfg(tiny_cfg(tmp_path / 'plain', 'plain_pretrained',
                             **options)).train()
