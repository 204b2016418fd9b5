"""The zoo as timm models (``import lect_mm.timm``, docs/timm.md): the
config's model (parameters, names, init, logits), timm's model API and the
features API, checked against the mmpretrain model of the same config."""
import io
import re

import pytest
import timm
import torch
from mmengine.config import Config
from mmpretrain.registry import MODELS
from timm.models import group_parameters

from lect_mm.model_index import mim_root
from lect_mm.timm import ZOO, model_cfg, takes_img_size
from lect_mm.timm.zoo import register_zoo

# README's table (10 classes)
README_PARAMS = {'lect_v1': 1_151_562, 'lect_v2': 1_085_434,
                 'lect_v3': 1_214_169, 'ceit_gap': 1_111_418,
                 'ceit_ref': 1_188_922, 'cct_2_3x2': 283_723,
                 'alternet18': 9_460_933}


def _side(name):
    return 32 if name.startswith('cct') else 224


def _count(model):
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope='module')
def meta_model():
    """``timm.create_model(name)`` on the meta device, built once per name
    for the tests that only read it (shapes, forward on meta, parameter
    groups)."""
    models = {}

    def get(name):
        if name not in models:
            with torch.device('meta'):
                models[name] = timm.create_model(name)
        return models[name]

    return get


@pytest.mark.parametrize('name', sorted(ZOO))
def test_model_is_the_configs_on_meta(name, meta_model):
    """Names and shapes of every parameter and buffer are those of the
    mmpretrain model of the config (README's counts)."""
    model = meta_model(name)
    with torch.device('meta'):
        ref = MODELS.build(model_cfg(name))
    assert {k: v.shape for k, v in model.state_dict().items()} == \
        {k: v.shape for k, v in ref.state_dict().items()}
    assert _count(model) == _count(ref) == README_PARAMS.get(
        name, _count(ref))
    assert model.num_classes == model.pretrained_cfg['num_classes'] == 10
    torch.save(model, io.BytesIO())  # pickles (no closures kept)


