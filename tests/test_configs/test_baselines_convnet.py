"""Report baselines (ResNet, ConvNeXt, ViT, AlterNet) and LeViT configs.

Parameter counts are those of the reference implementations (BASELINES.md:
the LeCT author's ResNet.py / ConvNeXt.py / ViT.py and the official
alternet.dnn_18), counted by instantiating them; ours must equal them.
"""
from pathlib import Path

import pytest
import torch
from einops import rearrange
from mmengine.config import Config
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401  (registers the backbones)

CONFIGS = Path(__file__).parents[2] / 'configs'
PARAMS = {  # leaf prefix: (10 classes, 100 classes)
    'baselines/resnet': (1_052_650, 1_064_260),
    'baselines/convnext': (1_169_158, 1_186_888),
    'baselines/vit': (1_708_426, 1_720_036),
    'baselines/alternet': (9_460_933, 9_507_103),
    'levit/levit_128s': (7_010_140, 7_044_790),
    'levit/levit_64s': (1_764_659, 1_782_029),
}
LR = {'baselines/resnet': 6e-3, 'baselines/convnext': 6e-3}
DATASETS = {'cifar10': (10, 60), 'cifar100': (100, 60), 'stl10': (10, 100)}


def _cfg(prefix, dataset):
    return Config.fromfile(CONFIGS / f'{prefix}_{dataset}.py')


def _numel(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize('dataset', sorted(DATASETS))
@pytest.mark.parametrize('prefix', sorted(PARAMS))
def test_leaf_config_counts_and_settings(prefix, dataset):
    cfg = _cfg(prefix, dataset)
    num_classes, epochs = DATASETS[dataset]
    assert cfg.model.head.num_classes == num_classes
    assert cfg.data_preprocessor.num_classes == num_classes
    assert cfg.train_cfg.max_epochs == epochs
    assert cfg.optim_wrapper.optimizer.lr == LR.get(prefix, 1e-3)
    assert cfg.train_dataloader.batch_size == 64
    model = MODELS.build(cfg.model)
    assert _numel(model) == PARAMS[prefix][num_classes == 100]


@pytest.mark.parametrize('prefix', [
    'baselines/resnet', 'baselines/convnext', 'baselines/vit',
    'baselines/alternet', 'levit/levit_64s'
])
def test_forward_224(prefix):
    torch.manual_seed(0)
    model = MODELS.build(_cfg(prefix, 'cifar100').model)
    model.eval()
    with torch.no_grad():
        logits = model(torch.randn(1, 3, 224, 224), mode='tensor')
    assert logits.shape == (1, 100)
    assert torch.isfinite(logits).all()


def test_levit_trains_without_distillation():
    model = MODELS.build(_cfg('levit/levit_64s', 'cifar10').model)
    model.init_weights()
    norms = list(model.backbone.residual_output_norms())
    assert norms and all((bn.weight == 0).all() for bn in norms)
    samples = [DataSample().set_gt_label(i) for i in (1, 2)]
    losses = model(torch.randn(2, 3, 224, 224), samples, mode='loss')
    assert torch.isfinite(losses['loss'])


def test_vit_dropout_and_drop_path_placement():
    """Report dropout 0.1 in attention proj + both MLP dropouts, none after
    the position embedding (the author's code has none there)."""
    backbone = MODELS.build(_cfg('baselines/vit', 'cifar10').model).backbone
    assert backbone.drop_after_pos.p == 0
    for i, layer in enumerate(backbone.layers):
        assert layer.attn.proj_drop.p == 0.1
        drops = [m.p for m in layer.ffn.modules()
                 if isinstance(m, torch.nn.Dropout)]
        assert drops == [0.1, 0.1]
        assert layer.ln1.eps == 1e-5
        assert layer.attn.qkv.bias is None
        rate = getattr(layer.attn.out_drop, 'drop_prob', 0.)
        assert rate == pytest.approx(0.1 * i / 7)


def test_vit_conv_patch_embed_equals_author_linear_on_patches():
    """Author (ViT.py): 16x16 patches flattened as (row, col, channel) ->
    Linear(768 -> 128). mmpretrain: Conv2d(3, 128, 16, stride 16). Equal
    after permuting the linear weight to (out, channel, row, col)."""
    backbone = MODELS.build(_cfg('baselines/vit', 'cifar10').model).backbone
    conv = backbone.patch_embed.projection
    torch.manual_seed(0)
    linear = torch.nn.Linear(16 * 16 * 3, 128)
    with torch.no_grad():
        conv.weight.copy_(
            rearrange(linear.weight, 'o (p1 p2 c) -> o c p1 p2', p1=16,
                      p2=16))
        conv.bias.copy_(linear.bias)
        img = torch.randn(2, 3, 224, 224)
        author = linear(
            rearrange(img, 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1=16,
                      p2=16))
        ours, hw = backbone.patch_embed(img)
    assert hw == (14, 14)
    torch.testing.assert_close(ours, author, atol=1e-5, rtol=1e-5)


def test_convnext_matches_author_settings():
    backbone = MODELS.build(
        _cfg('baselines/convnext', 'cifar10').model).backbone
    block = backbone.stages[2][3]
    assert block.norm.eps == 1e-6
    assert torch.all(block.gamma == 1e-6)
    assert block.drop_path.drop_prob == pytest.approx(0.1 * 5 / 6)
    assert backbone.stages[3][0].drop_path.drop_prob == pytest.approx(0.1)
    assert backbone.gap_before_final_norm
    assert backbone.downsample_layers[0][0].bias is not None
