"""lect_mm.blocks.recompute: the recomputation the blocks use in training."""
import copy

import pytest
import torch
import torch.nn as nn

from lect_mm.blocks import LeFFN, LeMSA
from lect_mm.blocks.recompute import recompute, recompute_active


def test_same_gradients_and_double_backward_raises():
    conv = nn.Conv2d(4, 4, 3, padding=1)
    x = torch.randn(2, 4, 8, 8, requires_grad=True)

    def fn(inp):
        return torch.nn.functional.gelu(conv(inp)).sin()

    out = recompute(fn, x, module=conv)
    grads = torch.autograd.grad(out.sum(), [x, conv.weight, conv.bias])
    ref = torch.autograd.grad(fn(x).sum(),
                              [x, conv.weight, conv.bias])
    for a, b in zip(grads, ref):
        assert torch.equal(a, b)
    out = recompute(fn, x, module=conv)
    (gx, ) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


def test_norm_eval_keeps_running_statistics():
    # BN in eval mode inside a training LeFFN (norm_eval): both runs use
    # the running statistics, as without recomputation.
    torch.manual_seed(0)
    fast = LeFFN(8, 2).train()
    for m in fast.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
            m.running_mean.uniform_()
    plain = copy.deepcopy(fast)
    plain.recompute = False
    x = torch.randn(2, 16, 8)
    grads = []
    for m in (fast, plain):
        inp = x.clone().requires_grad_()
        m(inp, (4, 4)).square().sum().backward()
        grads.append(inp.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_not_with_other_batch_norms():
    layer = LeMSA(8, 2, sr_ratio=2, recompute=True).train()
    with torch.enable_grad():
        assert recompute_active(layer)
        layer.conv1[1] = nn.SyncBatchNorm(8)
        assert not recompute_active(layer)
        layer.recompute = False
        assert not recompute_active(layer)


@pytest.mark.parametrize('cfg', [
    dict(type='LeMSA', embed_dims=16, num_heads=2, sr_ratio=2),
    dict(type='LeMSAv2', embed_dims=16, num_heads=2, sr_ratio=2,
         h_ratio=0.5),
    dict(type='LeFFN', embed_dims=16, ffn_ratio=2),
])
def test_recompute_is_a_config_switch(cfg):
    from mmpretrain.registry import MODELS

    from lect_mm.analysis import training_footprint

    class Tokens(nn.Module):
        """(B, 16, 8, 8) map -> the block on its tokens -> logits."""

        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x):
            tokens = x.flatten(2).transpose(1, 2)
            return self.block(tokens, (8, 8)).mean(1)

    saved = {}
    for flag in (True, False):
        torch.manual_seed(0)
        block = MODELS.build(dict(cfg, recompute=flag))
        assert block.recompute is flag
        saved[flag] = training_footprint(Tokens(block), (16, 8, 8),
                                         batch_size=2)['saved_bytes']
    assert saved[True] < saved[False]
