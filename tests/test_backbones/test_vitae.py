"""ViTAE backbone and the ViTAE configs (vitae_t, vitae_xs).

ViTAE-T / 6M counts are those of the reference ``ViTAE_basic_Tiny`` /
``ViTAE_basic_6M`` (frozen Performer features included), counted by
instantiating them; ours must equal them exactly.
"""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401
from lect_mm.blocks import LeMSA, MultiheadSelfAttention, TokenPerformer
from lect_mm.models.backbones import ViTAE

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
PARAMS = {  # leaf prefix: whole classifier with (10, 100) classes
    'vitae/vitae_t': (4_632_458, 4_655_588),
    'vitae/vitae_xs': (1_259_466, 1_271_076),
}
DATASETS = {'cifar10': (10, 60), 'cifar100': (100, 60), 'stl10': (10, 100)}


def _numel(module, trainable=False):
    return sum(p.numel() for p in module.parameters()
               if p.requires_grad or not trainable)


def test_unknown_and_incomplete_arch():
    with pytest.raises(ValueError, match="Unavailable arch 'S'"):
        ViTAE(arch='S')
    arch = dict(ViTAE.arch_zoo['tiny'])
    arch.pop('nc_groups')
    with pytest.raises(ValueError, match=r"missing \['nc_groups'\]"):
        ViTAE(arch=arch)
    with pytest.raises(ValueError, match=r"arch\['nc_depths'\] has length "
                       r"2, but arch\['embed_dims'\] has 3"):
        ViTAE(arch=dict(ViTAE.arch_zoo['tiny'], nc_depths=[0, 7]))


@pytest.mark.parametrize('dataset', sorted(DATASETS))
@pytest.mark.parametrize('prefix', sorted(PARAMS))
def test_config_builds_with_exact_params(prefix, dataset):
    cfg = Config.fromfile(CONFIGS / f'{prefix}_{dataset}.py')
    num_classes, epochs = DATASETS[dataset]
    assert cfg.model.head.num_classes == num_classes
    assert cfg.data_preprocessor.num_classes == num_classes
    assert cfg.train_cfg.max_epochs == epochs
    assert cfg.model.neck.type == 'GlobalAveragePooling'
    model = MODELS.build(cfg.model)
    assert _numel(model) == PARAMS[prefix][num_classes == 100]


def test_reference_counts_by_part():
    """BASELINES §7: RC1 178,176 (2,048 frozen), RC2 273,792, RC3 147,712,
    NC 575,744; 6M = T + 3 NCs; trainable T 4,628,362 (10 classes)."""
    model = ViTAE('tiny')
    rcs = [stage.rc for stage in model.stages]
    assert [_numel(rc) for rc in rcs] == [178_176, 273_792, 147_712]
    assert _numel(rcs[0], trainable=True) == 178_176 - 2_048
    assert all(_numel(nc) == 575_744 for nc in model.stages[2].ncs)
    assert _numel(model) + 2_570 == 4_632_458
    assert _numel(model, trainable=True) + 2_570 == 4_628_362
    assert _numel(ViTAE('6M')) - _numel(model) == 3 * 575_744


def test_config_forward_224():
    torch.manual_seed(0)
    model = MODELS.build(
        Config.fromfile(CONFIGS / 'vitae/vitae_xs_cifar100.py').model)
    samples = [DataSample().set_gt_label(i) for i in (1, 2)]
    losses = model(torch.randn(2, 3, 224, 224), samples, mode='loss')
    assert torch.isfinite(losses['loss'])


def test_out_indices_shapes_any_size():
    model = ViTAE('tiny', out_indices=(0, 1, -1)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 64))
    assert [o.shape for o in outs] == [(1, 64, 16, 16), (1, 64, 8, 8),
                                       (1, 256, 4, 4)]
    model = ViTAE('xs', out_indices=(0, 2)).eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, 50, 70))  # non-square, not /16
    assert [o.shape for o in outs] == [(2, 32, 13, 18), (2, 128, 4, 5)]
    with pytest.raises(ValueError, match='Invalid out_indices 3'):
        ViTAE('tiny', out_indices=(3, ))


def test_forward_is_the_reference_composition():
    """RC1 on the image, RC2/RC3 on the token maps, NCs on the last grid;
    the classifier's mean over tokens equals GAP of the last map."""
    torch.manual_seed(0)
    model = ViTAE('xs').eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        t, hw = model.stages[0].rc(x)
        t, hw = model.stages[1].rc(t, hw)
        t, hw = model.stages[2].rc(t, hw)
        for nc in model.stages[2].ncs:
            t = nc(t, hw)
        out, = model(x)
    assert hw == (2, 2)
    torch.testing.assert_close(out.flatten(2).mean(-1), t.mean(1))


def test_drop_path_ramp_and_init():
    model = ViTAE('tiny', drop_path_rate=0.1)
    rates = [nc.drop_path.drop_prob for nc in model.stages[2].ncs]
    assert rates == pytest.approx([0.1 * i / 6 for i in range(7)])
    w = model.stages[0].rc.attn.w.clone()
    before = model.stages[2].ncs[0].attn.qkv.weight.clone()
    model.init_weights()
    after = model.stages[2].ncs[0].attn.qkv.weight
    assert not torch.equal(before, after)
    assert after.std().item() == pytest.approx(0.02, rel=0.15)
    torch.testing.assert_close(model.stages[0].rc.attn.w, w, rtol=0, atol=0)


def test_state_dict_round_trip_keeps_random_features():
    torch.manual_seed(0)
    a = ViTAE('xs')
    torch.manual_seed(1)
    b = ViTAE('xs')
    assert not torch.equal(a.stages[0].rc.attn.w, b.stages[0].rc.attn.w)
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(a(x)[0], b(x)[0], rtol=0, atol=0)


def test_attn_cfg_swaps_the_normal_cell_attention():
    default = ViTAE('xs')
    assert all(type(nc.attn) is MultiheadSelfAttention
               for nc in default.stages[2].ncs)
    # Normal cells see no class token, only the stage's (H, W) grid.
    model = ViTAE('xs', attn_cfg=dict(type='LeMSA', sr_ratio=2))
    assert all(type(nc.attn) is LeMSA and nc.attn.num_heads == 4
               for nc in model.stages[2].ncs)
    assert type(model.stages[0].rc.attn) is TokenPerformer
    out, = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 128, 2, 2)
    out.sum().backward()
    assert model.stages[2].ncs[0].attn.proj_v.weight.grad is not None
