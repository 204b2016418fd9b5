import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lect_mm.blocks import LeMSA, LeMSAv2
from lect_mm.blocks.pooled_attention import (heads_to_map, pool_map,
                                             resolve_impl)
from lect_mm.blocks.upsample import resize_grid_axis
from lect_mm.models.convert import convert_attention_key


def _randomize_bn(module):
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features,
                                                 generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features,
                                               generator=gen) + 0.5)
                m.weight.copy_(1 + torch.randn(m.num_features,
                                               generator=gen) * 0.1)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return module


def _bn(x, bn):
    return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight,
                        bn.bias, training=False, eps=bn.eps)


def spec_lemsa(m, x, hw, k_ratio, mode='bilinear', sv=False):
    """SPEC §2 written out with plain torch ops and an explicit head loop.

    Divisible sizes only; query upsampler v1 (nn.Upsample ×K → DWConv → BN)
    or v3 (SV ConvTranspose, written with a per-position loop).
    """
    B, N, C = x.shape
    H, W = hw
    heads = m.num_heads
    d = C // heads
    h, w = H // k_ratio, W // k_ratio
    up = nn.Upsample(scale_factor=k_ratio, mode=mode, align_corners=False)
    v = F.linear(x, m.proj_v.weight)  # (B, N, C)
    v_map = v.transpose(1, 2).reshape(B, C, H, W)
    a = _bn(F.conv2d(v_map, m.conv1[0].weight, padding=1, groups=C),
            m.conv1[1])
    q = F.avg_pool2d(a, k_ratio)
    b = _bn(F.conv2d(F.gelu(a), m.conv2[0].weight, padding=1, groups=C),
            m.conv2[1])
    k = F.avg_pool2d(b, k_ratio)
    skip = F.gelu(b)
    outs = []
    for i in range(heads):
        qi = q[:, i * d:(i + 1) * d].reshape(B, d, h * w).transpose(1, 2)
        ki = k[:, i * d:(i + 1) * d].reshape(B, d, h * w).transpose(1, 2)
        vi = v[:, :, i * d:(i + 1) * d]
        M = qi @ ki.transpose(1, 2)  # (B, Nq, Nq)
        Mup = up(M.reshape(B, h * w, h, w)).reshape(B, h * w, N)
        A = torch.softmax(Mup * C**-0.5, dim=-1)
        outs.append(A @ vi)  # (B, Nq, d)
    o_map = torch.cat(outs, dim=2).transpose(1, 2).reshape(B, C, h, w)
    qu = m.query_upsampler
    if not sv:
        o_up = _bn(F.conv2d(up(o_map), qu.conv.weight, padding=1, groups=C),
                   qu.norm)
    else:
        red = F.conv2d(o_map, qu.reduce.weight)
        cr = red.shape[1]
        mid = torch.zeros(B, cr, H, W)
        for c in range(cr):
            for i in range(h):
                for j in range(w):
                    g = c * h * w + i * w + j
                    mid[:, c, i * k_ratio:(i + 1) * k_ratio,
                        j * k_ratio:(j + 1) * k_ratio] = (
                            red[:, c, i, j, None, None] *
                            qu.deconv.weight[g, 0] + qu.deconv.bias[g])
        o_up = F.conv2d(mid, qu.expand.weight)
    out = (o_up + skip).flatten(2).transpose(1, 2)
    return F.linear(out, m.proj.weight, m.proj.bias)


