"""CeiT backbone and the CeiT configs (baselines/ceit_{ref,gap}, ceit/ceit_t).

Parameter counts are those of the reference implementations (the LeCT
author's ``CeiT(GAP).py`` and the official ``ceit_tiny_patch16_224``),
counted by instantiating them; ours must equal them exactly.
"""
from pathlib import Path

import pytest
import torch
from mmcv.cnn.bricks import DropPath
from mmengine.config import Config
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401
from lect_mm.blocks import LCAttention, LeMSA, MultiheadSelfAttention
from lect_mm.models.backbones import CeiT

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
PARAMS = {  # leaf prefix: whole classifier with (10, 100) classes
    'baselines/ceit_ref': (1_188_922, 1_199_092),
    'baselines/ceit_gap': (1_111_418, 1_121_588),
    'ceit/ceit_t': (6_165_834, 6_183_204),
}
DATASETS = {'cifar10': (10, 60), 'cifar100': (100, 60), 'stl10': (10, 100)}


def _numel(module):
    return sum(p.numel() for p in module.parameters())


def test_unknown_and_incomplete_arch():
    with pytest.raises(ValueError, match="Unavailable arch 'huge'"):
        CeiT(arch='huge')
    arch = dict(CeiT.arch_zoo['ref'])
    arch.pop('lca_ffn_ratio')
    with pytest.raises(ValueError, match=r"missing \['lca_ffn_ratio'\]"):
        CeiT(arch=arch)
    with pytest.raises(ValueError, match="must be one of \\['lca', 'gap'\\]"):
        CeiT(arch=dict(CeiT.arch_zoo['gap'], pooling='max'))
    with pytest.raises(ValueError, match='Unsupported out_type'):
        CeiT(out_type='cls')


@pytest.mark.parametrize('dataset', sorted(DATASETS))
@pytest.mark.parametrize('prefix', sorted(PARAMS))
def test_config_builds_with_exact_params(prefix, dataset):
    cfg = Config.fromfile(CONFIGS / f'{prefix}_{dataset}.py')
    num_classes, epochs = DATASETS[dataset]
    assert cfg.model.head.num_classes == num_classes
    assert cfg.data_preprocessor.num_classes == num_classes
    assert cfg.train_cfg.max_epochs == epochs
    assert cfg.custom_imports.imports == ['lect_mm']
    model = MODELS.build(cfg.model)
    assert _numel(model) == PARAMS[prefix][num_classes == 100]


def test_reference_counts_by_part():
    """BASELINES: I2T 18,816 + 256, proj 229,488, block 104,944 x 8,
    LCA 76,384 (author's 112->112->112 MLP)."""
    model = CeiT('ref')
    assert _numel(model.i2t) == 18_816 + 256
    assert _numel(model.proj) == 229_488
    assert all(_numel(layer) == 104_944 for layer in model.layers)
    assert _numel(model.lca) == 76_384
    assert model.pos_embed.shape == (1, 197, 112)
    # Official CeiT-T / CeiT-S with a 1000-class head: 6,356,904 / 24.2048M.
    assert _numel(CeiT('tiny')) + 193_000 == 6_356_904
    assert _numel(CeiT('small')) + 385_000 == 24_204_840
    gap = CeiT('gap')
    assert gap.cls_token is None and gap.lca is None
    assert gap.pos_embed.shape == (1, 196, 112)


@pytest.mark.parametrize('prefix',
                         ['baselines/ceit_gap', 'baselines/ceit_ref'])
def test_config_forward_224(prefix):
    torch.manual_seed(0)
    model = MODELS.build(
        Config.fromfile(CONFIGS / f'{prefix}_cifar100.py').model)
    samples = [DataSample().set_gt_label(i) for i in (1, 2)]
    losses = model(torch.randn(2, 3, 224, 224), samples, mode='loss')
    assert torch.isfinite(losses['loss'])


