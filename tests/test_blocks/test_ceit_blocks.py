"""CeiT blocks: Image2Tokens, CeiTLeFF, CeiTBlock, LCAttention, LCABlock."""
import pytest
import torch
import torch.nn.functional as F
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401
from lect_mm.blocks import (CeiTBlock, CeiTLeFF, Image2Tokens, LCABlock,
                            LCAttention, LeFFN, LeMSA, MultiheadSelfAttention)

C, HEADS, H, W = 16, 4, 3, 4

# (config, input builder, expected output shape)
BLOCKS = {
    'Image2Tokens': (dict(type='Image2Tokens', out_channels=8),
                     lambda: (torch.randn(2, 3, 32, 24), ), (2, 8, 8, 6)),
    'CeiTLeFF': (dict(type='CeiTLeFF', embed_dims=C, ffn_ratio=2),
                 lambda: (torch.randn(2, 1 + H * W, C), (H, W)),
                 (2, 1 + H * W, C)),
    'CeiTBlock': (dict(type='CeiTBlock', embed_dims=C, num_heads=HEADS,
                       ffn_ratio=2, drop_path_rate=0.1),
                  lambda: (torch.randn(2, 1 + H * W, C), (H, W)),
                  (2, 1 + H * W, C)),
    'LCAttention': (dict(type='LCAttention', embed_dims=C, num_heads=HEADS),
                    lambda: (torch.randn(2, 5, C), ), (2, 1, C)),
    'LCABlock': (dict(type='LCABlock', embed_dims=C, num_heads=HEADS,
                      ffn_ratio=1),
                 lambda: (torch.randn(2, 5, C), ), (2, 1, C)),
}  # yapf: disable


@pytest.mark.parametrize('name', sorted(BLOCKS))
def test_build_forward_backward(name):
    cfg, make_inputs, shape = BLOCKS[name]
    torch.manual_seed(0)
    block = MODELS.build(cfg)
    assert type(block).__name__ == name
    inputs = make_inputs()
    inputs[0].requires_grad_(True)
    out = block(*inputs)
    assert out.shape == shape
    out.square().mean().backward()
    assert inputs[0].grad is not None
    assert all(p.grad is not None for p in block.parameters()
               if p.requires_grad)


def test_image2tokens_layers_and_size():
    stem = Image2Tokens(out_channels=128)
    assert stem.conv.bias is None
    assert (stem.conv.kernel_size, stem.conv.stride,
            stem.conv.padding) == ((7, 7), (2, 2), (3, 3))
    assert sum(p.numel() for p in stem.parameters()) == 18_816 + 256
    for side in (224, 97, 32):
        out = stem(torch.randn(1, 3, side, side))
        assert out.shape[-1] == stem.output_size(side)
    assert stem.output_size(224) == 56


def test_leff_passes_class_token_unchanged():
    torch.manual_seed(0)
    leff = CeiTLeFF(C, 2, num_extra_tokens=1).eval()
    plain = LeFFN(C, 2).eval()
    plain.load_state_dict(leff.state_dict())
    x = torch.randn(2, 1 + H * W, C)
    out = leff(x, (H, W))
    torch.testing.assert_close(out[:, :1], x[:, :1], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 1:], plain(x[:, 1:], (H, W)))
    no_split = CeiTLeFF(C, 2, num_extra_tokens=0).eval()
    no_split.load_state_dict(leff.state_dict())
    torch.testing.assert_close(
        no_split(x[:, 1:], (H, W)), plain(x[:, 1:], (H, W)))
    with pytest.raises(ValueError, match='expects 1 \\+ 3\\*4 tokens'):
        leff(x[:, 1:], (H, W))


@pytest.mark.parametrize('impl', ['fused', 'literal'])
def test_lca_attention_is_last_row_of_full_attention(impl):
    torch.manual_seed(0)
    lca = LCAttention(C, HEADS, impl=impl).eval()
    full = MultiheadSelfAttention(C, HEADS, qkv_bias=True).eval()
    full.load_state_dict(lca.state_dict())
    x = torch.randn(2, 6, C)
    torch.testing.assert_close(lca(x), full(x)[:, -1:], atol=1e-6, rtol=1e-5)
    assert lca.qkv.weight.shape == (3 * C, C)


def test_lca_block_formula_and_mlp_width():
    torch.manual_seed(0)
    block = LCABlock(C, HEADS, ffn_ratio=1).eval()
    assert block.ffn.layers[0][0].out_features == C  # author's hidden = in
    x = torch.randn(2, 5, C)
    z = x[:, -1:] + block.attn(block.norm1(x))
    y2 = block.norm2(z)
    fc1, fc2 = block.ffn.layers[0][0], block.ffn.layers[1]
    expected = z + fc2(F.gelu(fc1(y2)))
    torch.testing.assert_close(block(x), expected)
    official = LCABlock(C, HEADS, ffn_ratio=4)
    assert official.ffn.layers[0][0].out_features == 4 * C


def _forward_backward(block, x, hw_shape):
    x.requires_grad_(True)
    out = block(x, hw_shape)
    assert out.shape == x.shape
    out.square().mean().backward()
    assert x.grad is not None
    assert all(p.grad is not None for p in block.attn.parameters())


def test_block_default_attention():
    block = CeiTBlock(C, HEADS, 2)
    assert type(block.attn) is MultiheadSelfAttention
    assert block.attn.num_heads == HEADS and block.attn.impl == 'fused'
    assert block.attn.qkv.bias is not None


def test_block_attention_swap_with_class_token():
    # With a class token the attention sees 1 + H*W tokens, which no (H, W)
    # grid attention can fold into a map, so the swap keeps a token-only
    # attention and changes it: the written-out softmax, no qkv bias. The
    # config's entries win over the block's qkv_bias / impl.
    torch.manual_seed(0)
    block = MODELS.build(
        dict(
            type='CeiTBlock',
            embed_dims=C,
            num_heads=HEADS,
            ffn_ratio=2,
            attn_cfg=dict(
                type='MultiheadSelfAttention', impl='literal',
                qkv_bias=False)))
    assert block.attn.impl == 'literal' and block.attn.qkv.bias is None
    assert block.attn.num_heads == HEADS
    _forward_backward(block, torch.randn(2, 1 + H * W, C), (H, W))


def test_block_attention_swap_to_lemsa_without_class_token():
    # Without a class token (CeiT 'gap') the tokens are the H x W grid, so
    # a grid attention fits; num_heads and qkv_bias come from the block.
    torch.manual_seed(0)
    block = MODELS.build(
        dict(
            type='CeiTBlock',
            embed_dims=C,
            num_heads=HEADS,
            ffn_ratio=2,
            num_extra_tokens=0,
            attn_cfg=dict(type='LeMSA', sr_ratio=2)))
    assert type(block.attn) is LeMSA
    assert block.attn.num_heads == HEADS and block.attn.sr_ratio == 2
    assert block.attn.proj_v.bias is not None
    _forward_backward(block, torch.randn(2, H * W, C), (H, W))