@pytest.mark.parametrize('impl', ['auto', 'fused', 'literal'])
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('hw,k', [((14, 14), 7), ((8, 12), 4)])
def test_matches_spec_written_reference(impl, mode, hw, k):
    torch.manual_seed(0)
    m = _randomize_bn(
        LeMSA(16, 2, sr_ratio=k, key_upsample=mode, impl=impl,
              query_upsampler=dict(type='ResizeDWConvUpsampler',
                                   mode=mode))).eval()
    x = torch.randn(2, hw[0] * hw[1], 16)
    torch.testing.assert_close(
        m(x, hw), spec_lemsa(m, x, hw, k, mode), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('impl', ['fused', 'literal'])
def test_matches_spec_written_reference_sv(impl):
    torch.manual_seed(0)
    m = _randomize_bn(
        LeMSA(20, 2, sr_ratio=4, impl=impl,
              query_upsampler=dict(
                  type='SVConvTransposeUpsampler', in_size=(2, 3)))).eval()
    assert m.query_upsampler.scale_factor == 4  # defaulted from sr_ratio
    x = torch.randn(2, 8 * 12, 20)
    torch.testing.assert_close(
        m(x, (8, 12)), spec_lemsa(m, x, (8, 12), 4, sv=True),
        rtol=1e-5, atol=1e-5)


def fused_vs_literal(make, x, hw, train=False):
    """Compare impl='fused' and 'literal' (same weights): outputs and the
    gradients of the input and of every parameter.

    Eval mode (running BN statistics, randomised): element-wise within
    1e-5 in float32. Train mode (batch statistics): BN's backward turns
    float32 rounding into absolute errors proportional to the gradient
    scale (weight gradients ~1e2 here, and some BN-bias gradients are
    exactly zero in real arithmetic, so no relative tolerance fits them);
    float32 must agree within 1e-5 times the largest gradient of the module,
    and float64 element-wise within 1e-10, which shows the two paths are
    the same function.
    """
    dtypes = (torch.float64, torch.float32) if train else (torch.float32, )
    for dtype in dtypes:
        torch.manual_seed(0)
        fused = _randomize_bn(make('fused')).to(dtype).train(train)
        literal = make('literal').to(dtype).train(train)
        literal.load_state_dict(fused.state_dict())
        weight = torch.randn(x.shape, dtype=dtype)
        results = []
        for m in (fused, literal):
            xi = x.to(dtype).clone().requires_grad_()
            y = m(xi, hw)
            (y * weight).sum().backward()
            results.append([y.detach(), xi.grad] +
                           [p.grad for p in m.parameters()])
        assert len(results[0]) == len(results[1])
        assert all(t is not None for t in results[0] + results[1])
        scale = max(1., max(t.abs().max().item() for t in results[1][1:]))
        for got, ref in zip(*results):
            if dtype == torch.float64:
                torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
            elif train:
                err = (got - ref).abs().max().item()
                assert err <= 1e-5 * scale, (err, scale)
            else:
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('hw,k', [((14, 14), 7), ((12, 20), 4), ((13, 10), 4)])
def test_fused_equals_literal_values_and_grads(train, mode, hw, k):
    x = torch.randn(2, hw[0] * hw[1], 16)
    fused_vs_literal(
        lambda impl: LeMSA(16, 2, sr_ratio=k, key_upsample=mode, impl=impl),
        x, hw, train)


@pytest.mark.parametrize('grid,dims,expected', [
    ((4, 4), 32, 'fused'),  # LeCT v1 stages 1-2: 2 * 16 cells = 32 channels
    ((7, 7), 32, 'fused'),  # stage 3
    ((4, 4), 64, 'literal'),  # LeCT v2 stage 2: 2 * 16 < 64
    ((2, 2), 48, 'literal'),  # LeCT v2 stage 3
])
def test_auto_impl_rule(grid, dims, expected):
    q = torch.zeros(1, 2, grid[0] * grid[1], dims, requires_grad=True)
    k_map = torch.zeros(1, 2 * dims, *grid, requires_grad=True)
    assert resolve_impl('auto', q, k_map) == expected
    # Explicit choices stand; inference and other devices take SDPA.
    assert resolve_impl('literal', q, k_map) == 'literal'
    assert resolve_impl('fused', q, k_map) == 'fused'
    with torch.no_grad():
        assert resolve_impl('auto', q, k_map) == 'fused'
    assert resolve_impl('auto', q.detach(), k_map.detach()) == 'fused'
    meta = [t.detach().to('meta').requires_grad_() for t in (q, k_map)]
    assert resolve_impl('auto', *meta) == 'fused'
    # bf16 on the CPU: literal, training or not, up to 64 pooled cells.
    half = [t.detach().bfloat16() for t in (q, k_map)]
    assert resolve_impl('auto', *half) == 'literal'
    big = torch.zeros(1, 2 * dims, 9, 9, dtype=torch.bfloat16)  # 81 cells
    assert resolve_impl('auto', half[0], big) == 'fused'


@pytest.mark.parametrize('sr_ratio,path', [(4, 'literal'), (2, 'fused')])
def test_auto_takes_the_resolved_path(monkeypatch, sr_ratio, path):
    # Heads of 64 channels on a 16x16 map: K=4 pools to 16 cells (literal),
    # K=2 to 64 (fused). Only the literal path resizes the logit rows.
    from lect_mm.blocks import pooled_attention
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return resize_grid_axis(*args, **kwargs)

    monkeypatch.setattr(pooled_attention, 'resize_grid_axis', spy)
    torch.manual_seed(0)
    layer = LeMSA(128, 2, sr_ratio=sr_ratio)
    assert layer.impl == 'auto'
    x = torch.randn(2, 16 * 16, 128)
    out = layer(x, (16, 16))  # parameters require grad: training
    assert len(calls) == (1 if path == 'literal' else 0)
    with torch.no_grad():
        layer(x, (16, 16))
    assert len(calls) == (1 if path == 'literal' else 0)  # fused
    for impl in ('fused', 'literal'):
        layer.impl = impl
        torch.testing.assert_close(layer(x, (16, 16)), out, rtol=1e-5,
                                   atol=1e-5)


def test_fused_equals_literal_pool_size_and_ablation():
    x = torch.randn(2, 11 * 9, 16)
    fused_vs_literal(
        lambda impl: LeMSA(16, 4, pool_size=(3, 2), impl=impl,
                           qkv_mode='parallel', conv_skip=False),
        x, (11, 9))


@pytest.mark.parametrize('hw,k,pooled', [
    ((56, 56), 14, (4, 4)),
    ((16, 24), 4, (4, 6)),
    ((13, 10), 4, (4, 3)),
    ((5, 3), 14, (1, 1)),
])
def test_shapes_and_pooled_grid(hw, k, pooled):
    m = LeMSA(8, 2, sr_ratio=k)
    m.return_attn_map = True
    y = m(torch.randn(2, hw[0] * hw[1], 8), hw)
    assert y.shape == (2, hw[0] * hw[1], 8)
    assert m.attn_map.shape == (2, 2, pooled[0] * pooled[1], hw[0] * hw[1])


def test_ceil_pooling_averages_valid_border_pixels():
    x = torch.randn(1, 2, 5, 7)
    p = pool_map(x, 3, None, 'avg')
    assert p.shape == (1, 2, 2, 3)
    torch.testing.assert_close(p[..., 1, 2], x[..., 3:5, 6:7].mean((-2, -1)))
    torch.testing.assert_close(p[..., 0, 0], x[..., 0:3, 0:3].mean((-2, -1)))


def test_pool_size_equals_sr_ratio_when_divisible():
    torch.manual_seed(0)
    a = LeMSA(8, 2, sr_ratio=7).eval()
    b = LeMSA(8, 2, pool_size=(2, 3)).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 14 * 21, 8)
    torch.testing.assert_close(a(x, (14, 21)), b(x, (14, 21)))


