"""CCT backbone and the CCT configs (32x32, no resize to 224).

Counts are those of the reference ``cct_*`` models (SHI-Labs
Compact-Transformers), counted by instantiating them; ours must equal them.
"""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401
from lect_mm.blocks import LeMSA, MultiheadSelfAttention
from lect_mm.models.backbones import CCT

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
PARAMS = {  # leaf prefix: whole classifier with (10, 100) classes
    'cct/cct_7_3x1': (3_760_139, 3_783_269),
    'cct/cct_2_3x2': (283_723, 295_333),
}
DATASETS = {'cifar10': 10, 'cifar100': 100}


def _classifier(arch, num_classes=10, **kwargs):
    dims = CCT.arch_zoo[arch]['embed_dims']
    return MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(type='CCT', arch=arch, **kwargs),
            head=dict(
                type='LinearClsHead',
                num_classes=num_classes,
                in_channels=dims)))


def _numel(module, trainable=False):
    return sum(p.numel() for p in module.parameters()
               if p.requires_grad or not trainable)


def test_unknown_and_incomplete_arch():
    with pytest.raises(ValueError, match="Unavailable arch '9_9x9'"):
        CCT(arch='9_9x9')
    arch = dict(CCT.arch_zoo['7_3x1'])
    arch.pop('num_conv_layers')
    with pytest.raises(ValueError, match=r"missing \['num_conv_layers'\]"):
        CCT(arch=arch)
    with pytest.raises(ValueError, match='positional_embedding must be one'):
        CCT(positional_embedding='rope')


@pytest.mark.parametrize('dataset', sorted(DATASETS))
@pytest.mark.parametrize('prefix', sorted(PARAMS))
def test_config_builds_with_exact_params_and_no_resize(prefix, dataset):
    cfg = Config.fromfile(CONFIGS / f'{prefix}_{dataset}.py')
    num_classes = DATASETS[dataset]
    assert cfg.model.head.num_classes == num_classes
    assert cfg.data_preprocessor.num_classes == num_classes
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        types = [t['type'] for t in cfg[loader].dataset.pipeline]
        assert 'Resize' not in types and types[-1] == 'PackInputs'
    assert [t['type'] for t in cfg.train_dataloader.dataset.pipeline
            ][:3] == ['RandomCrop', 'RandomFlip', 'RandAugment']
    model = MODELS.build(cfg.model)
    assert _numel(model) == PARAMS[prefix][num_classes == 100]


@pytest.mark.parametrize('arch, params', [('7_7x2', (4_550_091, 4_573_221)),
                                          ('6_3x1', (3_233_803, 3_256_933))])
def test_other_arches_exact_params(arch, params):
    assert _numel(_classifier(arch)) == params[0]
    assert _numel(_classifier(arch, 100)) == params[1]


