"""The contract of all seven backbones (ZooBackbone): one ``frozen_stages``
rule, one layer-wise learning-rate decay, one ``with_cp``.

For each backbone the stem and every stage are named here by their
parameter/module prefixes, independently of the backbone's own
``stem_and_stages``; the tests check exactly which parameters stop taking
gradients and exactly which modules stay in eval mode after ``train()``,
the learning rate mmpretrain's layer-decay constructor gives each
parameter, and that checkpointing changes no value or gradient.
"""
import re

import pytest
import torch
from mmpretrain.engine.optimizers import \
    LearningRateDecayOptimWrapperConstructor
from mmpretrain.registry import MODELS
from torch.nn.modules.batchnorm import _BatchNorm

import lect_mm  # noqa: F401
from lect_mm.models.backbones.base_backbone import ZooBackbone
from lect_mm.models.utils import FROZEN_STAGES_DOC

# name: (tiny config, stem prefixes, per-stage prefixes, frozen by design).
# A prefix ending in '.' names a module, any other a bare parameter.
CASES = {
    'LeCT': (
        dict(type='LeCT',
             arch=dict(embed_dims=[8, 16, 16], depths=[1, 1, 1],
                       num_heads=[1, 1, 2], ffn_ratios=[1, 1, 1],
                       attn_cfgs=[dict(type='LeMSA', sr_ratio=2)] * 3),
             out_indices=(0, 1, 2)),
        ['stages.0.patch_embed.'],
        [['stages.0.'], ['stages.1.'], ['stages.2.']], []),
    'CeiT': (
        dict(type='CeiT',
             arch=dict(i2t_channels=8, embed_dims=16, num_layers=2,
                       num_heads=2, ffn_ratio=1, pooling='lca',
                       lca_ffn_ratio=1),
             img_size=32, patch_size=2),
        ['i2t.', 'proj.', 'cls_token', 'pos_embed', 'drop_after_pos.'],
        [['layers.0.'], ['layers.1.', 'pos_layer_embed', 'lca.', 'norm.']],
        []),
    'CCT': (
        dict(type='CCT',
             arch=dict(num_layers=2, num_heads=2, ffn_ratio=1, embed_dims=16,
                       kernel_size=3, num_conv_layers=1),
             img_size=16),
        ['tokenizer.', 'pos_embed', 'drop_after_pos.'],
        [['layers.0.'], ['layers.1.', 'norm.', 'seq_pool.']], []),
    'ViTAE': (
        dict(type='ViTAE',
             arch=dict(embed_dims=[8, 8, 16], token_dims=[8, 8, 16],
                       downsample_ratios=[4, 2, 2], kernel_sizes=[7, 3, 3],
                       dilations=[[1, 2], [1, 2], [1]],
                       rc_types=['performer', 'performer', 'performer_less'],
                       nc_depths=[0, 1, 1], nc_heads=[1, 1, 2],
                       nc_groups=[1, 1, 8], ffn_ratio=2)),
        ['stages.0.rc.'],
        [['stages.0.'], ['stages.1.'], ['stages.2.']],
        ['stages.0.rc.attn.w', 'stages.1.rc.attn.w']),  # Performer features
    'AlterNet': (
        dict(type='AlterNet',
             arch=dict(depths=(1, 2), msa_depths=(0, 1), num_heads=(1, 1),
                       channels=(8, 16)),
             strides=(1, 2), stem_type='conv3x3', head_dims=4,
             window_size=2, out_indices=(0, 1)),
        ['stem.'], [['layer1.', 'norm0.'], ['layer2.', 'norm1.']], []),
    'NarrowResNet': (
        dict(type='NarrowResNet', arch=dict(depths=(1, 1), widths=(8, 16)),
             strides=(1, 2), stem_type='conv3x3', out_indices=-1),
        ['conv1.', 'bn1.'], [['layer1.'], ['layer2.']], []),
    'FlexibleLeViT': (
        dict(type='FlexibleLeViT',
             arch=dict(embed_dims=[16, 32], num_heads=[2, 2], depths=[1, 1],
                       key_dims=[8, 8]),
             img_size=32),
        ['patch_embed.'], [['stages.0.'], ['stages.1.']], []),
}
NAMES = sorted(CASES)
# An input side each tiny model takes.
INPUT_SIDES = {'LeCT': 32, 'CeiT': 32, 'CCT': 16, 'ViTAE': 32, 'AlterNet': 8,
               'NarrowResNet': 8, 'FlexibleLeViT': 32}


def _build(name, **kwargs):
    return MODELS.build(dict(CASES[name][0], **kwargs))


def _matches(name, prefixes):
    return any(name == p or p.endswith('.') and (name + '.').startswith(p)
               for p in prefixes)


def _num_stages(name):
    return len(CASES[name][2])


@pytest.mark.parametrize('frozen', ['-1', '0', '1', 'last'])
@pytest.mark.parametrize('name', NAMES)
def test_exactly_the_stem_and_first_stages_are_frozen(name, frozen):
    _, stem, stages, by_design = CASES[name]
    k = _num_stages(name) if frozen == 'last' else int(frozen)
    model = _build(name, frozen_stages=k).train()
    prefixes = (stem if k >= 0 else []) + sum(stages[:max(k, 0)], [])

    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    for p in stem + sum(stages, []):  # no prefix names nothing
        assert any(_matches(n, [p]) for n in [*params, *modules]), p
    expected = {n for n in params if _matches(n, prefixes)}
    assert {n for n, p in params.items() if not p.requires_grad} == \
        expected | set(by_design)
    # Eval mode: every module of the frozen parts (norms, dropouts), no
    # other module.
    assert {n for n, m in modules.items() if n and not m.training} == \
        {n for n in modules if n and _matches(n, prefixes)}
    if frozen == 'last':
        assert expected == set(params)  # the whole backbone


