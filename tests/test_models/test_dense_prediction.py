"""LeCT's multi-scale maps, and LeCT under torchvision's FasterRCNN + FPN."""
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import (FastRCNNPredictor,
                                                      TwoMLPHead)
from torchvision.ops import MultiScaleRoIAlign

from lect_mm.models.backbones import LeCT
from lect_mm.models.detection import FPNBackbone, stage_channels

ARCHS = ['v1', 'v2', 'v3']

# Output side of each stage for an input side s: the 7x7 stride-4 patch
# embedding (padding 3) gives ceil(s / 4), each 3x3 stride-2 one (padding 1)
# halves with ceil. Written out, not computed, so the test checks the rule.
# The full-width variants' real passes at 321x479 and 512x512 (the same
# shapes, finite maps) are tests/test_backbones/test_lect_input_sizes.py's;
# its 800x1216 pass is of a quarter-width LeCT.
STAGE_SIZES = {
    (800, 1216): [(200, 304), (100, 152), (50, 76)],
}


@pytest.mark.parametrize('arch', ARCHS)
def test_multiscale_maps_at_dense_prediction_sizes(arch):
    torch.manual_seed(0)
    model = LeCT(arch=arch, out_indices=(0, 1, 2)).eval()
    # The same forward code on the meta device: every shape rule runs, no
    # kernel does (a real 800x1216 pass costs over 1 s).
    model.to('meta')
    for (h, w), sizes in STAGE_SIZES.items():
        x = torch.empty(1, 3, h, w, device='meta')
        with torch.no_grad():
            outs = model(x)
        assert [tuple(o.shape) for o in outs] == [
            (1, c, *s) for c, s in zip((64, 128, 192), sizes)]


def _detector(arch, num_classes=3, body=None, in_channels=None):
    """FasterRCNN on LeCT ``arch`` (or on ``body``, a module returning
    maps of ``in_channels`` at strides 4, 8, 16) + FPN."""
    backbone = FPNBackbone(
        dict(type='LeCT', arch=arch, out_indices=(0, 1, 2))
        if body is None else body, in_channels=in_channels, out_channels=32)
    # One anchor size per level: strides 4, 8, 16 and the max-pool level 32.
    anchors = AnchorGenerator(sizes=((16, ), (32, ), (64, ), (128, )),
                              aspect_ratios=((0.5, 1.0, 2.0), ) * 4)
    roi_pool = MultiScaleRoIAlign(backbone.featmap_names, output_size=7,
                                  sampling_ratio=2)
    return FasterRCNN(
        backbone,
        min_size=128,
        max_size=192,
        size_divisible=1,  # LeCT takes any size: no padding to 32
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        rpn_anchor_generator=anchors,
        rpn_pre_nms_top_n_train=200,
        rpn_post_nms_top_n_train=100,
        rpn_pre_nms_top_n_test=100,
        rpn_post_nms_top_n_test=50,
        box_roi_pool=roi_pool,
        box_head=TwoMLPHead(32 * 7 * 7, 64),
        box_predictor=FastRCNNPredictor(64, num_classes),
        box_batch_size_per_image=64,
        box_score_thresh=0.0)