def test_breakdown_and_sine():
    """BASELINES §6: conv 6,912; PE 65,536; SeqPool 257; layer 526,336."""
    model = CCT('7_3x1')
    assert _numel(model.tokenizer) == 6_912
    assert model.pos_embed.numel() == 65_536
    assert _numel(model.seq_pool) == 257
    assert all(_numel(layer) == 526_336 for layer in model.layers)
    sine = _classifier('7_3x1', positional_embedding='sine')
    assert _numel(sine) == 3_760_139
    assert _numel(sine, trainable=True) == 3_694_603
    table = sine.backbone.pos_embed[0]
    torch.testing.assert_close(table[3, 0], torch.sin(torch.tensor(3.)))
    torch.testing.assert_close(table[3, 1], torch.cos(torch.tensor(3.)))
    assert CCT('7_3x1', positional_embedding='none').pos_embed is None
    # Bit-identical to the reference's table: angles p / 10000^(2(i//2)/d)
    # rounded to float32, then sin on even and cos on odd channels.
    n, d = 64, 128
    angles = torch.tensor([[p / 10000**(2 * (i // 2) / d) for i in range(d)]
                           for p in range(n)])
    angles[:, 0::2] = angles[:, 0::2].sin()
    angles[:, 1::2] = angles[:, 1::2].cos()
    table = CCT('2_3x2', positional_embedding='sine').pos_embed[0]
    torch.testing.assert_close(table, angles, rtol=0, atol=0)


def test_config_forward_32():
    torch.manual_seed(0)
    model = MODELS.build(
        Config.fromfile(CONFIGS / 'cct/cct_7_3x1_cifar100.py').model)
    samples = [DataSample().set_gt_label(i) for i in (1, 2)]
    losses = model(torch.randn(2, 3, 32, 32), samples, mode='loss')
    assert torch.isfinite(losses['loss'])


def test_wrong_input_size_error():
    model = CCT('7_3x1').eval()
    with pytest.raises(ValueError, match=r'built for img_size=32 \(16x16 '
                       r'tokens\) but got a 224x224 input'):
        model(torch.randn(1, 3, 224, 224))
    free = CCT('2_3x2', positional_embedding='none').eval()
    with torch.no_grad():
        assert free(torch.randn(1, 3, 40, 24))[0].shape == (1, 128)
    assert CCT('2_3x2', img_size=64).pos_embed.shape == (1, 256, 128)


def test_forward_is_the_reference_composition():
    """Tokenizer -> + PE -> layers -> LN -> SeqPool (BASELINES §6)."""
    torch.manual_seed(0)
    model = CCT('2_3x2')
    model.init_weights()
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        t, hw = model.tokenizer(x)
        t = t + model.pos_embed
        for layer in model.layers:
            t = layer(t)
        t = model.norm(t)
        w = model.seq_pool.attention_pool(t).softmax(1)
        expected = (w * t).sum(1)
        out, = model(x)
    assert hw == (8, 8)
    torch.testing.assert_close(out, expected)


def test_featmaps_and_out_type():
    model = CCT('2_3x2', out_type='featmap', out_indices=(0, 1)).eval()
    with torch.no_grad():
        maps = model(torch.randn(1, 3, 32, 32))
    assert [m.shape for m in maps] == [(1, 128, 8, 8)] * 2
    with pytest.raises(ValueError, match='exists only after the last layer'):
        CCT('2_3x2', out_indices=(0, ))
    assert model.seq_pool is None
    # SeqPool as a neck on the normalised last map = the pooled backbone.
    torch.manual_seed(0)
    pooled = _classifier('2_3x2').eval()
    necked = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(type='CCT', arch='2_3x2', out_type='featmap'),
            neck=dict(type='SeqPool', embed_dims=128),
            head=dict(type='LinearClsHead', num_classes=10,
                      in_channels=128))).eval()
    assert _numel(necked) == _numel(pooled) == 283_723
    state = {
        k.replace('backbone.seq_pool.', 'neck.'): v
        for k, v in pooled.state_dict().items()
    }
    necked.load_state_dict(state)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            necked(x, mode='tensor'), pooled(x, mode='tensor'))


def test_drop_path_ramp():
    rates = [layer.drop_path.drop_prob for layer in CCT('7_3x1').layers]
    assert rates == pytest.approx([0.1 * i / 6 for i in range(7)])


def test_init_and_state_dict_round_trip():
    torch.manual_seed(0)
    a = CCT('2_3x2')
    before = a.layers[0].attn.qkv.weight.clone()
    a.init_weights()
    assert not torch.equal(before, a.layers[0].attn.qkv.weight)
    assert a.pos_embed.std().item() == pytest.approx(0.2, rel=0.1)
    b = CCT('2_3x2')
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(a(x)[0], b(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize('with_cp', [False, True])
def test_attn_cfg_swaps_the_layer_attention(with_cp):
    default = CCT('2_3x2')
    assert all(
        type(layer.attn) is MultiheadSelfAttention for layer in default.layers)
    # CCT has no class token: the layers' tokens are the tokenizer's 8x8
    # grid, which reaches the attention (through checkpointing too).
    model = CCT(
        '2_3x2', attn_cfg=dict(type='LeMSA', sr_ratio=2), with_cp=with_cp)
    assert all(type(layer.attn) is LeMSA and layer.attn.num_heads == 2
               for layer in model.layers)
    out, = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 128)
    out.sum().backward()
    assert model.layers[0].attn.proj_v.weight.grad is not None
