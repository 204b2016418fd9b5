import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lect_mm.blocks import LeMSAv2
from test_lemsa import _bn, _randomize_bn, fused_vs_literal


def spec_lemsa_v2(m, x, hw, k_ratio, mode):
    """SPEC §6 (LeCT v2 attention) with plain torch ops and a head loop.

    Divisible sizes, default (reference) input split: only x[..., :h_dim].
    """
    B, N, C = x.shape
    H, W = hw
    hd, ld, heads = m.h_dim, m.l_dim, m.num_heads
    d = ld // heads
    h, w = H // k_ratio, W // k_ratio
    up = nn.Upsample(scale_factor=k_ratio, mode=mode, align_corners=False)
    v = F.linear(x[..., :hd], m.proj_v.weight)  # (B, N, l_dim)
    v_map = v.transpose(1, 2).reshape(B, ld, H, W)
    a = _bn(F.conv2d(v_map, m.conv1[0].weight, padding=1, groups=ld),
            m.conv1[1])
    b = _bn(F.conv2d(F.gelu(a), m.conv2[0].weight, padding=1, groups=ld),
            m.conv2[1])
    high = F.gelu(_bn(F.conv2d(b, m.conv3[0].weight, m.conv3[0].bias),
                      m.conv3[1]))
    qa, qm = F.avg_pool2d(a, k_ratio), F.max_pool2d(a, k_ratio)
    ka, km = F.avg_pool2d(b, k_ratio), F.max_pool2d(b, k_ratio)
    outs = []
    for i in range(heads):
        sl = slice(i * d, (i + 1) * d)

        def tokens(t):
            return t[:, sl].reshape(B, d, h * w).transpose(1, 2)

        qi = torch.cat([tokens(qa), tokens(qm)], dim=-1)  # (B, Nq, 2d)
        ki = torch.cat([tokens(ka), tokens(km)], dim=-1)
        M = qi @ ki.transpose(1, 2)
        Mup = up(M.reshape(B, h * w, h, w)).reshape(B, h * w, N)
        A = torch.softmax(Mup * C**-0.5, dim=-1)
        outs.append(A @ v[:, :, sl])
    o_map = torch.cat(outs, dim=2).transpose(1, 2).reshape(B, ld, h, w)
    qu = m.query_upsampler
    low = _bn(F.conv2d(up(o_map), qu.conv.weight, padding=1, groups=ld),
              qu.norm)
    out = torch.cat([high, low], dim=1).flatten(2).transpose(1, 2)
    return F.linear(out, m.proj.weight, m.proj.bias)


def _v2(embed_dims=16, num_heads=2, sr_ratio=4, h_ratio=0.25,
        mode='bicubic', **kwargs):
    return LeMSAv2(
        embed_dims, num_heads, sr_ratio, h_ratio, key_upsample=mode,
        query_upsampler=dict(type='ResizeDWConvUpsampler', mode=mode),
        **kwargs)