def test_pool_size_keeps_grid_fixed_at_any_resolution():
    m = LeMSA(8, 2, pool_size=4)
    m.return_attn_map = True
    for hw in [(8, 8), (17, 30), (3, 5)]:
        y = m(torch.randn(1, hw[0] * hw[1], 8), hw)
        assert y.shape == (1, hw[0] * hw[1], 8)
        assert m.attn_map.shape[2] == 16


def test_parameter_count_lect_stage1():
    m = LeMSA(64, 2, sr_ratio=14, qkv_bias=False,
              query_upsampler=dict(type='ResizeDWConvUpsampler'))
    expected = (
        64 * 64  # proj_v: Linear(64 -> 64), no bias
        + 64 * 9 + 2 * 64  # conv1: DWConv3x3 (no bias) + BN(64)
        + 64 * 9 + 2 * 64  # conv2: DWConv3x3 (no bias) + BN(64)
        + 64 * 9 + 2 * 64  # query upsampler: DWConv3x3 (no bias) + BN(64)
        + 64 * 64 + 64)  # proj: Linear(64 -> 64) with bias
    assert sum(p.numel() for p in m.parameters()) == expected == 10368


def test_reference_key_layout():
    keys = set(LeMSA(8, 2, sr_ratio=2).state_dict())
    assert {
        'proj_v.weight', 'conv1.0.weight', 'conv1.1.weight', 'conv1.1.bias',
        'conv1.1.running_mean', 'conv2.0.weight', 'conv2.1.running_var',
        'query_upsampler.conv.weight', 'query_upsampler.norm.weight',
        'proj.weight', 'proj.bias'
    } <= keys
    assert 'proj_v.bias' not in keys and 'conv1.0.bias' not in keys
    keys = set(LeMSA(8, 2, sr_ratio=2, qkv_bias=True).state_dict())
    assert {'proj_v.bias', 'conv1.0.bias', 'conv2.0.bias'} <= keys


