import inspect

import pytest
import torch
import torch.nn as nn
from mmpretrain.registry import MODELS

from lect_mm.blocks import (LeCTBlock, attention, embed, ffn, lect_block,
                            lemsa, upsample)

LECT_ATTN = dict(type='LeMSA', num_heads=2, sr_ratio=4)
LECT_FFN = dict(type='LeFFN', ffn_ratio=2)


def _registered_classes():
    """Every class of this area that is registered in MODELS."""
    names = set()
    for module in (attention, embed, ffn, lect_block, lemsa, upsample):
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and obj.__module__ == module.__name__
                    and MODELS.get(name) is obj):
                names.add(name)
    return names


# (config, input builder) for every registered block; the token blocks get
# a non-square grid not divisible by their sr_ratio.
TOKENS = ('tokens', (2, 9 * 10, 16), (9, 10))
MAP = ('map', (2, 16, 2, 3), (6, 9))
BUILD_CASES = [
    (dict(type='ConvPatchEmbed', in_channels=3, embed_dims=8, kernel_size=3,
          stride=2), ('image', (2, 3, 9, 11), None)),
    (dict(type='ResizeUpsampler', channels=16), MAP),
    (dict(type='ResizeDWConvUpsampler', channels=16, mode='bicubic'), MAP),
    (dict(type='SVConvTransposeUpsampler', channels=16, in_size=(2, 3),
          scale_factor=3), MAP),
    (dict(type='LeMSA', embed_dims=16, num_heads=2, sr_ratio=4), TOKENS),
    (dict(type='LeMSA', embed_dims=16, num_heads=2, sr_ratio=4,
          impl='literal', key_upsample='bicubic', qkv_bias=True), TOKENS),
    (dict(type='LeMSA', embed_dims=16, num_heads=4, pool_size=(2, 2),
          conv_skip=False, qkv_mode='parallel',
          query_upsampler=dict(type='ResizeUpsampler')), TOKENS),
    (dict(type='LeMSA', embed_dims=16, num_heads=2, sr_ratio=4,
          query_upsampler=dict(type='SVConvTransposeUpsampler',
                               in_size=(2, 3))), TOKENS),  # resampled
    (dict(type='LeMSAv2', embed_dims=16, num_heads=2, sr_ratio=4,
          h_ratio=0.25), TOKENS),
    (dict(type='LeMSAv2', embed_dims=16, num_heads=3, sr_ratio=4,
          h_ratio=0.25, low_from_input=True, impl='literal'), TOKENS),
    (dict(type='MultiheadSelfAttention', embed_dims=16, num_heads=2),
     TOKENS),
    (dict(type='LeFFN', embed_dims=16, ffn_ratio=2), TOKENS),
    (dict(type='LeCTBlock', embed_dims=16, attn_cfg=LECT_ATTN,
          ffn_cfg=LECT_FFN, drop_path_rate=0.1), TOKENS),
]


def test_every_registered_block_has_a_build_case():
    assert _registered_classes() == {cfg['type'] for cfg, _ in BUILD_CASES}


@pytest.mark.parametrize(
    'cfg,inputs', BUILD_CASES,
    ids=[f"{cfg['type']}-{i}" for i, (cfg, _) in enumerate(BUILD_CASES)])
def test_build_forward_backward(cfg, inputs):
    torch.manual_seed(0)
    block = MODELS.build(cfg)
    kind, shape, extra = inputs
    x = torch.randn(shape, requires_grad=True)
    if kind == 'image':
        out, hw = block(x)
        assert hw == (5, 6) and out.shape == (2, 30, 8)
    elif kind == 'map':
        out = block(x, extra)
        assert out.shape == (*shape[:2], *extra)
    else:
        out = block(x, extra)
        assert out.shape == shape
    out.square().mean().backward()
    assert x.grad is not None
    unused = [n for n, p in block.named_parameters() if p.grad is None]
    assert not unused  # DDP needs no find_unused_parameters