@pytest.mark.parametrize('impl', ['fused', 'literal'])
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('hw', [(8, 8), (8, 12)])
def test_matches_spec_written_reference(impl, mode, hw):
    torch.manual_seed(0)
    m = _randomize_bn(_v2(mode=mode, impl=impl)).eval()
    x = torch.randn(2, hw[0] * hw[1], 16)
    torch.testing.assert_close(
        m(x, hw), spec_lemsa_v2(m, x, hw, 4, mode), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('hw', [(8, 12), (13, 10)])
def test_fused_equals_literal_values_and_grads(train, mode, hw):
    x = torch.randn(2, hw[0] * hw[1], 16)
    fused_vs_literal(lambda impl: _v2(mode=mode, impl=impl), x, hw, train)


def test_fused_equals_literal_low_from_input_pool_size():
    x = torch.randn(2, 9 * 11, 24)
    fused_vs_literal(
        lambda impl: LeMSAv2(24, 3, None, 0.125, pool_size=(2, 3),
                             low_from_input=True, impl=impl), x, (9, 11))


@pytest.mark.parametrize('hw,pooled', [((16, 16), (4, 4)), ((8, 20), (2, 5)),
                                       ((13, 10), (4, 3))])
def test_shapes(hw, pooled):
    m = _v2()
    m.return_attn_map = True
    y = m(torch.randn(2, hw[0] * hw[1], 16), hw)
    assert y.shape == (2, hw[0] * hw[1], 16)
    assert m.attn_map.shape == (2, 2, pooled[0] * pooled[1], hw[0] * hw[1])
    torch.testing.assert_close(m.attn_map.sum(-1),
                               torch.ones(2, 2, pooled[0] * pooled[1]))


# LeCT v2 stages: (C, heads, K, h_ratio) -> h_dim, l_dim, l_dim / heads
V2_STAGES = [(64, 2, 14, 1 / 2, 32, 32, 16), (128, 3, 7, 1 / 4, 32, 96, 32),
             (192, 7, 7, 1 / 8, 24, 168, 24)]


@pytest.mark.parametrize('stage', V2_STAGES)
def test_lect_v2_stage_splits_and_parameter_count(stage):
    C, heads, k, ratio, hd, ld, d = stage
    m = LeMSAv2(C, heads, k, ratio)
    assert (m.h_dim, m.l_dim, m.l_dim // m.num_heads) == (hd, ld, d)
    expected = (
        hd * ld  # proj_v: Linear(h_dim -> l_dim), no bias
        + ld * 9 + 2 * ld  # conv1: DWConv3x3 (no bias) + BN
        + ld * 9 + 2 * ld  # conv2: DWConv3x3 (no bias) + BN
        + ld * hd + hd + 2 * hd  # conv3: Conv1x1(l -> h, bias) + BN
        + ld * 9 + 2 * ld  # query upsampler: DWConv3x3 (no bias) + BN
        + C * C + C)  # proj: Linear(C -> C) with bias
    assert sum(p.numel() for p in m.parameters()) == expected
    assert m.scale == C**-0.5


def test_lect_v2_stage1_parameter_count_literal():
    # C 64, h_dim = l_dim = 32: 32*32 + 2*(32*9 + 64) + (32*32 + 32 + 64)
    # + (32*9 + 64) + 64*64 + 64
    assert sum(p.numel() for p in LeMSAv2(64, 2, 14, 0.5).parameters()) \
        == 1024 + 704 + 1120 + 352 + 4160 == 7360


def test_input_split_used():
    torch.manual_seed(0)
    x = torch.randn(2, 64, 16)
    x_changed_low = x.clone()
    x_changed_low[..., 4:] += 1.  # h_dim = 4: change the last l_dim = 12
    x_changed_high = x.clone()
    x_changed_high[..., :4] += 1.

    ref = _v2().eval()  # default: only x[..., :h_dim] is read
    torch.testing.assert_close(ref(x, (8, 8)), ref(x_changed_low, (8, 8)))
    assert not torch.allclose(ref(x, (8, 8)), ref(x_changed_high, (8, 8)))

    low = _v2(low_from_input=True).eval()  # only x[..., h_dim:] is read
    assert low.proj_v.weight.shape == (12, 12)
    torch.testing.assert_close(low(x, (8, 8)), low(x_changed_high, (8, 8)))
    assert not torch.allclose(low(x, (8, 8)), low(x_changed_low, (8, 8)))


def test_reference_key_layout():
    keys = set(_v2().state_dict())
    assert {
        'proj_v.weight', 'conv1.0.weight', 'conv1.1.running_mean',
        'conv2.0.weight', 'conv2.1.weight', 'conv3.0.weight', 'conv3.0.bias',
        'conv3.1.weight', 'query_upsampler.conv.weight',
        'query_upsampler.norm.weight', 'proj.weight', 'proj.bias'
    } <= keys


@pytest.mark.parametrize('args,kwargs,match', [
    ((16, 5, 4, 0.25), {}, r'l_dim = .* = 12 .*num_heads \(5\)'),
    ((16, 2, 4, 0.01), {}, 'h_ratio'),
    ((16, 2, 4, 1.0), {}, 'h_ratio'),
    ((16, 2, None, 0.25), {}, 'exactly one of sr_ratio'),
    ((16, 2, 4, 0.25), dict(pool_size=2), 'exactly one of sr_ratio'),
    ((16, 2, 4, 0.25), dict(key_upsample='linear'), 'key_upsample'),
    ((16, 2, 4, 0.25), dict(impl='math'), "impl 'math'"),
])
def test_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LeMSAv2(*args, **kwargs)


@pytest.mark.parametrize('impl', ['fused', 'literal'])
def test_compiles_as_one_graph(impl):
    # torch.compile (the compile=True switch) captures the layer, the
    # cached interpolation matrices (bicubic keys; the literal path's logit
    # resize) included, without graph breaks, forward and backward.
    torch._dynamo.reset()
    layer = LeMSAv2(32, 2, sr_ratio=4, h_ratio=0.5, impl=impl)
    x = torch.randn(2, 16 * 16, 32)
    ref = layer(x, (16, 16))
    compiled = torch.compile(layer, backend='eager', fullgraph=True)
    out = compiled(x, (16, 16))
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert layer.proj_v.weight.grad is not None
    torch._dynamo.reset()
