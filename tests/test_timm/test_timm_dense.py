"""timm features of the zoo in dense prediction: segmentation_models_pytorch's
timm encoders (``encoder_name='tu-lect_v1'``) and torchvision's FasterRCNN
on ``features_only`` LeCT (the detector of test_dense_prediction)."""
import os.path as osp
import sys

import pytest
import timm
import torch

import lect_mm.timm  # noqa: F401

sys.path.insert(0, osp.join(osp.dirname(osp.dirname(__file__)),
                            'test_models'))
from test_dense_prediction import _detector  # noqa: E402

# LeCT has 3 stages (strides 4, 8, 16): smp's encoder_depth 4 reads them all
SEGMENTERS = {
    'Unet': dict(decoder_channels=(32, 16, 16, 8)),
    'UPerNet': dict(decoder_channels=32),
    'Segformer': dict(decoder_segmentation_channels=32),
    'DeepLabV3Plus': dict(encoder_output_stride=16, decoder_channels=32),
}


def test_smp_timm_encoder_segments():
    # imported here, not at collection in every pytest worker
    import segmentation_models_pytorch as smp
    torch.manual_seed(0)
    x = torch.randn(1, 3, 64, 64)
    for arch, kwargs in SEGMENTERS.items():
        model = getattr(smp, arch)(
            encoder_name='tu-lect_v1', encoder_weights=None, encoder_depth=4,
            classes=2, **kwargs).eval()
        assert model.encoder.out_channels == [3, 0, 64, 128, 192], arch
        with torch.no_grad():
            assert model(x).shape == (1, 2, 64, 64), arch
    # LeCT does not dilate: a stride-8 DeepLab is refused by name
    with pytest.raises(ValueError, match='output_stride=8'):
        smp.DeepLabV3Plus(encoder_name='tu-lect_v1', encoder_weights=None,
                          encoder_depth=4, encoder_output_stride=8)


def test_faster_rcnn_on_features_only_lect():
    torch.manual_seed(0)
    body = timm.create_model('lect_v1', features_only=True)
    model = _detector('v1', body=body,
                      in_channels=body.feature_info.channels())
    images = [torch.rand(3, 128, 160)]
    targets = [dict(boxes=torch.tensor([[10., 20., 90., 100.]]),
                    labels=torch.tensor([1]))]
    losses = model.train()(images, targets)
    loss = sum(losses.values())
    assert torch.isfinite(loss)
    loss.backward()
    stem = body.model.backbone.stages[0].patch_embed.proj.weight
    assert stem.grad is not None and stem.grad.abs().sum() > 0
    with torch.no_grad():
        feats = model.eval().backbone(model.transform(images)[0].tensors)
    assert [tuple(f.shape[-2:]) for f in feats.values()] == [
        (32, 40), (16, 20), (8, 10), (4, 5)]