@pytest.mark.parametrize('attn_cfg', [
    LECT_ATTN,
    dict(type='LeMSAv2', num_heads=2, sr_ratio=4, h_ratio=0.5),
    dict(type='MultiheadSelfAttention', num_heads=2),
])
def test_block_structure(attn_cfg):
    torch.manual_seed(0)
    blk = LeCTBlock(16, attn_cfg, LECT_FFN).eval()
    assert isinstance(blk.norm1, nn.LayerNorm) and blk.norm1.eps == 1e-6
    assert isinstance(blk.norm2, nn.LayerNorm) and blk.norm2.eps == 1e-6
    assert blk.attn.embed_dims == 16 and blk.ffn.embed_dims == 16
    x = torch.randn(2, 64, 16)
    hw = (8, 8)
    h = x + blk.attn(blk.norm1(x), hw)
    expected = h + blk.ffn(blk.norm2(h), hw)
    torch.testing.assert_close(blk(x, hw), expected)


def test_token_wise_ffn_gets_no_hw_shape():
    torch.manual_seed(0)
    blk = LeCTBlock(16, LECT_ATTN,
                    dict(type='FFN', feedforward_channels=32)).eval()
    assert not blk.ffn_takes_hw_shape and not blk.ffn.add_identity
    assert LeCTBlock(16, LECT_ATTN, LECT_FFN).ffn_takes_hw_shape
    x = torch.randn(2, 64, 16)
    h = x + blk.attn(blk.norm1(x), (8, 8))
    torch.testing.assert_close(blk(x, (8, 8)),
                               h + blk.ffn.layers(blk.norm2(h)))
    with pytest.raises(ValueError, match='add_identity=True'):
        LeCTBlock(16, LECT_ATTN, dict(type='FFN', add_identity=True))


class _TwoInputFFN(nn.Module):

    def __init__(self, embed_dims):
        super().__init__()
        self.fc = nn.Linear(embed_dims, embed_dims)

    def forward(self, x, other):
        return self.fc(x) + other


def test_ffn_that_cannot_be_called_fails_at_build():
    with pytest.raises(TypeError, match=r"ffn_cfg: _TwoInputFFN.forward "
                       r"requires \['x', 'other'\]; .*forward\(x\) or "
                       r"forward\(x, hw_shape\)"):
        LeCTBlock(16, LECT_ATTN, dict(type=_TwoInputFFN))


def test_drop_path():
    blk = LeCTBlock(16, LECT_ATTN, LECT_FFN, drop_path_rate=0.5)
    assert type(blk.drop_path).__name__ == 'DropPath'
    assert isinstance(LeCTBlock(16, LECT_ATTN, LECT_FFN).drop_path,
                      nn.Identity)
    x = torch.randn(8, 64, 16)
    blk.eval()
    torch.testing.assert_close(blk(x, (8, 8)), blk(x, (8, 8)))
    blk.train()
    torch.manual_seed(0)
    y0 = blk(x, (8, 8))
    torch.manual_seed(1)
    assert not torch.allclose(y0, blk(x, (8, 8)))


def test_drop_path_residual_matches_mmcv():
    """The fused residual draws the masks of mmcv's DropPath and gives its
    values up to rounding (y * (m / keep) instead of y / keep * m)."""
    import copy
    blk = LeCTBlock(16, LECT_ATTN, LECT_FFN, drop_path_rate=0.5).train()
    plain = copy.deepcopy(blk)
    plain._residual = lambda a, b: a + plain.drop_path(b)
    x = torch.randn(8, 64, 16)
    torch.manual_seed(0)
    y = blk(x, (8, 8))
    torch.manual_seed(0)
    torch.testing.assert_close(y, plain(x, (8, 8)))
    # some samples are dropped, some kept
    assert not torch.equal(y, blk(x, (8, 8)))


@pytest.mark.parametrize('arch', ['v1', 'v2', 'v3'])
def test_gradients_keep_their_parameters_strides(arch):
    """DDP's gradient layout contract: its reducer warns ("Grad strides do
    not match bucket view strides") when a gradient's strides differ from
    its parameter's, as the 1x1 and depthwise convolutions' on channels_last
    maps would without channels_last weights."""
    from mmpretrain.registry import MODELS
    backbone = MODELS.build(dict(type='LeCT', arch=arch, img_size=32)).train()
    backbone(torch.randn(2, 3, 32, 32))[0].square().sum().backward()
    differing = [(name, p.stride(), p.grad.stride())
                 for name, p in backbone.named_parameters()
                 if p.grad is not None and p.grad.stride() != p.stride()]
    assert not differing
