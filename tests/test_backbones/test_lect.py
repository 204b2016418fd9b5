import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmpretrain.registry import MODELS
from torch.nn.modules.batchnorm import _BatchNorm

import lect_mm  # noqa: F401
from lect_mm.blocks import (CeiTLeFF, LeFFN, LeMSA, LeMSAv2,
                            MultiheadSelfAttention, ResizeUpsampler)
from lect_mm.models.backbones import LeCT
from lect_mm.models.backbones.lect import merge_cfg

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / 'tests' / 'reference'))
from lect_reference import ReferenceLeCT  # noqa: E402

# Whole-classifier parameter counts derived by hand from SPEC §1-6 (10 / 100
# classes); e.g. v1 = patch embeds 305,472 + blocks 843,392 + stage norms
# 768 + head 192*n+n. SPEC §6 gives 1.1516/1.1689, 1.0854/1.1028 and
# 1.2142/1.2315 M.
EXPECTED_PARAMS = {
    'v1': (1_151_562, 1_168_932),
    'v2': (1_085_434, 1_102_804),
    'v3': (1_214_169, 1_231_539),
}
SPEC_PARAMS_M = {
    'v1': (1.1516, 1.1689),
    'v2': (1.0854, 1.1028),
    'v3': (1.2142, 1.2315),
}
LECT_CONFIGS = sorted((REPO / 'configs' / 'lect').glob('lect_*.py'))


def _blocks(model):
    return [blk for stage in model.stages for blk in stage.blocks]


def test_unknown_arch():
    with pytest.raises(ValueError, match="Unavailable arch 'v9'"):
        LeCT(arch='v9')


def test_incomplete_custom_arch():
    arch = dict(LeCT.arch_zoo['v1'])
    arch.pop('attn_cfgs')
    with pytest.raises(ValueError, match=r"missing \['attn_cfgs'\]"):
        LeCT(arch=arch)
    arch = dict(LeCT.arch_zoo['v1'], depths=[1, 1])
    with pytest.raises(ValueError, match="arch\\['depths'\\] has length 2"):
        LeCT(arch=arch)


def test_out_indices_shapes():
    model = LeCT('v1', out_indices=(0, 1, -1)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert [o.shape for o in outs] == [(1, 64, 56, 56), (1, 128, 28, 28),
                                       (1, 192, 14, 14)]
    # Non-square input, sizes not divisible by the sr_ratios (SPEC §2).
    model = LeCT('v1', out_indices=(0, 2)).eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, 72, 120))
    assert [o.shape for o in outs] == [(2, 64, 18, 30), (2, 192, 5, 8)]
    with pytest.raises(ValueError, match='Invalid out_indices 3 for 3 stages'):
        LeCT('v1', out_indices=(3, ))


def test_drop_path_ramp():
    model = LeCT('v1', drop_path_rate=0.1)
    rates = [
        getattr(blk.drop_path, 'drop_prob', 0.) for blk in _blocks(model)
    ]
    assert rates == pytest.approx([0., 0.025, 0.05, 0.075, 0.1])
    assert isinstance(_blocks(model)[0].drop_path, nn.Identity)


def test_init_cfg_and_state_dict_round_trip():
    torch.manual_seed(0)
    model = LeCT('v1')
    linear = model.stages[0].blocks[0].attn.proj
    with torch.no_grad():
        linear.bias.fill_(1.)
        model.stages[0].norm.weight.fill_(3.)
    before = linear.weight.clone()
    model.init_weights()
    assert not torch.equal(before, linear.weight)
    assert linear.weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert torch.all(linear.bias == 0)
    assert torch.all(model.stages[0].norm.weight == 1)

    other = LeCT('v1')
    other.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model.eval()(x)[0], other.eval()(x)[0])


def test_with_cp_is_one_switch(same_outputs_and_grads):
    """LeCT's blocks recompute their cheap layers, a swapped-in attention
    without with_cp runs under checkpointing, no block runs twice."""
    torch.manual_seed(0)
    cfg = dict(drop_path_rate=0.,
               attn_cfg=[{}, dict(type='MultiheadSelfAttention'), {}])
    plain, checkpointed = LeCT(**cfg), LeCT(with_cp=True, **cfg)
    assert [(b.with_cp, b.ffn.with_cp) for b in _blocks(checkpointed)] == [
        (True, True)] * 5
    rerun = same_outputs_and_grads(plain, checkpointed,
                                   torch.randn(2, 3, 32, 32))
    assert {'stages.0.blocks.0.attn.conv1', 'stages.1.blocks.0.attn',
            'stages.0.blocks.0.ffn.bn2'} <= rerun
    assert not {'stages.0.blocks.0.attn', 'stages.0.blocks.0.attn.proj_v',
                'stages.0.blocks.0.ffn.conv1'} & rerun
    assert not any(n.split('.')[-2] == 'blocks' for n in rerun)
    with pytest.raises(ValueError, match='attn_cfg sets with_cp; '
                       'checkpointing has one switch'):
        LeCT(attn_cfg=dict(with_cp=True))


