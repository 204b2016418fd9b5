"""``tokens_to_map`` and ``map_to_tokens`` (lect_mm.blocks.functional): the
layout changes of the blocks are einops' own ops, so they give einops'
values and memory layout, which the blocks' later kernels depend on."""
import pytest
import torch
from einops import rearrange

from lect_mm.blocks.functional import map_to_tokens, tokens_to_map


@pytest.mark.parametrize('shape', [(2, 12, 5, 7), (1, 3, 1, 9),
                                   (0, 4, 3, 2)])
def test_same_values_and_strides_as_einops(shape):
    g = torch.Generator().manual_seed(0)
    b, c, h, w = shape
    x = torch.randn(*shape, generator=g)
    # contiguous, channels_last, H and W swapped in memory
    for m in (x, x.contiguous(memory_format=torch.channels_last),
              x.transpose(2, 3).contiguous().transpose(2, 3)):
        tokens = map_to_tokens(m)
        ref = rearrange(m, 'b c h w -> b (h w) c')
        assert torch.equal(tokens, ref) and tokens.stride() == ref.stride()
    t = torch.randn(b, h * w, c, generator=g)
    # contiguous tokens, and tokens whose channels are the outer dimension
    for tokens in (t, t.transpose(1, 2).contiguous().transpose(1, 2)):
        maps = tokens_to_map(tokens, (h, w))
        ref = rearrange(tokens, 'b (h w) c -> b c h w', h=h, w=w)
        assert torch.equal(maps, ref) and maps.stride() == ref.stride()


def test_tokens_that_do_not_fill_the_grid_raise():
    with pytest.raises(RuntimeError, match='invalid for input of size'):
        tokens_to_map(torch.zeros(1, 10, 4), (3, 3))