@pytest.mark.parametrize('arch', ARCHS)
def test_lect_trains_and_detects_in_torchvision_faster_rcnn(arch):
    torch.manual_seed(0)
    model = _detector(arch)
    # Two non-square images whose sides are not multiples of the stride;
    # the transform resizes them to 128 x 191 and 170 x 128.
    sizes = [(321, 479), (400, 301)]
    images = [torch.rand(3, h, w) for h, w in sizes]
    targets = [
        dict(boxes=torch.tensor([[40., 30., 200., 150.],
                                 [250., 100., 470., 300.]]),
             labels=torch.tensor([1, 2])),
        dict(boxes=torch.tensor([[10., 20., 150., 380.]]),
             labels=torch.tensor([1])),
    ]
    model.train()
    losses = model(images, targets)
    assert set(losses) == {'loss_classifier', 'loss_box_reg',
                           'loss_objectness', 'loss_rpn_box_reg'}
    loss = sum(losses.values())
    assert torch.isfinite(loss)
    loss.backward()
    body = model.backbone.body
    for stage in body.stages:  # gradients reach every LeCT stage
        grads = [p.grad for p in stage.parameters() if p.requires_grad]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert any(g.abs().sum() > 0 for g in grads)

    model.eval()
    with torch.no_grad():
        feats = model.backbone(model.transform(images)[0].tensors)
        detections = model(images)
    assert list(feats) == ['0', '1', '2', 'pool']
    # the batch is padded to 170 x 191: ceil(s / 4), then halved with ceil
    assert [tuple(f.shape[-2:]) for f in feats.values()] == [
        (43, 48), (22, 24), (11, 12), (6, 6)]
    assert all(f.shape[:2] == (2, 32) for f in feats.values())
    assert len(detections) == 2
    for det, (h, w) in zip(detections, sizes):
        boxes = det['boxes']
        assert boxes.ndim == 2 and boxes.shape[1] == 4 and len(boxes) > 0
        assert det['scores'].shape == det['labels'].shape == boxes.shape[:1]
        # boxes are mapped back to the original image
        assert (boxes >= 0).all()
        assert (boxes[:, 2] <= w).all() and (boxes[:, 3] <= h).all()


def test_fpn_backbone_reads_channels_and_loads_a_classifier_checkpoint(
        tmp_path):
    arch = dict(embed_dims=[8, 16], depths=[1, 1], num_heads=[1, 2],
                ffn_ratios=[1, 1],
                attn_cfgs=[dict(type='LeMSA', sr_ratio=2)] * 2)
    torch.manual_seed(0)
    trained = LeCT(arch=arch, out_indices=(0, 1))
    assert stage_channels(trained) == [8, 16]
    ckpt = tmp_path / 'classifier.pth'
    state = OrderedDict(
        ('backbone.' + k, v) for k, v in trained.state_dict().items())
    torch.save(dict(state_dict=state), str(ckpt))
    model = FPNBackbone(
        dict(type='LeCT', arch=arch, out_indices=(0, 1),
             init_cfg=dict(type='Pretrained', checkpoint=str(ckpt),
                           prefix='backbone.')), out_channels=8)
    for key, value in trained.state_dict().items():
        torch.testing.assert_close(model.body.state_dict()[key], value)
    assert model.featmap_names == ['0', '1']
    feats = model(torch.randn(1, 3, 30, 22))
    assert [(k, tuple(v.shape)) for k, v in feats.items()] == [
        ('0', (1, 8, 8, 6)), ('1', (1, 8, 4, 3)), ('pool', (1, 8, 2, 2))]

    with pytest.raises(ValueError, match='returned 2 maps, but the FPN was '
                       'built for 3'):
        FPNBackbone(trained, in_channels=[8, 16, 32]).eval()(
            torch.randn(1, 3, 16, 16))
    with pytest.raises(ValueError, match='pass in_channels'):
        FPNBackbone(nn.Conv2d(3, 4, 1))
    with pytest.raises(TypeError, match='nn.Module or a config dict'):
        FPNBackbone('LeCT')


def test_downstream_configs_resolve_mmpretrain_lect():
    # mmdet/mmseg registries are children of mmengine's root registry; their
    # configs (docs/dense_prediction.md) name the backbone 'mmpretrain.LeCT'
    # and give the FPN / UPerHead these channels.
    from mmengine.registry import MODELS as ROOT
    backbone = ROOT.build(
        dict(type='mmpretrain.LeCT', arch='v1', out_indices=(0, 1, 2)))
    assert isinstance(backbone, LeCT)
    assert stage_channels(backbone) == [64, 128, 192]
