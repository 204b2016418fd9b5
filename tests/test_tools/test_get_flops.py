"""get_flops: attention counted explicitly, and matches a hand count."""
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer

import lect_mm  # noqa: F401
from lect_mm.analysis import EXTRA_HANDLES, analyze
from lect_mm.blocks import LeMSA, MultiheadSelfAttention

REPO = Path(__file__).resolve().parents[2]


class TokenWrapper(nn.Module):
    """Calls a token block with a fixed ``hw_shape`` (tracers take tensors)."""

    def __init__(self, block, hw_shape):
        super().__init__()
        self.block, self.hw_shape = block, hw_shape

    def forward(self, x):
        return self.block(x, self.hw_shape)


def test_lemsa_hand_count():
    # LeCT v1 stage 1: C=64, m=2 (d=32), K=14 on a 56x56 map -> 4x4 pooled.
    C, m, K, H = 64, 2, 14, 56
    N, Nq, d = H * H, (H // K)**2, C // m
    layer = TokenWrapper(LeMSA(C, m, sr_ratio=K), (H, H))
    result = analyze(layer, (N, C))
    ops = result['by_operator']

    assert result['literal_modules'] == 1
    assert layer.block.impl == 'auto'  # restored after counting
    # q kᵀ on the pooled grid + (key-upsampled A) v, per head
    assert ops['matmul'] == m * Nq * Nq * d + m * Nq * N * d
    assert ops['linear'] == 2 * N * C * C  # proj_v, proj
    assert ops['conv'] == 3 * N * C * 9  # conv1, conv2, upsampler DW conv
    # bilinear: 4 per output; logit map (m*Nq -> N keys) + query upsampler
    assert ops['upsample_bilinear2d'] == 4 * m * Nq * N + 4 * C * N
    assert ops['avg_pool2d'] == 2 * C * N


def test_sdpa_handle_equals_literal_count():
    """A fused attention without an impl switch is still counted."""
    N, C, m = 49, 64, 4
    msa = TokenWrapper(MultiheadSelfAttention(C, m), None)
    literal = analyze(msa, (N, C))['by_operator']
    analyzer = FlopAnalyzer(msa.eval(), (torch.randn(1, N, C), ))
    analyzer.set_op_handle(**EXTRA_HANDLES)
    analyzer.unsupported_ops_warnings(False)
    fused = analyzer.by_operator()
    assert fused['scaled_dot_product_attention'] == literal['matmul'] == \
        2 * m * N * N * (C // m)


def test_cli_on_config(load_script, capsys):
    config = REPO / 'configs' / 'lect' / 'lect_v1_cifar10.py'
    tool = load_script('tools/analysis_tools/get_flops.py')
    result = tool.main([str(config), '--shape', '224', '224'])
    out = capsys.readouterr().out
    assert 'Params: 1.1516 M (1,151,562)' in out
    assert "5 module(s) switched to impl='literal'" in out
    assert result['flops'] == pytest.approx(0.650e9, rel=0.01)