def test_forward_is_the_reference_composition():
    """Stem -> proj -> [cls] + pos -> blocks (emit cls) -> LCA over the
    stacked class tokens + layer pos-embed -> LN (BASELINES §1a)."""
    torch.manual_seed(0)
    model = CeiT('ref', img_size=64, drop_path_rate=0.)
    model.init_weights()
    with torch.no_grad():
        model.pos_layer_embed.normal_(std=0.02)
    model.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        t = model.proj(model.i2t(x)).flatten(2).transpose(1, 2)
        t = torch.cat((model.cls_token.expand(2, -1, -1), t), 1)
        t = t + model.pos_embed
        cls = []
        for layer in model.layers:
            t = layer(t, (4, 4))
            cls.append(t[:, 0])
        stacked = torch.stack(cls, 1) + model.pos_layer_embed
        expected = model.norm(model.lca(stacked)[:, 0])
        out, = model(x)
    torch.testing.assert_close(out, expected)


def test_gap_output_and_featmaps():
    model = CeiT('gap', img_size=64, out_type='featmap',
                 out_indices=(0, -1)).eval()
    with torch.no_grad():
        maps = model(torch.randn(1, 3, 64, 64))
    assert [m.shape for m in maps] == [(1, 112, 4, 4)] * 2
    # Unused head-side modules are not built (DDP).
    assert model.norm is None and model.lca is None
    assert CeiT('ref', out_type='featmap').pos_layer_embed is None
    pooled = CeiT('gap', img_size=64).eval()
    with torch.no_grad():
        out, = pooled(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 112)
    with pytest.raises(ValueError, match="exists only after the last block"):
        CeiT('gap', out_indices=(3, ))
    with pytest.raises(ValueError, match='Invalid out_indices 8'):
        CeiT('ref', out_type='featmap', out_indices=(8, ))


def test_other_input_sizes_resize_pos_embed():
    model = CeiT('ref', img_size=64).eval()
    with torch.no_grad():
        out, = model(torch.randn(1, 3, 96, 48))
    assert out.shape == (1, 112)


def test_drop_path_ramp_and_init():
    model = CeiT('ref', drop_path_rate=0.1)
    rates = [layer.drop_path.drop_prob for layer in model.layers]
    assert rates == pytest.approx([0.1 * i / 7 for i in range(8)])
    assert all(isinstance(layer.drop_path, DropPath) for layer in model.layers)
    assert not any(isinstance(m, DropPath) for m in model.lca.modules())
    before = model.layers[0].attn.qkv.weight.clone()
    model.init_weights()
    after = model.layers[0].attn.qkv.weight
    assert not torch.equal(before, after)
    assert after.std().item() == pytest.approx(0.02, rel=0.15)
    assert torch.count_nonzero(model.pos_embed) > 0
    assert torch.count_nonzero(model.pos_layer_embed) == 0


def test_state_dict_round_trip():
    torch.manual_seed(0)
    a = CeiT('gap', img_size=64)
    a.init_weights()
    b = CeiT('gap', img_size=64)
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(a(x)[0], b(x)[0], rtol=0, atol=0)


def test_attn_cfg_swaps_the_block_attention():
    x = torch.randn(2, 3, 64, 64)
    default = CeiT('ref', img_size=64)
    assert all(
        type(layer.attn) is MultiheadSelfAttention for layer in default.layers)
    # 'gap' has no class token: the blocks' tokens are the 4x4 patch grid,
    # so a grid attention fits.
    gap = CeiT('gap', img_size=64, attn_cfg=dict(type='LeMSA', sr_ratio=2))
    assert all(type(layer.attn) is LeMSA and layer.attn.num_heads == 4
               for layer in gap.layers)
    out, = gap(x)
    assert out.shape == (2, 112)
    out.sum().backward()
    assert gap.layers[0].attn.proj_v.weight.grad is not None
    # With the class token the attention must be token-only; the LCA keeps
    # its own class-token attention.
    ref = CeiT(
        'ref',
        img_size=64,
        attn_cfg=dict(type='MultiheadSelfAttention', impl='literal'))
    assert all(layer.attn.impl == 'literal' for layer in ref.layers)
    assert type(ref.lca.attn) is LCAttention and ref.lca.attn.impl == 'fused'
    assert ref(x)[0].shape == (2, 112)
    with pytest.raises(ValueError, match='does not match the 17 tokens'):
        CeiT('ref', img_size=64, attn_cfg=dict(type='LeMSA', sr_ratio=2))(x)