@pytest.mark.parametrize('name', NAMES)
def test_out_of_range_and_docstring(name):
    num_stages = _num_stages(name)
    for bad in (num_stages + 1, -2):
        with pytest.raises(ValueError,
                           match=re.escape(f'frozen_stages must be in [-1, '
                                           f'{num_stages}]')):
            _build(name, frozen_stages=bad)
    assert FROZEN_STAGES_DOC in ' '.join(ZooBackbone.__doc__.split())
    assert issubclass(MODELS.get(name), ZooBackbone)
    assert 'Stem and stages' in MODELS.get(name).__doc__


@pytest.mark.parametrize('name', NAMES)
def test_norm_eval_keeps_only_batchnorms_in_eval(name):
    model = _build(name, norm_eval=True).train()
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert bns or name in ('CCT', ), name  # CCT holds no BatchNorm
    assert not any(m.training for m in bns)
    assert all(m.training for m in model.modules()
               if not isinstance(m, _BatchNorm))


@pytest.mark.parametrize('name', NAMES)
def test_layer_decay_groups_fall_from_head_to_stem(name):
    """mmpretrain's constructor, as a config names it: stem depth 0, stage
    i depth i + 1, a head after the backbone the last depth; the rate
    falls by the decay rate at each depth down to the stem."""
    _, stem, stages, by_design = CASES[name]
    model = _build(name)
    constructor = LearningRateDecayOptimWrapperConstructor(
        dict(type='OptimWrapper',
             optimizer=dict(type='AdamW', lr=1., weight_decay=0.05)),
        dict(layer_decay_rate=0.5))
    groups = constructor(model).optimizer.param_groups
    num_layers = len(stages) + 2
    lrs = {g['param_name']: g['lr'] for g in groups}
    assert set(lrs) == {
        n for n, p in model.named_parameters() if p.requires_grad}
    seen = set()
    for depth, prefixes in enumerate([stem] + stages):
        names = {n for n in lrs if _matches(n, prefixes)} - seen
        assert names or depth not in (0, num_layers - 2), prefixes
        assert {lrs[n] for n in names} <= {0.5**(num_layers - 1 - depth)}
        seen |= names
    assert seen == set(lrs)
    assert model.get_layer_depth('head.fc.weight', 'backbone.') == (
        num_layers - 1, num_layers)


@pytest.mark.parametrize('name', NAMES)
def test_with_cp_same_values_and_grads_nothing_recomputed_twice(
        name, same_outputs_and_grads):
    torch.manual_seed(0)
    plain, checkpointed = _build(name), _build(name, with_cp=True)
    side = INPUT_SIDES[name]
    same_outputs_and_grads(plain, checkpointed,
                           torch.randn(2, 3, side, side))


@pytest.mark.parametrize('name', NAMES)
def test_states_its_facts_and_refuses_an_unbatched_image(name):
    """Each backbone names its stage ends and its image convolutions (what
    lect_mm.timm reads), and refuses a (C, H, W) image by name."""
    model = _build(name).eval()
    taps = model.stage_taps()
    assert len(taps) == model.num_stages
    for tap in taps:
        model.get_submodule(tap.module)
    convs = model.first_conv(CASES[name][0].get('arch'))
    for conv in (convs, ) if isinstance(convs, str) else convs:
        assert model.get_submodule(conv).in_channels == 3, conv
    side = INPUT_SIDES[name]
    with pytest.raises(ValueError, match=re.escape(
            f'{name} expected a 4-D (B, C, H, W) input, got a 3-D input of '
            f'shape (3, {side}, {side})')):
        model(torch.zeros(3, side, side))


@pytest.mark.parametrize('name', NAMES + ['LeCT-v1', 'LeCT-v2', 'LeCT-v3'])
def test_empty_batch_gives_empty_outputs_or_a_clear_error(name):
    """A (0, 3, H, W) batch gives outputs of batch 0 with the shapes of a
    one-sample batch, in eval and in train mode, and leaves the running
    statistics as they were; FlexibleLeViT (mmpretrain's LeViT attention
    cannot reshape an empty tensor) refuses it by name."""
    if name.startswith('LeCT-'):
        model, side = MODELS.build(dict(type='LeCT', arch=name[5:])), 224
    else:
        model, side = _build(name), INPUT_SIDES[name]
    empty = torch.zeros(0, 3, side, side)
    if name == 'FlexibleLeViT':
        for mode in (False, True):
            with pytest.raises(ValueError, match=re.escape(
                    'FlexibleLeViT got an empty batch, x of shape '
                    f'(0, 3, {side}, {side})')):
                model.train(mode)(empty)
        return
    with torch.no_grad():
        shapes = [o.shape[1:] for o in model.eval()(torch.ones(
            1, 3, side, side))]
        assert [o.shape for o in model(empty)] == [(0, ) + s for s in shapes]
    stats = {n: b.clone() for n, b in model.named_buffers()
             if b.is_floating_point()}
    outs = model.train()(empty.requires_grad_())
    assert [o.shape for o in outs] == [(0, ) + s for s in shapes]
    sum(o.sum() for o in outs).backward()
    for n, b in model.named_buffers():
        if n in stats:
            assert torch.equal(b, stats[n]), n
