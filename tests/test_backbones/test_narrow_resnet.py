"""NarrowResNet: mmpretrain's BasicBlock ResNet with listed widths."""
import pytest
import torch
from mmpretrain.models.backbones import ResNet

from lect_mm.models.backbones import NarrowResNet


def _numel(module):
    return sum(p.numel() for p in module.parameters())


def test_arch_errors():
    with pytest.raises(ValueError, match="Unavailable arch 'unknown'"):
        NarrowResNet(arch='unknown')
    with pytest.raises(ValueError, match=r'needs the keys .* missing'):
        NarrowResNet(arch=dict(depths=(2, 2)))
    with pytest.raises(ValueError, match='strides has length 4, but there '
                       'are 2 stages'):
        NarrowResNet(arch=dict(depths=(2, 2), widths=(8, 16)))
    with pytest.raises(ValueError, match='stem_type'):
        NarrowResNet(stem_type='deep')


def test_report_counts():
    """The author's ResNet.py per-stage counts (BASELINES §2)."""
    model = NarrowResNet()
    stem = _numel(model.conv1) + _numel(model.norm1)
    assert stem == 4_768
    assert [_numel(getattr(model, f'layer{i}')) for i in range(1, 5)] == [
        37_120, 131_712, 311_232, 566_528
    ]
    assert model.layer1[0].downsample is None  # 32 -> 32, stride 1
    assert model.layer3[0].downsample is not None


def test_arch_18_equals_mmpretrain_resnet18():
    torch.manual_seed(0)
    ref = ResNet(depth=18, out_indices=(0, 1, 2, 3))
    ours = NarrowResNet(arch='18', out_indices=(0, 1, 2, 3))
    ref.eval()
    ours.eval()
    assert set(ref.state_dict()) == set(ours.state_dict())
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(ref(x), ours(x)):
            torch.testing.assert_close(a, b)


def test_out_indices_shapes():
    model = NarrowResNet(out_indices=(0, 1, 2, -1)).eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, 64, 64))
    assert [o.shape[1:] for o in outs] == [(32, 16, 16), (64, 8, 8),
                                           (96, 4, 4), (128, 2, 2)]
    cifar = NarrowResNet(stem_type='conv3x3')
    assert cifar(torch.randn(1, 3, 32, 32))[0].shape == (1, 128, 4, 4)


def test_drop_path_ramp():
    model = NarrowResNet(drop_path_rate=0.7)
    blocks = [b for i in range(1, 5) for b in getattr(model, f'layer{i}')]
    rates = [getattr(b.drop_path, 'drop_prob', 0.) for b in blocks]
    assert rates == pytest.approx([0.7 * j / 7 for j in range(8)])
    assert isinstance(NarrowResNet().layer4[1].drop_path, torch.nn.Identity)


def test_init_cfg_changes_weights_and_round_trip():
    torch.manual_seed(0)
    model = NarrowResNet(init_cfg=dict(type='Constant', val=0.5,
                                       layer='Conv2d'))
    before = model.conv1.weight.clone()
    model.init_weights()
    assert not torch.equal(before, model.conv1.weight)
    assert torch.all(model.conv1.weight == 0.5)
    other = NarrowResNet()
    other.load_state_dict(model.state_dict())
    model.eval()
    other.eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), other(x))
    model.train()
    model(torch.randn(2, 3, 32, 32))[0].mean().backward()
