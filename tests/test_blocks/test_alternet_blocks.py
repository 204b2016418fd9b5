"""AlterNet blocks: windowed MSA with a head-shared bias, pre-act blocks."""
import pytest
import torch
import torch.nn.functional as F

from mmpretrain.registry import MODELS

from lect_mm.blocks import (AlterNetMSABlock, PreActBasicBlock,
                            WindowAttention2d)


def _numel(module):
    return sum(p.numel() for p in module.parameters())


def test_registered():
    for name in ('WindowAttention2d', 'PreActBasicBlock', 'AlterNetMSABlock'):
        assert MODELS.get(name) is not None


def test_relative_position_bias_formula():
    """bias[a, b] = table[x_b - x_a + w - 1, y_b - y_a + w - 1]."""
    w = 3
    attn = WindowAttention2d(8, num_heads=2, head_dims=4, window_size=w)
    table = attn.relative_position_bias_table
    assert table.shape == (2 * w - 1, 2 * w - 1)
    bias = attn.relative_position_bias()
    coords = [(x, y) for x in range(w) for y in range(w)]
    for a, (xa, ya) in enumerate(coords):
        for b, (xb, yb) in enumerate(coords):
            assert bias[a, b] == table[xb - xa + w - 1, yb - ya + w - 1]


def test_index_is_non_persistent_buffer():
    attn = WindowAttention2d(8, num_heads=2, head_dims=4, window_size=7)
    assert 'relative_position_index' in dict(attn.named_buffers())
    assert 'relative_position_index' not in attn.state_dict()
    assert 'relative_position_bias_table' in attn.state_dict()


def _naive_window_attention(attn, x):
    """Window by window, heads sharing the bias, k before v in ``kv``."""
    b, _, h, w = x.shape
    p, nh, d = attn.window_size, attn.num_heads, attn.head_dims
    bias = attn.relative_position_bias()
    out = torch.zeros(b, nh * d, h, w)
    for i in range(0, h, p):
        for j in range(0, w, p):
            win = x[:, :, i:i + p, j:j + p]
            q = attn.q(win).flatten(2).view(b, nh, d, p * p).transpose(2, 3)
            kv = attn.kv(win).flatten(2)
            k = kv[:, :nh * d].view(b, nh, d, p * p).transpose(2, 3)
            v = kv[:, nh * d:].view(b, nh, d, p * p).transpose(2, 3)
            logits = q @ k.transpose(2, 3) / d**0.5 + bias
            o = logits.softmax(-1) @ v  # (b, nh, p*p, d)
            out[:, :, i:i + p, j:j + p] = o.transpose(2, 3).reshape(
                b, nh * d, p, p)
    return attn.proj(out)


@pytest.mark.parametrize('impl', ['fused', 'literal'])
def test_window_attention_matches_naive(impl):
    torch.manual_seed(0)
    attn = WindowAttention2d(
        6, 10, num_heads=2, head_dims=4, window_size=3, impl=impl).eval()
    with torch.no_grad():
        attn.relative_position_bias_table.normal_()
        x = torch.randn(2, 6, 6, 9)
        out = attn(x)
        ref = _naive_window_attention(attn, x)
    assert out.shape == (2, 10, 6, 9)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_window_attention_errors():
    with pytest.raises(ValueError, match='impl'):
        WindowAttention2d(8, impl='flash')
    attn = WindowAttention2d(8, num_heads=1, head_dims=4, window_size=7)
    with pytest.raises(ValueError, match='multiples of window_size=7'):
        attn(torch.randn(1, 8, 8, 14))


def test_msa_block_matches_reference_count_and_order():
    # AlterNet-18 stage 2 MSA block: 128 channels, 6 heads of 64 (BASELINES).
    block = AlterNetMSABlock(128, num_heads=6, head_dims=64)
    assert _numel(block) == 213_801
    assert block.shortcut is None
    assert isinstance(block.act, torch.nn.GELU)
    torch.manual_seed(0)
    block.eval()
    x = torch.randn(1, 128, 7, 7)
    with torch.no_grad():
        y = x + block.attn(block.norm2(block.conv(
            F.gelu(block.norm1(x)))))
        torch.testing.assert_close(block(x), y)


def test_preact_block_shortcut_reads_activated_input():
    torch.manual_seed(0)
    block = PreActBasicBlock(8, 16, stride=2).eval()
    assert block.shortcut.bias is None
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        a = F.relu(block.norm1(x))
        y = block.shortcut(a) + block.conv2(
            F.relu(block.norm2(block.conv1(a))))
        torch.testing.assert_close(block(x), y)
    identity = PreActBasicBlock(8, 8).eval()
    assert identity.shortcut is None
    with torch.no_grad():
        a = F.relu(identity.norm1(x))
        y = x + identity.conv2(F.relu(identity.norm2(identity.conv1(a))))
        torch.testing.assert_close(identity(x), y)


def test_blocks_backward_and_checkpoint():
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    for block in (PreActBasicBlock(8, 8, with_cp=True),
                  AlterNetMSABlock(8, num_heads=2, head_dims=4, window_size=2,
                                   drop_path_rate=0.1, with_cp=True)):
        block(x).sum().backward()
        assert all(p.grad is not None for p in block.parameters())