def test_attn_map_opt_in(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 12 * 8, 8)
    fused = LeMSA(8, 2, sr_ratio=4)
    literal = LeMSA(8, 2, sr_ratio=4, impl='literal')
    literal.load_state_dict(fused.state_dict())

    # Off (default): nothing stored, and the fused path never computes a
    # softmax map.
    def no_softmax(*args, **kwargs):
        raise AssertionError('attention map computed although not asked')

    with monkeypatch.context() as mp:
        mp.setattr(torch.Tensor, 'softmax', no_softmax)
        mp.setattr(torch, 'softmax', no_softmax)
        fused(x, (12, 8))
    assert fused.attn_map is None and not fused.return_attn_map

    maps = []
    for m in (fused, literal):
        m.return_attn_map = True
        m(x, (12, 8))
        maps.append(m.attn_map)
        assert m.attn_map.shape == (2, 2, 3 * 2, 12 * 8)
        assert not m.attn_map.requires_grad
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 2, 6))
    torch.testing.assert_close(maps[0], maps[1], rtol=1e-5, atol=1e-6)


def _capture_conv2_input(m, x, hw):
    seen = {}
    hook = m.conv2.register_forward_hook(
        lambda mod, args, out: seen.update(inp=args[0], out=out))
    seen_a = {}
    hook_a = m.conv1.register_forward_hook(
        lambda mod, args, out: seen_a.update(inp=args[0], out=out))
    y = m(x, hw)
    hook.remove()
    hook_a.remove()
    return y, seen_a, seen


def test_qkv_mode_sequential_and_parallel():
    torch.manual_seed(0)
    x = torch.randn(2, 64, 8)
    seq = LeMSA(8, 2, sr_ratio=4).eval()
    _, a, b = _capture_conv2_input(seq, x, (8, 8))
    torch.testing.assert_close(b['inp'], F.gelu(a['out']))

    par = LeMSA(8, 2, sr_ratio=4, qkv_mode='parallel').eval()
    par.load_state_dict(seq.state_dict())
    _, a, b = _capture_conv2_input(par, x, (8, 8))
    torch.testing.assert_close(b['inp'], a['inp'])  # both from v
    assert not torch.allclose(par(x, (8, 8)), seq(x, (8, 8)))


def test_conv_skip_off_removes_gelu_b_term():
    torch.manual_seed(0)
    x = torch.randn(2, 64, 8)
    with_skip = LeMSA(8, 2, sr_ratio=4).eval()
    no_skip = LeMSA(8, 2, sr_ratio=4, conv_skip=False).eval()
    no_skip.load_state_dict(with_skip.state_dict())
    _, _, b = _capture_conv2_input(with_skip, x, (8, 8))
    skip_tokens = F.gelu(b['out']).flatten(2).transpose(1, 2)
    diff = with_skip(x, (8, 8)) - no_skip(x, (8, 8))
    torch.testing.assert_close(
        diff, F.linear(skip_tokens, with_skip.proj.weight), rtol=1e-5,
        atol=1e-5)