@pytest.mark.parametrize('attn_cfg, cls', [
    (dict(type='MultiheadSelfAttention'), MultiheadSelfAttention),
    ([dict(type='LeMSAv2', sr_ratio=sr, h_ratio=0.25) for sr in (14, 7, 2)],
     LeMSAv2),
    (dict(conv_skip=False, qkv_mode='parallel'), LeMSA),
])
def test_attention_swap_from_cfg(attn_cfg, cls):
    model = MODELS.build(dict(type='LeCT', arch='v1', attn_cfg=attn_cfg))
    attns = [blk.attn for blk in _blocks(model)]
    assert all(type(a) is cls for a in attns)
    assert [a.num_heads for a in attns] == [2, 4, 4, 4, 6]
    assert all(a.proj_drop.p == 0.1 for a in attns)
    if cls is LeMSAv2:  # another type replaces v1's LeMSA config
        assert [a.sr_ratio for a in attns] == [14, 7, 7, 7, 2]
        assert attns[0].key_upsample == 'bicubic'  # LeMSAv2's default
    if cls is LeMSA:
        assert not attns[0].conv_skip and attns[0].qkv_mode == 'parallel'
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64))[0].shape == (1, 192, 4, 4)


def test_patch_cfg_swaps_the_patch_embedding_norm():
    default = LeCT('v1')
    assert all(type(s.patch_embed.norm) is nn.LayerNorm
               and s.patch_embed.norm.eps == 1e-5 for s in default.stages)
    # One dict per stage: no norm, the default, another epsilon.
    model = LeCT('v1', patch_cfg=[
        dict(norm_cfg=None), dict(),
        dict(norm_cfg=dict(type='LN', eps=1e-3))])
    norms = [s.patch_embed.norm for s in model.stages]
    assert type(norms[0]) is nn.Identity
    assert type(norms[1]) is nn.LayerNorm and norms[1].eps == 1e-5
    assert type(norms[2]) is nn.LayerNorm and norms[2].eps == 1e-3
    assert (sum(p.numel() for p in default.parameters()) -
            sum(p.numel() for p in model.parameters())) == 2 * 64
    out, = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 192, 2, 2)


def test_ffn_cfg_swaps_the_feed_forward():
    # Arguments merge into each stage's LeFFN ...
    model = LeCT('v1', ffn_cfg=dict(with_bn=False, kernel_size=5))
    ffns = [blk.ffn for blk in _blocks(model)]
    assert all(type(f) is LeFFN for f in ffns)
    assert all(type(f.bn2) is nn.Identity and f.conv2.kernel_size == (5, 5)
               for f in ffns)
    # ... and another type keeps the per-stage ratio and the drop rate.
    model = LeCT('v1', drop_rate=0.2,
                 ffn_cfg=dict(type='CeiTLeFF', num_extra_tokens=0))
    ffns = [blk.ffn for blk in _blocks(model)]
    assert all(type(f) is CeiTLeFF for f in ffns)
    assert [f.hidden_dims for f in ffns] == [128, 384, 384, 384, 768]
    assert all(f.drop.p == 0.2 for f in ffns)
    out, = model(torch.randn(2, 3, 32, 32))
    out.sum().backward()
    assert all(f.conv1.weight.grad is not None for f in ffns)


