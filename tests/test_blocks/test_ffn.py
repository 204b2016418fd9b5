import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lect_mm.blocks import LeFFN


def test_parameter_count_lect_stage1():
    m = LeFFN(64, 2)
    expected = (
        64 * 128 + 128  # conv1: Conv1x1(64 -> 128) with bias
        + 2 * 128  # bn1
        + 128 * 9 + 128  # conv2: DWConv3x3(128) with bias
        + 2 * 128  # bn2
        + 128 * 64 + 64  # conv3: Conv1x1(128 -> 64) with bias
        + 2 * 64)  # bn3
    assert sum(p.numel() for p in m.parameters()) == expected == 18496


def test_reference_keys():
    keys = set(LeFFN(8, 3).state_dict())
    for i in (1, 2, 3):
        assert {f'conv{i}.weight', f'conv{i}.bias', f'bn{i}.weight',
                f'bn{i}.running_var'} <= keys


@pytest.mark.parametrize('with_bn', [True, False])
def test_matches_spec_sequence(with_bn):
    torch.manual_seed(0)
    m = LeFFN(8, 2, with_bn=with_bn).eval()
    x = torch.randn(2, 5 * 7, 8)
    x_map = x.transpose(1, 2).reshape(2, 8, 5, 7)

    def bn(t, layer):
        if not with_bn:
            return t
        return F.batch_norm(t, layer.running_mean, layer.running_var,
                            layer.weight, layer.bias, eps=layer.eps)

    t = F.gelu(bn(F.conv2d(x_map, m.conv1.weight, m.conv1.bias), m.bn1))
    t = F.gelu(bn(F.conv2d(t, m.conv2.weight, m.conv2.bias, padding=1,
                           groups=16), m.bn2))
    t = bn(F.conv2d(t, m.conv3.weight, m.conv3.bias), m.bn3)
    torch.testing.assert_close(
        m(x, (5, 7)), t.flatten(2).transpose(1, 2), rtol=1e-5, atol=1e-6)
    if not with_bn:
        assert all(isinstance(getattr(m, f'bn{i}'), nn.Identity)
                   for i in (1, 2, 3))


def test_dropout_in_training_only():
    m = LeFFN(8, 2, ffn_drop=0.5)
    x = torch.randn(2, 16, 8)
    m.eval()
    torch.testing.assert_close(m(x, (4, 4)), m(x, (4, 4)))
    m.train()
    torch.manual_seed(0)
    y = m(x, (4, 4))
    torch.manual_seed(1)
    assert not torch.allclose(y, m(x, (4, 4)))


def test_float_ratio_and_error():
    assert LeFFN(8, 1.5).hidden_dims == 12
    with pytest.raises(ValueError, match='ffn_ratio'):
        LeFFN(8, 0.1)


def test_hw_shape_must_match_tokens():
    with pytest.raises(ValueError, match=r'hw_shape \(3, 3\).*8 tokens'):
        LeFFN(4, 2)(torch.randn(1, 8, 4), (3, 3))


def test_with_cp_gives_the_same_step():
    """with_cp=True keeps fewer tensors for backward but gives
    the same outputs, gradients and BatchNorm statistics, dropout included."""
    torch.manual_seed(0)
    fast = LeFFN(16, 2, ffn_drop=0.1, with_cp=True).train()
    plain = copy.deepcopy(fast)
    plain.with_cp = False
    x = torch.randn(2, 16 * 16, 16)
    outs, grads = [], []
    for m in (fast, plain):
        inp = x.clone().requires_grad_()
        torch.manual_seed(1)
        out = m(inp, (16, 16))
        out.square().sum().backward()
        outs.append(out)
        grads.append([inp.grad] + [p.grad for p in m.parameters()])
    assert torch.equal(outs[0], outs[1])
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    for (name, a), (_, b) in zip(fast.named_buffers(), plain.named_buffers()):
        assert torch.equal(a, b), name
    assert int(fast.bn1.num_batches_tracked) == 1


def test_with_cp_saves_less():
    from lect_mm.analysis.footprint import training_footprint

    class Head(torch.nn.Module):

        def __init__(self, ffn):
            super().__init__()
            self.ffn = ffn

        def forward(self, x):
            return self.ffn(x, (16, 16)).mean(1)

    torch.manual_seed(0)
    fast = LeFFN(16, 2, ffn_drop=0.1, with_cp=True)
    plain = copy.deepcopy(fast)
    plain.with_cp = False
    saved = [
        training_footprint(Head(m), (256, 16), 2, num_classes=16)
        ['saved_bytes'] for m in (fast, plain)
    ]
    assert saved[0] < 0.5 * saved[1]
