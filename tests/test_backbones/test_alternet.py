"""AlterNet backbone (official alternet.dnn_18) conventions and counts."""
import pytest
import torch

from lect_mm.blocks import AlterNetMSABlock, PreActBasicBlock
from lect_mm.models.backbones import AlterNet

TINY = dict(depths=(2, 2, 2, 2), msa_depths=(0, 1, 1, 1),
            num_heads=(1, 1, 2, 2), channels=(8, 16, 32, 64))


def _numel(module):
    return sum(p.numel() for p in module.parameters())


def test_arch_errors():
    with pytest.raises(ValueError, match="Unavailable arch 'unknown'"):
        AlterNet(arch='unknown')
    with pytest.raises(ValueError, match=r'needs the keys .* missing'):
        AlterNet(arch=dict(depths=(2, 2)))
    with pytest.raises(ValueError, match='at most'):
        AlterNet(arch=dict(depths=(1, ), msa_depths=(1, ), num_heads=(2, ),
                           channels=(8, )), strides=(1, ))
    with pytest.raises(ValueError, match='stem_type'):
        AlterNet(stem_type='patchify')


def test_structure_and_counts():
    """Per-stage counts of BASELINES §5 (official code, stem on)."""
    model = AlterNet()
    assert _numel(model.stem) == 9_408
    assert [_numel(getattr(model, f'layer{i}')) for i in range(1, 5)] == [
        147_968, 443_561, 1_771_689, 7_082_153
    ]
    assert _numel(model.norm3) == 1_024
    kinds = [[type(b) for b in getattr(model, f'layer{i}')]
             for i in range(1, 5)]
    assert kinds[0] == [PreActBasicBlock] * 2
    for stage in kinds[1:]:
        assert stage == [PreActBasicBlock, AlterNetMSABlock]
    assert [model.layer2[1].attn.num_heads, model.layer3[1].attn.num_heads,
            model.layer4[1].attn.num_heads] == [6, 12, 24]
    assert not any('index' in k for k in model.state_dict())


def test_drop_path_ramp():
    model = AlterNet(drop_path_rate=0.7)
    blocks = [b for i in range(1, 5) for b in getattr(model, f'layer{i}')]
    rates = [getattr(b.drop_path, 'drop_prob', 0.) for b in blocks]
    assert rates == pytest.approx([0.7 * j / 7 for j in range(8)])


def test_out_indices_and_sizes():
    model = AlterNet(out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert [o.shape[1:] for o in outs] == [(64, 56, 56), (128, 28, 28),
                                           (256, 14, 14), (512, 7, 7)]
    assert all((o >= 0).all() for o in outs)  # each output is norm + ReLU


def test_wrong_input_size_names_sizes():
    model = AlterNet()
    with pytest.raises(ValueError, match=r'160x224 input gives 20x28 maps'):
        model(torch.randn(1, 3, 160, 224))
    with pytest.raises(ValueError, match='multiples of 224'):
        model.check_input_size((256, 256))
    model.check_input_size((448, 224))


def test_small_inputs_with_small_windows():
    model = AlterNet(arch=TINY, stem_type='conv3x3', window_size=4,
                     head_dims=8, out_indices=-1)
    out = model(torch.randn(2, 3, 32, 32))[0]
    assert out.shape == (2, 64, 4, 4)
    out.mean().backward()


def test_state_dict_round_trip():
    torch.manual_seed(0)
    a = AlterNet(arch=TINY, head_dims=8).eval()
    torch.manual_seed(1)
    b = AlterNet(arch=TINY, head_dims=8).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(a(x), b(x))


def test_literal_and_fused_attention_agree():
    torch.manual_seed(0)
    fused = AlterNet(arch=TINY, stem_type='conv3x3', window_size=4).eval()
    literal = AlterNet(arch=TINY, stem_type='conv3x3', window_size=4,
                       impl='literal').eval()
    literal.load_state_dict(fused.state_dict())
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), literal(x), atol=1e-5,
                                   rtol=1e-4)


def test_out_indices_and_stride_errors():
    with pytest.raises(ValueError, match='Invalid out_indices 4 for 4 stages'):
        AlterNet(out_indices=(4, ))
    with pytest.raises(ValueError, match='strides has length 2, but there '
                       'are 4 stages'):
        AlterNet(strides=(1, 2))
    with pytest.raises(ValueError, match=r"arch\['channels'\] has length "
                       r"2, but arch\['depths'\] has 1"):
        AlterNet(arch=dict(depths=(2, ), msa_depths=(1, ), num_heads=(2, ),
                           channels=(8, 16)), strides=(1, ))