def test_ffn_cfg_swaps_in_mmcv_ffn():
    # mmcv's FFN takes no hw_shape and adds its own identity by default: the
    # block calls it with the tokens alone and builds it without identity;
    # it gets the stage's width and the drop rate.
    model = LeCT('v1', ffn_cfg=dict(type='FFN', act_cfg=dict(type='GELU')))
    ffns = [blk.ffn for blk in _blocks(model)]
    assert all(type(f) is MODELS.get('FFN') for f in ffns)
    assert [f.feedforward_channels for f in ffns] == [128, 384, 384, 384, 768]
    assert not any(f.add_identity for f in ffns)
    assert all(f.layers[-1].p == 0.1 for f in ffns)
    assert not any(blk.ffn_takes_hw_shape for blk in _blocks(model))
    x = torch.randn(2, 3, 32, 32)
    out, = model(x)
    assert out.shape == (2, 192, 2, 2)
    out.sum().backward()
    assert all(f.layers[0][0].weight.grad is not None for f in ffns)
    # The residual stays the block's: x + DP(ffn(LN(x))), nothing more.
    blk = _blocks(model)[0].eval()
    tokens = torch.randn(2, 64, 64)
    h = tokens + blk.attn(blk.norm1(tokens), (8, 8))
    torch.testing.assert_close(blk(tokens, (8, 8)),
                               h + blk.ffn.layers(blk.norm2(h)))
    with pytest.raises(ValueError, match='add_identity=True would add the '
                       'identity twice'):
        LeCT('v1', ffn_cfg=dict(type='FFN', add_identity=True))


def test_patch_cfg_kernel_stride_padding():
    # A kernel_size / stride given in patch_cfg wins over the arch's.
    model = LeCT('v1', patch_cfg=[dict(kernel_size=3, stride=2),
                                  dict(kernel_size=5), dict(padding=0)])
    projs = [s.patch_embed.proj for s in model.stages]
    assert [p.kernel_size for p in projs] == [(3, 3), (5, 5), (3, 3)]
    assert [p.stride for p in projs] == [(2, 2), (2, 2), (2, 2)]
    assert [p.padding for p in projs] == [(1, 1), (2, 2), (0, 0)]
    out, = model(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 192, 3, 3)  # 32 -> 16 -> 8 -> 3
    # v3 binds its upsampler to the grids these strides give: stage 1 sees
    # 16x16 at img_size 32 (not 8x8), pooled by 14 to 2x2.
    v3 = LeCT('v3', img_size=32, patch_cfg=[dict(stride=2), {}, {}])
    assert v3.stages[0].blocks[0].attn.query_upsampler.in_size == (2, 2)
    assert LeCT('v3', img_size=32).stages[0].blocks[
        0].attn.query_upsampler.in_size == (1, 1)
    # What patch_cfg cannot set raises, naming the key and the accepted ones.
    with pytest.raises(ValueError, match=r"patch_cfg sets \['kernel'\].*"
                       r"accepted keys: \[.*'kernel_size', .*'stride'\]"):
        LeCT('v1', patch_cfg=dict(kernel=5))
    with pytest.raises(ValueError, match=r"patch_cfg sets \['embed_dims'\]"):
        LeCT('v1', patch_cfg=dict(embed_dims=32))


def test_upsampler_swap_and_merge_cfg():
    model = LeCT('v1', attn_cfg=dict(
        query_upsampler=dict(type='ResizeUpsampler')))
    assert isinstance(model.stages[0].blocks[0].attn.query_upsampler,
                      ResizeUpsampler)
    # bilinear + DWConv + BN (9C + 2C per block) is gone
    removed = sum(11 * c * d for c, d in zip([64, 128, 192], [1, 3, 1]))
    assert (sum(p.numel() for p in LeCT('v1').parameters()) -
            sum(p.numel() for p in model.parameters())) == removed

    base = dict(type='LeMSA', sr_ratio=2, query_upsampler=dict(
        type='ResizeDWConvUpsampler', kernel_size=5))
    assert merge_cfg(base, dict(query_upsampler=dict(mode='nearest'))) == \
        dict(type='LeMSA', sr_ratio=2, query_upsampler=dict(
            type='ResizeDWConvUpsampler', kernel_size=5, mode='nearest'))
    assert merge_cfg(base, dict(_delete_=True, type='X')) == dict(type='X')
    with pytest.raises(ValueError, match='list of 3'):
        LeCT('v1', attn_cfg=[dict(), dict()])


@pytest.mark.parametrize('variant', sorted(EXPECTED_PARAMS))
def test_reference_param_counts(variant):
    for num_classes, expected in zip((10, 100), EXPECTED_PARAMS[variant]):
        ref = ReferenceLeCT(variant, num_classes)
        assert sum(p.numel() for p in ref.parameters()) == expected


