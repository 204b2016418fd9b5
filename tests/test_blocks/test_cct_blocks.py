"""CCT blocks: CCTTokenizer, SeqPool, CCTEncoderLayer."""
import pytest
import torch
import torch.nn.functional as F
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401
from lect_mm.blocks import (CCTEncoderLayer, CCTTokenizer, LeMSA,
                            MultiheadSelfAttention, SeqPool)

BLOCKS = {
    'CCTTokenizer': (dict(type='CCTTokenizer', embed_dims=16,
                          num_conv_layers=2, hidden_channels=8),
                     lambda: (torch.randn(2, 3, 16, 12), ), (2, 12, 16)),
    'SeqPool': (dict(type='SeqPool', embed_dims=16),
                lambda: (torch.randn(2, 12, 16), ), (2, 16)),
    'CCTEncoderLayer': (dict(type='CCTEncoderLayer', embed_dims=16,
                             num_heads=2, ffn_ratio=2,
                             drop_path_rate=0.1),
                        lambda: (torch.randn(2, 12, 16), (3, 4)),
                        (2, 12, 16)),
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
    if isinstance(out, tuple):
        out, _ = out
    assert out.shape == shape
    out.square().mean().backward()
    assert inputs[0].grad is not None
    assert all(p.grad is not None for p in block.parameters())


@pytest.mark.parametrize('kernel, stride, padding', [(3, 1, 1), (7, 2, 3)])
def test_tokenizer_geometry_and_init(kernel, stride, padding):
    tok = CCTTokenizer(embed_dims=32, num_conv_layers=2, kernel_size=kernel)
    convs = [seq[0] for seq in tok.conv_layers]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(3, 64),
                                                                (64, 32)]
    assert all(c.bias is None and c.stride == (stride, stride)
               and c.padding == (padding, padding) for c in convs)
    assert [type(m).__name__ for m in tok.conv_layers[0]] == [
        'Conv2d', 'ReLU', 'MaxPool2d'
    ]
    side = 224 if kernel == 7 else 32
    tokens, hw = tok(torch.randn(1, 3, side, side))
    assert hw == (tok.output_size(side), ) * 2
    assert tokens.shape == (1, hw[0] * hw[1], 32)
    # Kaiming-normal, fan-in, ReLU gain: std = sqrt(2 / fan_in).
    torch.manual_seed(0)
    big = CCTTokenizer(embed_dims=256, kernel_size=kernel)
    big.init_weights()
    weight = big.conv_layers[0][0].weight
    expected = (2 / weight[0].numel())**0.5
    assert weight.std().item() == pytest.approx(expected, rel=0.1)


def test_seq_pool_formula_and_neck_use():
    torch.manual_seed(0)
    pool = SeqPool(16)
    x = torch.randn(2, 12, 16)
    w = F.softmax(pool.attention_pool(x), dim=1)
    torch.testing.assert_close(pool(x), (w * x).sum(1))
    maps = x.transpose(1, 2).reshape(2, 16, 3, 4)
    out = pool((maps, x))
    assert isinstance(out, tuple)
    torch.testing.assert_close(out[0], out[1])


def test_encoder_layer_norm_replaces_stream():
    torch.manual_seed(0)
    layer = CCTEncoderLayer(16, 2, 32).eval()
    assert layer.attn.qkv.bias is None and layer.attn.proj.bias is not None
    x = torch.randn(2, 12, 16)
    y = layer.norm1(x + layer.attn(layer.pre_norm(x)))
    fc1, fc2 = layer.ffn.layers[0][0], layer.ffn.layers[1]
    torch.testing.assert_close(layer(x), y + fc2(F.gelu(fc1(y))))


def test_encoder_layer_default_attention():
    layer = CCTEncoderLayer(16, 2, 32, impl='literal')
    assert type(layer.attn) is MultiheadSelfAttention
    assert layer.attn.num_heads == 2 and layer.attn.impl == 'literal'
    assert layer.attn.attn_drop.p == 0.1 and layer.attn.qkv.bias is None


def test_encoder_layer_attention_swap_to_lemsa():
    # CCT has no class token (SeqPool pools the tokens), so the layer's
    # tokens are the tokenizer's (H, W) grid, passed on to the attention.
    torch.manual_seed(0)
    layer = MODELS.build(
        dict(
            type='CCTEncoderLayer',
            embed_dims=16,
            num_heads=2,
            ffn_ratio=2,
            attn_cfg=dict(type='LeMSA', sr_ratio=2)))
    assert type(layer.attn) is LeMSA
    assert layer.attn.num_heads == 2 and layer.attn.sr_ratio == 2
    assert layer.attn.attn_drop.p == 0.1  # the layer's attn_drop_rate
    x = torch.randn(2, 3 * 5, 16, requires_grad=True)
    out = layer(x, (3, 5))
    assert out.shape == (2, 15, 16)
    out.square().mean().backward()
    assert x.grad is not None
    assert all(p.grad is not None for p in layer.attn.parameters())
