"""Helpers of lect_mm.blocks.utils (used by the blocks and the models)."""
import pytest

import lect_mm  # noqa: F401
from lect_mm.blocks import CeiTLeFF, MultiheadSelfAttention
from lect_mm.blocks.utils import accepted_args, set_defaults, to_pair


def test_accepted_args():
    names = accepted_args('MultiheadSelfAttention')
    assert {'embed_dims', 'num_heads', 'impl', 'init_cfg'} <= names
    assert 'self' not in names and 'sr_ratio' not in names
    assert accepted_args(MultiheadSelfAttention) == names
    # **kwargs go to the base class: LeFFN's arguments count, nothing else
    kwargs_names = accepted_args(CeiTLeFF)
    assert {'num_extra_tokens', 'ffn_ratio', 'ffn_drop', 'norm_cfg'} <= (
        kwargs_names) and 'feedforward_channels' not in kwargs_names
    # mmcv's MultiheadAttention swallows **kwargs: only what it names
    assert 'norm_cfg' not in accepted_args('MultiheadAttention')
    with pytest.raises(KeyError, match="'NoSuchBlock' is not in the"):
        accepted_args('NoSuchBlock')


def test_set_defaults_fills_only_unset_accepted_keys():
    cfg = dict(type='LeMSA', sr_ratio=2, impl='literal',
               query_upsampler=dict(type='ResizeUpsampler'))
    out = set_defaults(cfg, num_heads=4, impl='fused', h_ratio=0.5)
    assert out == dict(type='LeMSA', sr_ratio=2, impl='literal',
                       num_heads=4,
                       query_upsampler=dict(type='ResizeUpsampler'))
    # The input (and its nested dicts) is left as it was.
    assert cfg == dict(type='LeMSA', sr_ratio=2, impl='literal',
                       query_upsampler=dict(type='ResizeUpsampler'))
    assert out['query_upsampler'] is not cfg['query_upsampler']
    # A **kwargs type takes what its base class names.
    assert set_defaults(dict(type='CeiTLeFF'), ffn_drop=0.1,
                        feedforward_channels=8) == dict(type='CeiTLeFF',
                                                        ffn_drop=0.1)
    with pytest.raises(KeyError, match='names no "type"'):
        set_defaults(dict(num_heads=2), impl='fused')


def test_set_defaults_of_mmcv_ffn():
    assert set_defaults(
        dict(type='FFN', add_identity=True), add_identity=False,
        feedforward_channels=8, ffn_ratio=2) == dict(
            type='FFN', add_identity=True, feedforward_channels=8)


def test_to_pair():
    assert to_pair(224, 'size') == (224, 224)
    assert to_pair([32, 48], 'size') == (32, 48)
    for bad in ('224', True, 224.0, None):
        with pytest.raises(TypeError, match='size must be an int or a '):
            to_pair(bad, 'size')
    for bad in (0, -1, (224, ), (1, 2, 3), (4, 0), (4.0, 4), (True, 4)):
        with pytest.raises(ValueError,
                           match=r'in_size must be a positive int or a pair'):
            to_pair(bad, 'in_size')
