"""ViTAE blocks: PRM, PCM, TokenPerformer, ReductionCell, NormalCell."""
import math

import pytest
import torch
import torch.nn as nn
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401
from lect_mm.blocks import (PCM, PRM, LeMSA, MultiheadSelfAttention,
                            NormalCell, ReductionCell, TokenPerformer)

BLOCKS = {
    'PRM': (dict(type='PRM', in_channels=3, embed_dims=4, kernel_size=7,
                 stride=4, dilations=(1, 2, 3, 4)),
            lambda: (torch.randn(2, 3, 16, 12), ), (2, 12, 16)),
    'PCM': (dict(type='PCM', in_channels=8, mid_channels=(16, 8),
                 out_channels=8, groups=4),
            lambda: (torch.randn(2, 8, 5, 6), ), (2, 8, 5, 6)),
    'TokenPerformer': (dict(type='TokenPerformer', in_channels=12,
                            embed_dims=8),
                       lambda: (torch.randn(2, 10, 12), ), (2, 10, 8)),
    'ReductionCell': (dict(type='ReductionCell', in_channels=3, embed_dims=4,
                           token_dims=8, downsample_ratio=4, kernel_size=7,
                           dilations=(1, 2)),
                      lambda: (torch.randn(2, 3, 16, 12), ), (2, 12, 8)),
    'NormalCell': (dict(type='NormalCell', embed_dims=16, num_heads=2,
                        ffn_ratio=2, groups=4,
                        drop_path_rate=0.1),
                   lambda: (torch.randn(2, 12, 16), (3, 4)), (2, 12, 16)),
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
    assert all(p.grad is not None for p in block.parameters()
               if p.requires_grad)


def test_prm_paddings_and_dilation_major_concat():
    prm = PRM(3, 4, kernel_size=7, stride=4, dilations=(1, 2, 3, 4))
    assert [seq[0].padding[0] for seq in prm.convs] == [2, 5, 8, 11]
    assert [PRM(8, 4, 3, 2, (1, 2, 3)).convs[i][0].padding[0]
            for i in range(3)] == [1, 2, 3]
    x = torch.randn(1, 3, 16, 16)
    tokens, hw = prm(x)
    assert hw == (4, 4) and tokens.shape == (1, 16, 16)
    second = prm.convs[1](x).flatten(2).transpose(1, 2)
    torch.testing.assert_close(tokens[..., 4:8], second)
    # Sides not divisible by the stride stay aligned with the PCM.
    assert prm(torch.randn(1, 3, 18, 13))[1] == (5, 4)


def test_pcm_layouts():
    rc_pcm = PCM(3, (4, 4), 8, strides=(2, 2, 1),
                 with_norm=(False, True, False))
    kinds = [type(m).__name__ for m in rc_pcm]
    assert kinds == [
        'Conv2d', 'SiLU', 'Conv2d', 'BatchNorm2d', 'SiLU', 'Conv2d', 'SiLU'
    ]
    nc_pcm = PCM(16, (32, 16), 16, groups=8)
    kinds = [type(m).__name__ for m in nc_pcm]
    assert kinds == [
        'Conv2d', 'BatchNorm2d', 'SiLU', 'Conv2d', 'BatchNorm2d', 'SiLU',
        'Conv2d', 'SiLU'
    ]
    assert nc_pcm[0].groups == 8
    assert rc_pcm(torch.randn(1, 3, 16, 16)).shape == (1, 8, 4, 4)


def test_token_performer_matches_its_definition():
    torch.manual_seed(0)
    perf = TokenPerformer(12, 8).eval()
    assert not perf.w.requires_grad and perf.w.shape == (4, 8)
    assert 'w' in perf.state_dict()
    x = torch.randn(2, 7, 12)
    y = perf.norm1(x)
    k, q, v = perf.kqv(y).split(8, dim=-1)

    def phi(u):
        return torch.exp(u @ perf.w.t() -
                         (u * u).sum(-1, keepdim=True) / 2) / math.sqrt(4)

    kp, qp = phi(k), phi(q)
    num = torch.einsum('btm,bsm,bsc->btc', qp, kp, v)
    den = torch.einsum('btm,bsm->bt', qp, kp).unsqueeze(-1)
    attn = v + perf.proj(num / (den + 1e-8))
    local = torch.randn(2, 7, 8)
    z = attn + local
    fc1, fc2 = perf.mlp.layers[0][0], perf.mlp.layers[1]
    expected = z + fc2(nn.functional.gelu(fc1(perf.norm2(z))))
    torch.testing.assert_close(perf(x, local=local), expected)


def test_token_performer_kernel_in_fp32_under_autocast():
    torch.manual_seed(0)
    perf = TokenPerformer(12, 8).eval()
    x = torch.randn(2, 7, 12)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = perf(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), perf(x), atol=0.1, rtol=0.1)


