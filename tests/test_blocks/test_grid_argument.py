"""The token grid a block is called with (``hw_shape``, an upsampler's
``out_size``) must be two positive ints, checked before any cached work.

A float grid such as ``(8.0, 8.0)`` (``H / 4`` for ``H // 4``) equals and
hashes as ``(8, 8)``: unchecked, it left an entry in einops' cache after
which every valid ``(8, 8)`` call of any LeMSA in the process failed with
``TypeError: reshape(): ... got float``. Each block that uses the grid
refuses the bad call with an error naming the argument and the value, and
a valid call of the same size works after it.
"""
import inspect

import numpy as np
import pytest
import torch
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401  (registers the blocks)
from lect_mm.blocks.utils import check_grid

C, B = 8, 3
# A grid and batch no other test uses, so that the bad call comes first in
# every size-keyed cache (einops', the interpolation matrices').
GRID = (3, 7)
N = GRID[0] * GRID[1]

# name: (constructor arguments, input x, the grid argument's name)
GRID_BLOCKS = {
    'CeiTBlock': (dict(embed_dims=C, num_heads=2, ffn_ratio=2),
                  lambda: torch.randn(B, 1 + N, C), 'hw_shape'),
    'CeiTLeFF': (dict(embed_dims=C, ffn_ratio=2),
                 lambda: torch.randn(B, 1 + N, C), 'hw_shape'),
    'LeCTBlock': (dict(embed_dims=C,
                       attn_cfg=dict(type='LeMSA', num_heads=2, sr_ratio=2),
                       ffn_cfg=dict(type='LeFFN', ffn_ratio=2)),
                  lambda: torch.randn(B, N, C), 'hw_shape'),
    'LeFFN': (dict(embed_dims=C, ffn_ratio=2), lambda: torch.randn(B, N, C),
              'hw_shape'),
    'LeMSA': (dict(embed_dims=C, num_heads=2, sr_ratio=2),
              lambda: torch.randn(B, N, C), 'hw_shape'),
    'LeMSAv2': (dict(embed_dims=C, num_heads=2, sr_ratio=2, h_ratio=0.5),
                lambda: torch.randn(B, N, C), 'hw_shape'),
    'NormalCell': (dict(embed_dims=C, num_heads=2, ffn_ratio=2, groups=2),
                   lambda: torch.randn(B, N, C), 'hw_shape'),
    'ReductionCell': (dict(in_channels=3, embed_dims=C, token_dims=16,
                           downsample_ratio=2, kernel_size=3,
                           dilations=(1, 2)),
                      lambda: torch.randn(B, N, 3), 'hw_shape'),
    'ResizeDWConvUpsampler': (dict(channels=C),
                              lambda: torch.randn(B, C, 2, 4), 'out_size'),
    'ResizeUpsampler': (dict(channels=C), lambda: torch.randn(B, C, 2, 4),
                        'out_size'),
    'SVConvTransposeUpsampler': (
        dict(channels=C, in_size=(2, 4), scale_factor=2, cr_ratio=0.5),
        lambda: torch.randn(B, C, 2, 4), 'out_size'),
}
# Blocks that take the grid and do not use it (or only pass it on to a
# sub-block, which checks it).
UNUSED = {'CCTEncoderLayer', 'LCABlock', 'LCAttention',
          'MultiheadSelfAttention', 'SeqPool', 'TokenPerformer'}


def _tokens(out):
    """The output tensor (ReductionCell also returns its grid)."""
    return out[0] if isinstance(out, tuple) else out


def test_every_block_that_takes_a_grid_is_covered():
    takes_grid = {
        name for name, cls in MODELS.module_dict.items()
        if cls.__module__.startswith('lect_mm.blocks') and {
            'hw_shape', 'out_size'} & set(inspect.signature(
                cls.forward).parameters)
    }
    assert takes_grid == set(GRID_BLOCKS) | UNUSED


@pytest.mark.parametrize('name', sorted(GRID_BLOCKS))
def test_float_grid_is_refused_and_does_not_poison_valid_calls(name):
    torch.manual_seed(0)
    kwargs, make_x, arg = GRID_BLOCKS[name]
    block = MODELS.build(dict(type=name, **kwargs)).eval()
    x = make_x()
    H, W = GRID
    for bad in ((float(H), float(W)), (H, W * 1.0), (H * 4 / 4, W)):
        with pytest.raises(TypeError) as error:
            block(x, bad)
        assert f'{arg} must be a pair (H, W) of positive ints, got ' \
            f'{bad!r} (a float: use // for an integer division)' in str(
                error.value)
    with torch.no_grad():
        out = _tokens(block(x, GRID))  # the call the float one broke
        assert torch.isfinite(out).all()
        # Same values as a fresh block of the same weights gives.
        fresh = MODELS.build(dict(type=name, **kwargs)).eval()
        fresh.load_state_dict(block.state_dict())
        torch.testing.assert_close(_tokens(fresh(x, np.array(GRID))), out)


@pytest.mark.parametrize('name', ['LeMSA', 'ResizeUpsampler'])
def test_non_positive_and_malformed_grids_are_refused(name):
    kwargs, make_x, arg = GRID_BLOCKS[name]
    block = MODELS.build(dict(type=name, **kwargs)).eval()
    x = make_x()
    for bad in ((0, N), (-3, -7)):
        with pytest.raises(ValueError, match=rf'{arg} must be a pair \(H, '
                           rf'W\) of positive ints, got \({bad[0]}, '):
            block(x, bad)
    for bad in (N, (3, 7, 1), (True, N), (torch.tensor(3.), 7), '37'):
        with pytest.raises(TypeError, match=f'{arg} must be a pair'):
            block(x, bad)


def test_check_grid_accepts_integers_as_tracers_give_them():
    assert check_grid((8, 6)) == (8, 6)
    assert check_grid(torch.Size([8, 6])) == (8, 6)
    assert check_grid((np.int64(8), np.int32(6))) == (8, 6)
    # torch.jit.trace and the TorchScript ONNX exporter trace sizes as
    # 0-d integer tensors.
    H, W = check_grid((torch.tensor(8), torch.tensor(6)))
    assert (int(H), int(W)) == (8, 6)
    with pytest.raises(TypeError, match=r"in_size .* \(a Tensor\)"):
        check_grid((torch.tensor([8]), 6), 'in_size')
    with pytest.raises(TypeError, match=r'\(a float: use //'):
        check_grid((8, 6.0))
