"""Blocks fold their conv → BatchNorm pairs (``switch_to_deploy``)."""
import pytest
import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from lect_mm.blocks import LeFFN, LeMSA, LeMSAv2, ResizeDWConvUpsampler


@pytest.mark.parametrize('block, pairs', [
    (LeMSA(16, 2, sr_ratio=2), 3),
    (LeMSAv2(32, 2, sr_ratio=2, h_ratio=0.5), 4),
    (LeMSA(16, 2, sr_ratio=2, query_upsampler=dict(
        type='SVConvTransposeUpsampler', in_size=(3, 4))), 2),
    (LeFFN(16, 2), 3),
])
def test_block_folds_its_pairs_and_keeps_eval_outputs(block, pairs,
                                                      trained_norms):
    block = trained_norms(block).eval()
    x = torch.randn(2, 6 * 8, block.embed_dims)
    with torch.no_grad():
        expected = block(x, (6, 8))
        norms = sum(isinstance(m, _BatchNorm) for m in block.modules())
        block.switch_to_deploy()
        got = block(x, (6, 8))
    assert norms == pairs
    assert block.deploy
    assert not any(isinstance(m, _BatchNorm) for m in block.modules())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    block.switch_to_deploy()  # a second call changes nothing
    with torch.no_grad():
        assert torch.equal(block(x, (6, 8)), got)


def test_query_upsampler_folds_into_a_biased_conv(trained_norms):
    up = trained_norms(ResizeDWConvUpsampler(8)).eval()
    assert up.conv.bias is None
    x = torch.randn(1, 8, 3, 3)
    expected = up(x, (6, 6))
    up.switch_to_deploy()
    assert isinstance(up.norm, nn.Identity)
    assert set(up.state_dict()) == {'conv.weight', 'conv.bias'}
    assert up.conv.bias.requires_grad == up.conv.weight.requires_grad
    torch.testing.assert_close(up(x, (6, 6)), expected, rtol=1e-5, atol=1e-5)


def test_ffn_without_norms_has_nothing_to_fold():
    ffn = LeFFN(8, 2, with_bn=False).eval()
    keys = set(ffn.state_dict())
    ffn.switch_to_deploy()
    assert ffn.deploy and set(ffn.state_dict()) == keys


def test_a_norm_that_cannot_fold_is_named():
    ffn = LeFFN(8, 2, norm_cfg=dict(type='GN', num_groups=2))
    with pytest.raises(TypeError, match=r'LeFFN\.bn1 is a GroupNorm'):
        ffn.switch_to_deploy()
    ffn = LeFFN(8, 2, norm_cfg=dict(type='BN', track_running_stats=False))
    with pytest.raises(ValueError, match='no running statistics'):
        ffn.switch_to_deploy()


def test_sync_batch_norm_folds_too(trained_norms):
    ffn = trained_norms(LeFFN(8, 2, norm_cfg=dict(type='SyncBN'))).eval()
    x = torch.randn(1, 12, 8)
    with torch.no_grad():
        expected = ffn(x, (3, 4))
        ffn.switch_to_deploy()
        torch.testing.assert_close(ffn(x, (3, 4)), expected)
    assert not any(isinstance(m, _BatchNorm) for m in ffn.modules())