def test_sv_upsampler_serves_other_resolutions():
    # Trained on the 2x2 grid of 8x8 maps; 12x12 pools to 3x3 (kernels
    # resampled), 7x7 to 2x2 (trained kernels, 8x8 patches cropped to 7x7).
    m = LeMSA(20, 2, sr_ratio=4,
              query_upsampler=dict(type='SVConvTransposeUpsampler',
                                   in_size=2))
    for hw in [(8, 8), (12, 12), (7, 7), (5, 13)]:
        x = torch.randn(1, hw[0] * hw[1], 20)
        assert m(x, hw).shape == x.shape


@pytest.mark.parametrize('kwargs,match', [
    (dict(embed_dims=10, num_heads=4, sr_ratio=2),
     r'embed_dims \(10\).*num_heads \(4\)'),
    (dict(embed_dims=8, num_heads=2, sr_ratio=2, key_upsample='area'),
     r"key_upsample 'area'.*'nearest', 'bilinear', 'bicubic'"),
    (dict(embed_dims=8, num_heads=2, sr_ratio=2, impl='flash'),
     r"impl 'flash'.*'auto', 'fused', 'literal'"),
    (dict(embed_dims=8, num_heads=2, sr_ratio=2, qkv_mode='chained'),
     r"qkv_mode 'chained'.*'sequential', 'parallel'"),
    (dict(embed_dims=8, num_heads=2), 'exactly one of sr_ratio'),
    (dict(embed_dims=8, num_heads=2, sr_ratio=2, pool_size=4),
     'exactly one of sr_ratio'),
    (dict(embed_dims=8, num_heads=2, sr_ratio=0), 'sr_ratio'),
    (dict(embed_dims=8, num_heads=2, pool_size=(2, 0)), 'pool_size'),
])
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LeMSA(**kwargs)


def test_dropout_active_only_in_training():
    m = LeMSA(8, 2, sr_ratio=4, attn_drop=0.5, proj_drop=0.5)
    x = torch.randn(2, 64, 8)
    m.eval()
    torch.testing.assert_close(m(x, (8, 8)), m(x, (8, 8)))
    m.train()
    torch.manual_seed(0)
    y1 = m(x, (8, 8))
    torch.manual_seed(1)
    assert not torch.allclose(y1, m(x, (8, 8)))
    assert math.isclose(m.scale, 8**-0.5)


@pytest.mark.parametrize('variant', ['v1', 'v2', 'v3'])
def test_matches_shared_reference_layer_after_key_mapping(
        variant, lect_reference):
    # tests/reference/lect_reference.py is a second, independent SPEC
    # implementation in the reference checkpoint layout.
    ref_mod = lect_reference
    torch.manual_seed(0)
    if variant == 'v2':
        ref = ref_mod.LeAttV2(32, 2, 4, 'bicubic', 0.25)
        ours = LeMSAv2(32, 2, 4, 0.25)
    else:
        ref = ref_mod.LeAtt(32, 2, 4, 'bilinear', variant, pooled=(2, 3))
        upsampler = (dict(type='SVConvTransposeUpsampler', in_size=(2, 3))
                     if variant == 'v3' else
                     dict(type='ResizeDWConvUpsampler'))
        ours = LeMSA(32, 2, sr_ratio=4, query_upsampler=upsampler)
    ref_mod.randomize_(ref)
    ours.load_state_dict({
        convert_attention_key(key, variant): value
        for key, value in ref.state_dict().items()}, strict=True)
    ref.eval()
    ours.eval()
    x = torch.randn(2, 8 * 12, 32)
    with torch.no_grad():
        expected = ref(x, (8, 12))
        for impl in ('fused', 'literal'):
            ours.impl = impl
            torch.testing.assert_close(
                ours(x, (8, 12)), expected, rtol=1e-5, atol=1e-5)


