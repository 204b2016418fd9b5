"""Strict loading outside the Runner: get_model(cfg, pretrained=...) and
init_cfg=dict(type='Pretrained') stop on a checkpoint that does not fit,
and their documented opt-outs load what fits."""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import load_checkpoint
from mmpretrain.apis import get_model
from mmpretrain.registry import MODELS
from tiny_run_utils import TINY_CONFIG

from lect_mm.engine import CheckpointMismatchError

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


def test_get_model_pretrained_is_strict(ten_class_checkpoint):
    with pytest.raises(CheckpointMismatchError, match=HEAD_MISMATCH) as info:
        get_model(_hundred_class_cfg(), pretrained=ten_class_checkpoint)
    assert ten_class_checkpoint in str(info.value)
    assert 'strict=False' in str(info.value)
    # the documented opt-out
    model = get_model(_hundred_class_cfg())
    load_checkpoint(model, ten_class_checkpoint, strict=False)
    assert get_model(Config.fromfile(TINY_CONFIG),
                     pretrained=ten_class_checkpoint) is not None


def _init_from(checkpoint, part='model', **init_cfg):
    cfg = _hundred_class_cfg()
    module_cfg = cfg.model if part == 'model' else cfg.model[part]
    module_cfg.init_cfg = dict(
        type='Pretrained', checkpoint=checkpoint, **init_cfg)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
        model.init_weights()
    return model


def test_init_cfg_pretrained_is_strict(ten_class_checkpoint):
    with pytest.raises(CheckpointMismatchError, match=HEAD_MISMATCH) as info:
        _init_from(ten_class_checkpoint)
    assert 'strict=False' in str(info.value)
    expected = torch.load(ten_class_checkpoint)['state_dict']
    for model in (_init_from(ten_class_checkpoint, strict=False),
                  _init_from(ten_class_checkpoint, 'backbone',
                             prefix='backbone.')):
        assert torch.equal(model.backbone.conv1.weight,
                           expected['backbone.conv1.weight'])
