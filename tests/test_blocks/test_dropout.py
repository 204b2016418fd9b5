import pytest
import torch
import torch.nn as nn
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401
from lect_mm.blocks import FastDropout, LeFFN, LeMSA
from lect_mm.blocks.dropout import _MIN_NUMEL

LEVELS = 1 << 15


def test_drop_rate_and_unbiased_scale():
    torch.manual_seed(0)
    x = torch.ones(2_000_000)
    y = FastDropout(0.1)(x)
    dropped = (y == 0).float().mean().item()
    threshold = round(0.1 * LEVELS)
    assert threshold / LEVELS == pytest.approx(0.1, abs=1.6e-5)
    # 2e6 Bernoulli(0.1) draws: standard deviation of the rate is 2.1e-4.
    assert dropped == pytest.approx(0.1, abs=1.5e-3)
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept,
                                                LEVELS / (LEVELS - threshold)))
    # E[y] = x exactly: the scale matches the quantised drop probability.
    assert y.mean().item() == pytest.approx(1.0, abs=5e-3)


def test_neighbouring_draws_are_independent():
    # Neighbouring elements' masks must be independent (P(both dropped) =
    # p**2, P(one) = p), the four of one 64-bit draw included.
    torch.manual_seed(1)
    drop = (FastDropout(0.3)(torch.ones(1_000_000)) == 0).view(-1, 4).float()
    for i in range(4):
        assert drop[:, i].mean().item() == pytest.approx(0.3, abs=4e-3)
        for j in range(i + 1, 4):
            both = (drop[:, i] * drop[:, j]).mean().item()
            assert both == pytest.approx(0.09, abs=3e-3), (i, j)
    # ... and the 15-bit draws are uniform in each quarter of a word.
    from lect_mm.blocks.dropout import _draw_15_bits
    bits = _draw_15_bits(torch.empty(250_000, 4)).float()
    assert bits.min() >= 0 and bits.max() < LEVELS
    for i in range(4):
        assert bits[:, i].mean().item() == pytest.approx(LEVELS / 2,
                                                         rel=5e-3)


@pytest.mark.parametrize('shape', [(40_001, ), (3, 5, 7, 400), (2, 4, 64, 64)])
def test_gradient_is_mask_times_scale(shape):
    torch.manual_seed(2)
    x = torch.randn(shape, dtype=torch.float64).requires_grad_()
    y = FastDropout(0.25)(x)
    keep = y != 0
    scale = LEVELS / (LEVELS - round(0.25 * LEVELS))
    assert torch.allclose(y, torch.where(keep, x * scale, 0.))
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, keep.double() * scale)


def test_mask_follows_memory_layout():
    torch.manual_seed(3)
    x = torch.randn(2, 8, 64, 64).contiguous(
        memory_format=torch.channels_last)
    y = FastDropout(0.5)(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y[y != 0], (x * 2)[y != 0])
    # A non-dense view (every other column, transposed) works too.
    v = torch.randn(512, 200)[:, ::2].t()
    out = FastDropout(0.5)(v)
    assert out.shape == v.shape
    assert torch.equal(out[out != 0], (v * 2)[out != 0])


def test_seeded_runs_repeat_and_bf16():
    x = torch.randn(4, 16, 1024)
    torch.manual_seed(4)
    a = FastDropout(0.1)(x)
    torch.manual_seed(4)
    b = FastDropout(0.1)(x)
    assert torch.equal(a, b)
    assert FastDropout(0.1)(x.bfloat16()).dtype == torch.bfloat16


def test_small_inputs_are_torch_dropout():
    # Below 2**15 elements the extra kernel calls cost more than they save.
    x = torch.randn(64, 64)
    torch.manual_seed(6)
    a = FastDropout(0.1)(x)
    torch.manual_seed(6)
    b = torch.nn.functional.dropout(x, 0.1, True)
    assert torch.equal(a, b)


def test_identity_cases():
    x = torch.randn(300, 400)
    d = FastDropout(0.1).eval()
    assert torch.equal(d(x), x)
    assert torch.equal(FastDropout(0.)(x), x)
    assert torch.equal(FastDropout(1.)(x), torch.zeros_like(x))
    with pytest.raises(ValueError, match='dropout probability'):
        FastDropout(1.5)


def test_is_a_registered_dropout():
    d = MODELS.build(dict(type='FastDropout', p=0.2))
    assert isinstance(d, FastDropout) and isinstance(d, nn.Dropout)
    assert d.p == 0.2 and not dict(d.state_dict())


def test_compiled_uses_torch_dropout():
    # random_ cannot be traced; under torch.compile it is F.dropout, also
    # for inputs large enough for the own mask in eager mode.
    x = torch.ones(2 * _MIN_NUMEL)
    torch.manual_seed(5)
    eager = FastDropout(0.5)(x)
    torch.manual_seed(5)
    torch_dropout = torch.nn.functional.dropout(x, 0.5, True)
    assert not torch.equal(eager, torch_dropout)  # eager: the own mask
    f = torch.compile(FastDropout(0.5), fullgraph=True, backend='eager')
    torch.manual_seed(5)
    assert torch.equal(f(x), torch_dropout)


def test_lect_blocks_use_it():
    ffn = LeFFN(8, 2, ffn_drop=0.1)
    attn = LeMSA(8, 2, sr_ratio=2, proj_drop=0.1)
    assert isinstance(ffn.drop, FastDropout)
    assert isinstance(attn.proj_drop, FastDropout)