def test_hw_shape_must_match_tokens():
    with pytest.raises(ValueError, match=r'hw_shape \(5, 5\).*24 tokens'):
        LeMSA(8, 2, sr_ratio=2)(torch.randn(1, 24, 8), (5, 5))
    with pytest.raises(ValueError, match='hw_shape'):
        LeMSAv2(8, 2, 2, 0.5)(torch.randn(1, 24, 8), (5, 5))


@pytest.mark.parametrize('impl', ['fused', 'literal'])
@pytest.mark.parametrize('variant', ['v1', 'v2', 'v3'])
def test_maps_stay_in_token_layout(impl, variant):
    # Every map in the layer is a channels_last view of (B, N, C) tokens, so
    # no layout conversion happens between token and map form: the query
    # upsampler gets such a map from either attention path, returns one, and
    # the output tokens are a view of it (3x slower on CPU otherwise).
    hw, c = (8, 8), 16
    if variant == 'v2':
        layer = LeMSAv2(c, 2, sr_ratio=4, h_ratio=0.5, impl=impl)
    else:
        upsampler = dict(type='SVConvTransposeUpsampler', cr_ratio=0.25,
                         in_size=2) \
            if variant == 'v3' else dict(type='ResizeDWConvUpsampler')
        layer = LeMSA(c, 2, sr_ratio=4, impl=impl,
                      query_upsampler=upsampler)
    seen = {}

    def hook(module, args, output):
        seen['in'], seen['out'] = args[0], output

    layer.query_upsampler.register_forward_hook(hook)
    layer(torch.randn(2, 64, c), hw)
    for name in ('in', 'out'):
        assert seen[name].is_contiguous(
            memory_format=torch.channels_last), (name, seen[name].stride())


def test_heads_to_map_is_head_major_token_view():
    x = torch.randn(2, 3, 6, 4)  # (B, m, h*w, d), grid 2 x 3
    out = heads_to_map(x, 2)
    assert out.shape == (2, 12, 2, 3)
    assert out.is_contiguous(memory_format=torch.channels_last)
    ref = x.permute(0, 1, 3, 2).reshape(2, 12, 2, 3)  # channel = m * d + j
    assert torch.equal(out, ref)


def test_v2_pooled_keys_are_channels_last():
    # So that the key resize writes channels_last and the head split of
    # the resized keys is a view, as in LeMSA.
    layer = LeMSAv2(16, 2, sr_ratio=4, h_ratio=0.5)
    x = torch.randn(2, 8, 8, 8).contiguous(memory_format=torch.channels_last)
    pooled = layer._pooled_heads(x)
    assert pooled.shape == (2, 16, 2, 2)
    assert pooled.is_contiguous(memory_format=torch.channels_last)


def _outputs_and_grads(m, x, hw, amp):
    xi = x.clone().requires_grad_()
    m.zero_grad(set_to_none=True)
    with torch.autocast('cpu', torch.bfloat16, enabled=amp):
        y = m(xi, hw)
    weight = torch.randn(y.shape, generator=torch.Generator().manual_seed(3))
    (y.float() * weight).sum().backward()
    return [y.detach().float(), xi.grad] + [p.grad for p in m.parameters()]


@pytest.mark.parametrize('make', [
    lambda impl: LeMSA(32, 2, sr_ratio=4, impl=impl),
    lambda impl: LeMSAv2(32, 2, 4, 0.5, impl=impl),
], ids=['LeMSA', 'LeMSAv2'])
def test_bf16_autocast_fused_and_literal_within_bf16_rounding(make):
    # --amp on the CPU runs bf16 autocast, where 'auto' takes the literal
    # path. Both paths must stay within bf16 rounding (eps 2**-8) of the
    # float32 result, in the output and in every gradient: measured errors
    # are up to 1.4 % of each tensor's largest entry; a wrong scale or
    # resize gives errors of order 100 %.
    torch.manual_seed(0)
    m = _randomize_bn(make('literal')).eval()
    x = torch.randn(2, 8 * 12, 32)
    ref = _outputs_and_grads(m, x, (8, 12), amp=False)
    results = {}
    for impl in ('fused', 'literal', 'auto'):
        m.impl = impl
        results[impl] = _outputs_and_grads(m, x, (8, 12), amp=True)
    assert results['literal'][0].dtype == ref[0].dtype
    for impl in ('fused', 'literal'):
        for got, want in zip(results[impl], ref):
            err = (got.float() - want).abs().max().item()
            assert err <= 3e-2 * want.abs().max().item(), (impl, err)
    assert all(torch.equal(a, b)
               for a, b in zip(results['auto'], results['literal']))