@pytest.mark.parametrize('config', LECT_CONFIGS, ids=lambda p: p.stem)
def test_config_param_counts(config):
    cfg = Config.fromfile(str(config))
    variant = cfg.model.backbone.arch
    assert cfg.model.head.in_channels == \
        LeCT.arch_zoo[variant]['embed_dims'][-1]
    num_classes = cfg.model.head.num_classes
    assert num_classes == (100 if 'cifar100' in config.stem else 10)
    model = MODELS.build(cfg.model)
    params = sum(p.numel() for p in model.parameters())
    idx = 0 if num_classes == 10 else 1
    assert params == EXPECTED_PARAMS[variant][idx]
    assert abs(params / 1e6 - SPEC_PARAMS_M[variant][idx]) <= \
        0.005 * SPEC_PARAMS_M[variant][idx]
    if 'ablation' in config.stem:
        attn = model.backbone.stages[0].blocks[0].attn
        assert not attn.conv_skip and attn.qkv_mode == 'parallel'


@pytest.mark.parametrize('variant', ['v1', 'v2', 'v3'])
def test_norms_by_one_key(variant):
    """conv_norm_cfg switches every BatchNorm, norm_cfg every LayerNorm;
    keys and parameter counts stay."""
    default = LeCT(variant)
    bns = [n for n, m in default.named_modules() if isinstance(m, _BatchNorm)]
    lns = [n for n, m in default.named_modules()
           if isinstance(m, nn.LayerNorm)]
    assert len(bns) == {'v1': 30, 'v2': 35, 'v3': 25}[variant]
    assert len(lns) == 16
    assert {m.eps for n, m in default.named_modules() if n in lns
            and 'patch_embed' in n} == {1e-5}
    assert {m.eps for n, m in default.named_modules() if n in lns
            and 'patch_embed' not in n} == {1e-6}
    model = LeCT(variant, conv_norm_cfg=dict(type='SyncBN'),
                 norm_cfg=dict(type='LN', eps=1e-3))
    modules = dict(model.named_modules())
    assert [n for n in bns if isinstance(modules[n], nn.SyncBatchNorm)
            ] == bns
    assert {modules[n].eps for n in lns} == {1e-3}
    assert model.state_dict().keys() == default.state_dict().keys()


def test_a_norm_that_cannot_serve_is_refused():
    with pytest.raises(ValueError, match=r"norm_cfg: type='SyncBN' cannot "
                       r"serve as LeCT's LayerNorms .*use conv_norm_cfg\), "
                       r'which normalise \(B, N, C\) tokens'):
        LeCT(norm_cfg=dict(type='SyncBN'))
    with pytest.raises(ValueError, match=r"conv_norm_cfg: type='LN' cannot "
                       r"serve as LeCT's BatchNorms .*use norm_cfg\), which "
                       r'normalise \(B, C, H, W\) maps'):
        LeCT(conv_norm_cfg=dict(type='LN'))


def test_wrong_swaps_fail_at_build_with_the_config_path():
    for attn_cfg, path in ((dict(type='MultiheadAttention'), 'attn_cfg'),
                           ([{}, dict(type='MultiheadAttention'), {}],
                            r'attn_cfg\[1\]')):
        with pytest.raises(TypeError, match=path + r': MultiheadAttention'
                           r'.forward\(query, key=None.*\) takes no '
                           r'hw_shape.*calls attn\(x, hw_shape\)'):
            LeCT(attn_cfg=attn_cfg)
    with pytest.raises(ValueError, match=r'ffn_cfg: CeiTLeFF expects '
                       r'num_extra_tokens=1 \(class\) tokens before the H\*W '
                       'patch tokens'):
        LeCT(ffn_cfg=dict(type='CeiTLeFF'))
    # A key of the arch's LeMSA config never reaches another type.
    with pytest.raises(TypeError, match="missing 1 required positional "
                       "argument: 'sr_ratio'"):
        LeCT(attn_cfg=dict(type='LeMSAv2', h_ratio=0.5))


def test_v3_warns_when_trained_at_another_size():
    model = LeCT('v3', img_size=64).train()
    with pytest.warns(UserWarning, match=r'built for img_size=\(64, 64\) '
                      'but trains on 32x32 inputs'):
        model(torch.randn(1, 3, 32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model(torch.randn(1, 3, 48, 48))  # once
        model(torch.randn(1, 3, 64, 64))  # the size it is built for
        model.eval()(torch.randn(1, 3, 48, 48))  # inference at any size
    # the attention, not LeCT, gave the upsampler its pooled grid
    attn = model.stages[0].blocks[0].attn
    assert attn.input_size == (16, 16)
    assert attn.query_upsampler.in_size == (2, 2)  # ceil(16 / 14)
