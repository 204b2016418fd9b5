"""Config mistakes users meet first are explained with their config path."""
import pytest
from mmengine.registry import init_default_scope
from mmpretrain.registry import MODELS

from lect_mm.engine import ConfigError, explain_config_errors


def _model(**backbone):
    return dict(
        type='ImageClassifier',
        backbone=dict(
            type='ResNet',
            depth=18,
            num_stages=1,
            strides=(1, ),
            dilations=(1, ),
            out_indices=(0, ),
            base_channels=8,
            **backbone),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=8))


def _build(cfg):
    init_default_scope('mmpretrain')
    with explain_config_errors(dict(model=cfg)):
        MODELS.build(cfg)


def test_misspelt_type_names_type_path_and_suggestion():
    cfg = _model()
    cfg['backbone']['type'] = 'ResNett'
    with pytest.raises(ConfigError) as info:
        _build(cfg)
    message = str(info.value)
    assert "type='ResNett'" in message
    assert 'model.backbone.type' in message
    assert 'mmpretrain::model registry' in message
    assert "Did you mean 'ResNet'" in message
    # Still the KeyError mmengine raises, for code that catches it.
    assert isinstance(info.value, KeyError)
    assert 'ResNett is not in the' in str(info.value.__cause__)


def test_unknown_argument_names_key_class_and_valid_arguments():
    with pytest.raises(ConfigError) as info:
        _build(_model(foo=1))
    message = str(info.value)
    assert message.startswith("model.backbone.foo: ResNet has no argument "
                              "'foo'.")
    assert 'Valid arguments of ResNet: depth, in_channels' in message
    assert isinstance(info.value, TypeError)


def test_unknown_argument_suggests_close_name():
    with pytest.raises(ConfigError, match="Did you mean 'drop_path_rate'"):
        _build(_model(drop_path_rat=0.1))


def test_unrelated_errors_pass_through_unchanged():
    with pytest.raises(KeyError) as info:
        with explain_config_errors(dict(model=_model())):
            raise KeyError('something else')
    assert type(info.value) is KeyError
    with pytest.raises(TypeError) as info:
        with explain_config_errors(dict(model=_model())):
            raise TypeError(
                "Other.__init__() got an unexpected keyword argument 'x'")
    assert type(info.value) is TypeError