class _OnGrid(nn.Module):
    """A token block on a fixed grid, for torch.jit.trace (tensor inputs)."""

    def __init__(self, block, hw):
        super().__init__()
        self.block, self.hw = block, hw

    def forward(self, x):
        return self.block(x, self.hw)


@pytest.mark.filterwarnings('ignore::torch.jit.TracerWarning')
def test_auto_traces_the_same_path_with_and_without_grad():
    # LeCT v2's stage shape, where 'auto' takes the literal path when
    # autograd records the call (2 * 4 pooled cells < 16 channels per
    # head). check_trace re-traces under no_grad; under tracing 'auto'
    # ignores the grad mode, so both traces hold the same graph.
    torch.manual_seed(0)
    layer = LeMSAv2(32, 2, sr_ratio=4, h_ratio=0.5).eval()
    model = _OnGrid(layer, (8, 8))
    x = torch.randn(1, 64, 32)
    traced = torch.jit.trace(model, (x, ), check_trace=True)
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert 'aten::scaled_dot_product_attention' in kinds
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model(x))
    # Outside tracing the rule is unchanged: literal when recording.
    q = torch.zeros(1, 2, 4, 16, requires_grad=True)
    assert resolve_impl('auto', q, torch.zeros(1, 32, 2, 2)) == 'literal'


@pytest.mark.parametrize('cfg', [
    dict(type='LeMSA', sr_ratio=4),
    dict(type='LeMSA', sr_ratio=4, qkv_mode='parallel', conv_skip=False),
    dict(type='LeMSA', sr_ratio=4, attn_drop=0.2,
         query_upsampler=dict(type='SVConvTransposeUpsampler',
                              in_size=4, scale_factor=4)),
    dict(type='LeMSAv2', sr_ratio=4, h_ratio=0.5, impl='literal'),
])
def test_with_cp_gives_the_same_step(cfg):
    """with_cp=True keeps fewer tensors for backward but gives
    the same outputs, gradients (backward and autograd.grad) and BatchNorm
    statistics, dropouts included."""
    import copy

    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    fast = MODELS.build(dict(cfg, embed_dims=16, num_heads=2,
                             proj_drop=0.1, with_cp=True)).train()
    plain = copy.deepcopy(fast)
    for m in plain.modules():
        if hasattr(m, 'with_cp'):
            m.with_cp = False
    x = torch.randn(2, 16 * 16, 16)
    results = []
    for m in (fast, plain):
        inp = x.clone().requires_grad_()
        torch.manual_seed(1)
        out = m(inp, (16, 16))
        params = [p for p in m.parameters()]
        grads = torch.autograd.grad(out.square().sum(), [inp] + params,
                                    allow_unused=True)
        torch.manual_seed(1)
        m(inp, (16, 16)).square().sum().backward()
        results.append((out, grads, inp.grad, [p.grad for p in params],
                        list(m.buffers())))
    (out_a, grads_a, ig_a, pg_a, buf_a), (out_b, grads_b, ig_b, pg_b,
                                          buf_b) = results
    assert torch.equal(out_a, out_b)
    for a, b in zip(list(grads_a) + [ig_a] + pg_a,
                    list(grads_b) + [ig_b] + pg_b):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)
    for a, b in zip(buf_a, buf_b):
        assert torch.equal(a, b)