# one model per backbone class (and per kind of pooling of CeiT)
@pytest.mark.parametrize('name', [
    'lect_v1', 'ceit_ref', 'ceit_gap', 'cct_2_3x2', 'alternet18',
    'flexible_levit_64s', 'narrow_resnet_report', 'vitae_xs'
])
def test_stage_maps_are_feature_info_on_meta(name, meta_model):
    """forward_intermediates gives every stage's map with the channels and
    stride feature_info says; the head reads forward_features."""
    model = meta_model(name)
    side = _side(name)
    final, maps = model.forward_intermediates(
        torch.empty(2, 3, side, side, device='meta'))
    assert model.forward_head(final).shape == (2, 10)
    pool = model.pretrained_cfg['pool_size']  # the map forward_head pools
    assert tuple(final.shape[2:]) == (() if pool is None else pool)
    assert len(maps) == len(model.feature_info)
    for m, info in zip(maps, model.feature_info):
        assert m.shape[:2] == (2, info['num_chs'])
        assert m.shape[2] == -(-side // info['reduction'])


@pytest.mark.parametrize('name,side', [('lect_v1', 64), ('ceit_ref', 64),
                                       ('cct_2_3x2', 32),
                                       ('flexible_levit_64s', 224)])
def test_same_seed_same_weights_and_logits(name, side):
    """One implementation: with the same seed, timm.create_model and
    mmpretrain's build + init_weights draw the same weights, and give the
    same logits (GAP + linear, pooled backbone + linear, BN + linear)."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    torch.manual_seed(0)
    ref = MODELS.build(model_cfg(name))
    ref.init_weights()
    ref.eval()
    ours, theirs = model.state_dict(), ref.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    x = torch.randn(2, 3, side, side)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=0, atol=0)


def test_create_model_arguments_reach_the_backbone(capsys):
    model = timm.create_model(
        'lect_v3', num_classes=7, in_chans=1, img_size=64,
        drop_path_rate=0.2, proj_drop_rate=0.05, with_cp=True)
    b = model.backbone
    assert b.img_size == (64, 64) and b.with_cp
    assert b.stages[0].patch_embed.proj.in_channels == 1
    assert b.stages[2].blocks[0].drop_path.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 1, 64, 64)).shape == (2, 7)
    # no mmengine init report per parameter
    assert 'mmengine' not in capsys.readouterr().out
    with pytest.raises(ValueError, match='out_indices'):
        timm.create_model('lect_v1', out_indices=(0, 1))
    with pytest.raises(ValueError, match='no img_size'):
        timm.create_model('alternet18', img_size=448, device='meta')
    with pytest.raises(ValueError, match='in_chans must be 3'):
        timm.create_model('flexible_levit_64s', in_chans=1, device='meta')


@pytest.mark.parametrize('name,config', [
    ('lect_v1', 'lect_v1_fashion_mnist_cpu'),
    ('lect_v3', 'lect_v3_fashion_mnist_cpu112')])
def test_img_size_builds_the_configs_model_at_that_size(name, config):
    """timm's img_size gives LeCT the pooled grids configs/fashion_mnist
    gives it at that size (64: sr_ratio 4, 2, 1; 112: 7, 4, 1): same
    weights from the same seed, same logits."""
    cfg = Config.fromfile(str(mim_root() / 'configs' / 'fashion_mnist' /
                              f'{config}.py')).model.to_dict()
    cfg.pop('data_preprocessor', None)
    side = 112 if config.endswith('112') else 64
    torch.manual_seed(0)
    model = timm.create_model(name, img_size=side).eval()
    torch.manual_seed(0)
    ref = MODELS.build(cfg)
    ref.init_weights()
    ref.eval()
    assert [s.blocks[0].attn.sr_ratio for s in model.backbone.stages] == \
        [c['sr_ratio'] for c in cfg['backbone']['attn_cfg']]
    x = torch.randn(2, 3, side, side)
    with torch.no_grad():
        assert torch.equal(model(x), ref(x))


def test_set_input_size_is_create_model_at_that_size():
    """set_input_size keeps the weights (resampling CCT's position
    embedding as mmpretrain's resize_pos_embed does) and gives the model
    create_model(img_size=...) builds; LeCT v3's kernels refuse."""
    from mmpretrain.models.utils import resize_pos_embed
    torch.manual_seed(0)
    for name, old, new in (('cct_2_3x2', 32, 48), ('lect_v1', 224, 64)):
        model = timm.create_model(name).eval()
        state = model.state_dict()
        model.set_input_size(new)
        built = timm.create_model(name, img_size=new).eval()
        assert model.model_cfg == built.model_cfg
        if name == 'cct_2_3x2':
            state['backbone.pos_embed'] = resize_pos_embed(
                state['backbone.pos_embed'], (old // 4, ) * 2,
                (new // 4, ) * 2, mode='bicubic', num_extra_tokens=0)
        built.load_state_dict(state)
        x = torch.randn(1, 3, new, new)
        with torch.no_grad():
            assert torch.equal(model(x), built(x))
        # recorded as timm's own set_input_size records it
        assert timm.models.get_model_traits(model)['img_size'] == (new, new)
    with pytest.raises(ValueError, match='LeCT keeps no rule to carry'):
        timm.create_model('lect_v3', device='meta').set_input_size(64)


def test_head_api():
    torch.manual_seed(0)
    model = timm.create_model('lect_v1', drop_rate=0.).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        feats = model.forward_features(x)
        assert feats.shape == (2, 192, 4, 4)
        pooled = model.forward_head(feats, pre_logits=True)
        torch.testing.assert_close(pooled, feats.mean((2, 3)))
        torch.testing.assert_close(
            model(x), model.get_classifier()(pooled))
        assert model.num_features == model.head_hidden_size == 192
        model.reset_classifier(0)
        assert model(x).shape == (2, 192)
        model.reset_classifier(5)
        assert model(x).shape == (2, 5)
        model.reset_classifier(0, '')
        assert model(x).shape == (2, 192, 4, 4)
    with pytest.raises(ValueError, match='global_pool'):
        model.reset_classifier(3, 'seq')
    ceit = timm.create_model('ceit_ref', device='meta')
    assert ceit.forward_features(torch.empty(1, 3, 64, 64,
                                             device='meta')).shape == (1, 112)
    assert ceit.no_weight_decay() == {'backbone.cls_token',
                                      'backbone.pos_embed',
                                      'backbone.pos_layer_embed'}


@pytest.mark.parametrize('name,side,pool', [('ceit_gap', 64, 'avg'),
                                            ('cct_2_3x2', 32, 'seq')])
def test_backbone_pooling_is_forward_head(name, side, pool):
    """CeiT with GAP and CCT pool in the backbone: forward_features is the
    map that pooling reads and forward_head pools it as the backbone does
    (forward itself keeps the backbone's output)."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    x = torch.randn(2, 3, side, side)
    with torch.no_grad():
        feats = model.forward_features(x)
        grid = side // model.feature_info[-1]['reduction']
        assert feats.shape == (2, model.num_features, grid, grid)
        torch.testing.assert_close(model.forward_head(feats), model(x))
        pooled = model.backbone(x)[-1]
        torch.testing.assert_close(
            model.forward_head(feats, pre_logits=True), pooled)
        final, _ = model.forward_intermediates(x, indices=[0])
        torch.testing.assert_close(final, feats)
    assert model.head.global_pool == pool
    model.reset_classifier(0, '')
    assert not model.head.training  # the new head follows the model's mode
    assert torch.equal(model(x), feats)


def test_features_only_and_vitae_intermediates():
    torch.manual_seed(0)
    model = timm.create_model('vitae_xs').eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        final, maps = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        nhwc = model.forward_intermediates(
            x, indices=[0], output_fmt='NHWC', intermediates_only=True)
    assert [tuple(m.shape[1:]) for m in maps] == [(32, 16, 16), (32, 8, 8),
                                                  (128, 4, 4)]
    torch.testing.assert_close(nhwc[0], maps[0].permute(0, 2, 3, 1))
    # on the CPU: at 64 x 64 a real forward costs less than one on meta
    for kwargs in ({}, dict(feature_cls='getter', out_indices=(0, 2))):
        features = timm.create_model('lect_v1', features_only=True,
                                     **kwargs).eval()
        with torch.no_grad():
            out = features(x)
        channels = features.feature_info.channels()
        assert [o.shape[1] for o in out] == channels
        assert channels == ([64, 128, 192] if not kwargs else [64, 192])
        assert features.feature_info.reduction() == (
            [4, 8, 16] if not kwargs else [4, 16])


def test_timm_pool_types_on_maps():
    """global_pool takes timm's types where the backbone returns a map
    (SelectAdaptivePool2d before the classifier; catavgmax doubles its
    input); a backbone that pools itself keeps its own pooling."""
    torch.manual_seed(0)
    model = timm.create_model('flexible_levit_64s', global_pool='max').eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        feats = model.forward_features(x)
    avg, top = feats.mean((2, 3)), feats.amax((2, 3))
    for pool, pooled in (('max', top), ('avgmax', (avg + top) / 2),
                         ('catavgmax', torch.cat([avg, top], 1))):
        if pool != 'max':
            model.reset_classifier(10, pool)
        assert model.head.global_pool == pool
        assert model.head_hidden_size == pooled.shape[1]
        assert model.get_classifier().linear.in_features == pooled.shape[1]
        with torch.no_grad():
            torch.testing.assert_close(
                model.forward_head(feats, pre_logits=True), pooled)
            torch.testing.assert_close(model(x),
                                       model.get_classifier()(pooled))
    with pytest.raises(ValueError, match=r"global_pool must be one of "
                       r"\['seq', ''\] for this model, got 'max'"):
        timm.create_model('cct_2_3x2', global_pool='max', device='meta')


def test_an_image_without_batch_or_of_another_size_is_named():
    """One (C, H, W) image, as torch's convolutions would take it, and a
    LeViT at a size it is not built for: errors that name the argument."""
    model = timm.create_model('lect_v1', device='meta')
    with pytest.raises(ValueError, match=re.escape(
            'LeCT expected a 4-D (B, C, H, W) input, got a 3-D input of '
            'shape (3, 64, 64) (one image without its batch dimension')):
        model(torch.empty(3, 64, 64, device='meta'))
    levit = timm.create_model('flexible_levit_64s', device='meta')
    with pytest.raises(ValueError, match=re.escape(
            'FlexibleLeViT is built for img_size=224 (a 14x14 grid after '
            'its stride-16 patch embedding) but got a (4, 4) grid from a '
            '(64, 64) input')):
        levit(torch.empty(1, 3, 64, 64, device='meta'))
    levit = timm.create_model('flexible_levit_64s', img_size=64,
                              device='meta').eval()
    assert levit(torch.empty(1, 3, 64, 64, device='meta')).shape == (1, 10)


# one per backbone with tensors of its own (LeMSAv2's head order, CeiT's
# layer position embedding, CCT's sinusoid, LeViT's bias indices, ViTAE's
# random features)
@pytest.mark.parametrize('name,kwargs', [
    ('lect_v2', {}), ('ceit_ref', {}),
    ('cct_2_3x2', dict(positional_embedding='sine')),
    ('flexible_levit_64s', {}), ('vitae_xs', {})])
def test_meta_build_materialised_is_initialised_as_a_build(name, kwargs):
    """create_model(device='meta'), to_empty(), init_weights(): every
    parameter and buffer has the values of a normal build (constants and
    indices exactly; random tensors the same spread), and the forward is
    finite."""
    torch.manual_seed(0)
    ref = timm.create_model(name, **kwargs).eval()
    model = timm.create_model(name, device='meta', **kwargs)
    model.to_empty(device='cpu')
    with torch.no_grad():  # what to_empty leaves may be anything
        for t in (*model.parameters(), *model.buffers()):
            t.fill_(float('nan') if t.is_floating_point() else -1)
    model.init_weights()
    ours = model.eval().state_dict(keep_vars=True)
    ours.update(dict(model.named_buffers()))  # non-persistent ones too
    theirs = dict(ref.state_dict(keep_vars=True), **dict(
        ref.named_buffers()))
    assert ours.keys() == theirs.keys()
    for k, v in theirs.items():
        w = ours[k].detach()
        v = v.detach()
        if not v.is_floating_point() or (v == v.flatten()[0]).all():
            assert torch.equal(w, v), k
        elif v.numel() >= 256:
            assert 0.7 < w.std() / v.std() < 1.4, k
        assert torch.isfinite(w.float()).all(), k
    side = {'cct_2_3x2': 32, 'flexible_levit_64s': 224}.get(name, 64)
    with torch.no_grad():
        assert torch.isfinite(model(torch.randn(2, 3, side, side))).all()


def test_grad_checkpointing_is_with_cp():
    with torch.device('meta'):
        model = timm.create_model('lect_v1')
        built = timm.create_model('lect_v1', with_cp=True)

    def flags(m):
        return {n: s.with_cp for n, s in m.named_modules()
                if isinstance(getattr(s, 'with_cp', None), bool)}

    assert not any(flags(model).values())
    model.set_grad_checkpointing(True)
    assert flags(model) == flags(built) and all(flags(model).values())
    model.set_grad_checkpointing(False)
    assert not any(flags(model).values())


@pytest.mark.parametrize('name', ['lect_v1', 'ceit_ref', 'vitae_xs'])
def test_layer_decay_follows_get_layer_depth(name, meta_model):
    """timm's layer-wise lr decay groups the parameters as the backbone's
    get_layer_depth does for mmpretrain (stem, stages, head; timm numbers
    only the non-empty groups)."""
    model = meta_model(name)
    layer = group_parameters(model, model.group_matcher(), reverse=True)
    depth = {n: model.backbone.get_layer_depth(n, 'backbone.')[0]
             for n, _ in model.named_parameters()}
    rank = {d: i for i, d in enumerate(sorted(set(depth.values())))}
    assert {n: layer[n] for n in depth} == {n: rank[depth[n]] for n in depth}
    assert layer['head.fc.weight'] == max(rank.values())
    from timm.optim import create_optimizer_v2
    opt = create_optimizer_v2(
        model, 'adamw', lr=1e-3, weight_decay=0.05, layer_decay=0.5)
    scales = sorted({g['lr_scale'] for g in opt.param_groups})
    assert len(scales) == len(rank) and scales[-1] == 1.0


def test_data_config_is_the_configs_preprocessing():
    """resolve_data_config + create_transform: resize to 224 (no crop),
    CIFAR-10 mean/std, as configs/_base_/datasets/cifar10.py."""
    import numpy as np
    from mmcv.image import imresize
    from PIL import Image
    from timm.data import create_transform, resolve_data_config
    model = timm.create_model('lect_v1', device='meta')
    cfg = resolve_data_config(model=model)
    assert cfg['input_size'] == (3, 224, 224) and cfg['crop_pct'] == 1.0
    assert cfg['mean'] == (0.4914, 0.4822, 0.4465)
    img = np.random.default_rng(0).integers(0, 256, (32, 32, 3), np.uint8)
    x = create_transform(**cfg)(Image.fromarray(img))
    mean = np.array([125.307, 122.961, 113.8575])
    std = np.array([51.5865, 50.847, 51.255])
    ref = (imresize(img, (224, 224)).astype(np.float64) - mean) / std
    ref = torch.from_numpy(ref).permute(2, 0, 1).float()
    assert x.shape == ref.shape
    assert (x - ref).abs().mean() < 0.02  # PIL vs cv2 bilinear rounding
    cct = resolve_data_config(
        model=timm.create_model('cct_2_3x2', device='meta'))
    assert cct['input_size'] == (3, 32, 32)
    assert takes_img_size('cct_2_3x2') and not takes_img_size('alternet18')


def test_registering_never_replaces_a_timm_model(monkeypatch):
    assert set(ZOO) <= set(timm.list_models())
    for name in ZOO:
        assert timm.models.model_entrypoint(name).__module__ == \
            'lect_mm.timm.zoo'
    resnet18 = timm.models.model_entrypoint('resnet18')
    monkeypatch.setitem(ZOO, 'resnet18', ZOO['lect_v1'])
    with pytest.raises(RuntimeError, match=r"\['resnet18'\]"):
        register_zoo()
    assert timm.models.model_entrypoint('resnet18') is resnet18
    monkeypatch.delitem(ZOO, 'resnet18')
    register_zoo()  # the zoo's own names again: nothing to do
