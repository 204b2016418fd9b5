import pytest
import torch
import torch.nn as nn

from lect_mm.blocks import ConvPatchEmbed


@pytest.mark.parametrize('in_hw,k,s,out_hw', [
    ((224, 224), 7, 4, (56, 56)),
    ((56, 56), 3, 2, (28, 28)),
    ((28, 28), 3, 2, (14, 14)),
    ((32, 45), 7, 4, (8, 12)),
    ((15, 9), 3, 2, (8, 5)),
])
def test_output_resolution(in_hw, k, s, out_hw):
    m = ConvPatchEmbed(3, 8, k, s)
    tokens, hw = m(torch.randn(2, 3, *in_hw))
    assert hw == out_hw
    assert tokens.shape == (2, out_hw[0] * out_hw[1], 8)


def test_layout_and_norm():
    torch.manual_seed(0)
    m = ConvPatchEmbed(3, 8, 7, 4)
    assert m.proj.padding == (3, 3) and m.proj.bias is not None
    assert isinstance(m.norm, nn.LayerNorm) and m.norm.eps == 1e-5
    assert set(m.state_dict()) == {
        'proj.weight', 'proj.bias', 'norm.weight', 'norm.bias'}
    x = torch.randn(1, 3, 16, 20)
    tokens, (h, w) = m(x)
    conv = m.proj(x)
    # token n = row-major position (n // w, n % w)
    torch.testing.assert_close(tokens[0, 1 * w + 2], m.norm(conv[0, :, 1, 2]))


def test_no_norm_and_explicit_padding():
    m = ConvPatchEmbed(3, 4, 3, 1, padding=0, norm_cfg=None)
    tokens, hw = m(torch.randn(1, 3, 6, 6))
    assert hw == (4, 4) and isinstance(m.norm, nn.Identity)
