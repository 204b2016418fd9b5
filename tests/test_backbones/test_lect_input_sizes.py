"""Every LeCT variant at any input size (v3's per-position kernels
resampled off the trained grid, report Appendix "LeCTv3")."""
import pytest
import torch

from lect_mm.blocks import SVConvTransposeUpsampler
from lect_mm.models.backbones import LeCT

# Stage maps of the conv patch embeddings (kernel 7 stride 4 padding 3, then
# kernel 3 stride 2 padding 1: ceil-style arithmetic), strides 4 / 8 / 16.
STAGE_SIZES = {
    (512, 512): [(128, 128), (64, 64), (32, 32)],
    (800, 1216): [(200, 304), (100, 152), (50, 76)],
    (321, 479): [(81, 120), (41, 60), (21, 30)],
}


def _narrow(variant):
    """The variant's stages, sr_ratios and blocks at a quarter width, so
    that an 800x1216 forward stays cheap."""
    return dict(LeCT.arch_zoo[variant], embed_dims=[16, 32, 48],
                num_heads=[2, 2, 2])


def _upsamplers(model):
    return [blk.attn.query_upsampler for stage in model.stages
            for blk in stage.blocks[:1]]


@pytest.mark.parametrize('size', sorted(STAGE_SIZES))
@pytest.mark.parametrize('variant', ['v1', 'v2', 'v3'])
def test_multi_scale_features_at_any_size(variant, size):
    # Full width at 512x512 and 321x479; the quarter-width arch at 800x1216.
    arch = _narrow(variant) if size == (800, 1216) else variant
    model = LeCT(arch, out_indices=(0, 1, 2)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    dims = model.embed_dims
    assert [tuple(o.shape) for o in outs] == [
        (1, c, *hw) for c, hw in zip(dims, STAGE_SIZES[size])]
    assert all(torch.isfinite(o).all() for o in outs)


def test_v3_gradients_reach_every_parameter_off_the_trained_size():
    torch.manual_seed(0)
    model = LeCT(_narrow('v3'), out_indices=(0, 1, 2), drop_path_rate=0.,
                 drop_rate=0.)
    outs = model(torch.randn(1, 3, 100, 140))  # pooled grids 2x3, 2x3, 4x5
    assert [tuple(up.in_size) for up in _upsamplers(model)] == [
        (4, 4), (4, 4), (7, 7)]
    sum(o.square().mean() for o in outs).backward()
    missing = [n for n, p in model.named_parameters()
               if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing
    deconv = _upsamplers(model)[0].deconv.weight.grad
    assert deconv.abs().sum() > 0  # through the kernel resampling


def test_v3_img_size_names_the_trained_grids():
    # Pooled grids (ceil(H/K), ceil(W/K)) of img_size's stage maps: the
    # kernels are exact there and resampled elsewhere.
    grids = {224: [(4, 4), (4, 4), (7, 7)],
             512: [(10, 10), (10, 10), (16, 16)],
             112: [(2, 2), (2, 2), (4, 4)],
             (96, 160): [(2, 3), (2, 3), (3, 5)]}
    for img_size, expected in grids.items():
        ups = _upsamplers(LeCT(_narrow('v3'), img_size=img_size))
        assert all(isinstance(up, SVConvTransposeUpsampler) for up in ups)
        assert [up.in_size for up in ups] == expected
        assert [up.scale_factor for up in ups] == [14, 7, 2]
