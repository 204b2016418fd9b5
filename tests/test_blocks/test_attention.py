import pytest
import torch
import torch.nn.functional as F

from lect_mm.blocks import MultiheadSelfAttention


def _manual_msa(m, x):
    """Textbook MSA with qkv channels laid out as (3, heads, d)."""
    B, N, C = x.shape
    heads = m.num_heads
    d = C // heads
    qkv = F.linear(x, m.qkv.weight, m.qkv.bias).reshape(B, N, 3, heads, d)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    attn = torch.softmax(q @ k.transpose(-2, -1) * m.scale, dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(B, N, C)
    return F.linear(out, m.proj.weight, m.proj.bias)


@pytest.mark.parametrize('impl', ['fused', 'literal'])
@pytest.mark.parametrize('qkv_bias', [False, True])
def test_matches_textbook_msa(impl, qkv_bias):
    torch.manual_seed(0)
    m = MultiheadSelfAttention(16, 4, qkv_bias=qkv_bias, impl=impl).eval()
    x = torch.randn(2, 15, 16)
    y = m(x, (3, 5))
    assert y.shape == x.shape
    torch.testing.assert_close(y, _manual_msa(m, x), rtol=1e-5, atol=1e-5)
    assert (m.qkv.bias is not None) == qkv_bias


def test_fused_equals_literal_values_and_grads():
    torch.manual_seed(0)
    fused = MultiheadSelfAttention(16, 2)
    literal = MultiheadSelfAttention(16, 2, impl='literal')
    literal.load_state_dict(fused.state_dict())
    x = torch.randn(2, 12, 16)
    weight = torch.randn(x.shape)
    results = []
    for m in (fused, literal):
        xi = x.clone().requires_grad_()
        y = m(xi, (3, 4))
        (y * weight).sum().backward()
        results.append([y, xi.grad] + [p.grad for p in m.parameters()])
    for got, ref in zip(*results):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_qk_scale_and_default_scale():
    assert MultiheadSelfAttention(16, 4).scale == 4**-0.5
    assert MultiheadSelfAttention(16, 4, qk_scale=0.1).scale == 0.1


def test_hw_shape_is_optional():
    m = MultiheadSelfAttention(8, 2)
    assert m(torch.randn(1, 7, 8)).shape == (1, 7, 8)


def test_attn_map_opt_in():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    maps = []
    for impl in ('fused', 'literal'):
        torch.manual_seed(0)
        m = MultiheadSelfAttention(8, 2, impl=impl)
        m(x)
        assert m.attn_map is None
        m.return_attn_map = True
        m(x)
        assert m.attn_map.shape == (2, 2, 6, 6)
        maps.append(m.attn_map)
    torch.testing.assert_close(maps[0], maps[1])


@pytest.mark.parametrize('kwargs,match', [
    (dict(embed_dims=10, num_heads=4), r'embed_dims \(10\).*num_heads \(4\)'),
    (dict(embed_dims=8, num_heads=2, impl='xformers'),
     r"impl 'xformers'.*'fused', 'literal'"),
])
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiheadSelfAttention(**kwargs)