def test_reduction_cell_types():
    with pytest.raises(ValueError, match="tokens_type must be one of"):
        ReductionCell(3, 4, 8, tokens_type='transformer')
    with pytest.raises(ValueError, match='must equal len\\(dilations\\)'):
        ReductionCell(8, 4, 16, 2, 3, (1, 2), tokens_type='performer_less')
    less = ReductionCell(8, 4, 8, 2, 3, (1, 2), tokens_type='performer_less')
    assert less.attn is None and less.pcm is None
    x = torch.randn(1, 8, 6, 6)
    tokens, hw = less(x.flatten(2).transpose(1, 2), (6, 6))
    torch.testing.assert_close(tokens, less.prm(x)[0])
    assert hw == (3, 3)
    rc = ReductionCell(3, 4, 8, 4, 7, (1, 2, 3, 4))
    assert rc.attn.kqv.in_features == 16  # PRM tokens: 4 dilations x 4
    assert [rc.pcm[i].stride[0] for i in (0, 2, 5)] == [2, 2, 1]


def test_normal_cell_formula():
    torch.manual_seed(0)
    cell = NormalCell(16, 2, 32, groups=4).eval()
    x = torch.randn(2, 12, 16)
    local = cell.pcm(x.transpose(1, 2).reshape(2, 16, 3, 4))
    x1 = x + cell.attn(cell.norm1(x)) + local.flatten(2).transpose(1, 2)
    fc1, fc2 = cell.ffn.layers[0][0], cell.ffn.layers[1]
    expected = x1 + fc2(nn.functional.gelu(fc1(cell.norm2(x1))))
    torch.testing.assert_close(cell(x, (3, 4)), expected)
    # A class token skips the PCM branch.
    cls_cell = NormalCell(16, 2, 32, groups=4, num_extra_tokens=1).eval()
    out = cls_cell(torch.randn(2, 13, 16), (3, 4))
    assert out.shape == (2, 13, 16)


def test_normal_cell_default_attention():
    cell = NormalCell(16, 2, 32, groups=4, qkv_bias=False, impl='literal')
    assert type(cell.attn) is MultiheadSelfAttention
    assert cell.attn.num_heads == 2 and cell.attn.impl == 'literal'
    assert cell.attn.qkv.bias is None


def test_normal_cell_attention_swap_to_lemsa():
    # ViTAE's normal cells have no class token, so the tokens are the
    # (H, W) grid of the stage and a grid attention such as LeMSA fits.
    torch.manual_seed(0)
    cell = MODELS.build(
        dict(
            type='NormalCell',
            embed_dims=16,
            num_heads=2,
            ffn_ratio=2,
            groups=4,
            attn_cfg=dict(type='LeMSA', sr_ratio=2)))
    assert type(cell.attn) is LeMSA
    assert cell.attn.num_heads == 2 and cell.attn.sr_ratio == 2
    x = torch.randn(2, 5 * 6, 16, requires_grad=True)
    out = cell(x, (5, 6))
    assert out.shape == (2, 30, 16)
    out.square().mean().backward()
    assert x.grad is not None
    assert all(p.grad is not None for p in cell.attn.parameters())
