"""Every block lect_mm registers builds from its config and trains.

Each block registered into mmpretrain's ``MODELS`` from ``lect_mm.blocks``
is built by name with small arguments, run forward on a tiny input and
backward; every trainable parameter must receive a finite gradient. A block
that is registered but missing from ``BLOCKS`` fails the sweep.
"""
import pytest
import torch
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401  (registers the blocks)


def _tokens(n=16, c=8):
    return torch.randn(2, n, c)


def _map(c=8, h=4, w=4):
    return torch.randn(2, c, h, w)


C, HW = 8, (4, 4)


def _grid_tokens():
    """(B, H·W, C) tokens on a 4x4 grid and the grid."""
    return _tokens(), HW


# name: (constructor arguments, inputs of forward)
BLOCKS = {
    'AlterNetMSABlock': (
        dict(in_channels=C, num_heads=2, head_dims=4, window_size=2),
        lambda: (_map(), )),
    'CCTEncoderLayer': (
        dict(embed_dims=C, num_heads=2, feedforward_channels=16),
        _grid_tokens),
    'CCTTokenizer': (
        dict(embed_dims=C, hidden_channels=4), lambda: (_map(3, 8, 8), )),
    'CeiTBlock': (
        dict(embed_dims=C, num_heads=2, ffn_ratio=2),  # one class token
        lambda: (_tokens(17), HW)),
    'CeiTLeFF': (dict(embed_dims=C, ffn_ratio=2), lambda: (_tokens(17), HW)),
    'ConvPatchEmbed': (
        dict(in_channels=3, embed_dims=C, kernel_size=3, stride=2),
        lambda: (_map(3, 8, 8), )),
    # 2**15 elements: the CPU path of FastDropout's own mask.
    'FastDropout': (dict(p=0.5), lambda: (torch.randn(4, 64, 128), )),
    'Image2Tokens': (dict(out_channels=C), lambda: (_map(3, 16, 16), )),
    'LCABlock': (  # the class tokens of 3 layers
        dict(embed_dims=C, num_heads=2, feedforward_channels=16),
        lambda: (_tokens(3), )),
    'LCAttention': (dict(embed_dims=C, num_heads=2), lambda: (_tokens(3), )),
    'LeCTBlock': (
        dict(embed_dims=C, attn_cfg=dict(type='LeMSA', num_heads=2,
                                         sr_ratio=2),
             ffn_cfg=dict(type='LeFFN', ffn_ratio=2), drop_path_rate=0.1),
        _grid_tokens),
    'LeFFN': (dict(embed_dims=C, ffn_ratio=2), _grid_tokens),
    'LeMSA': (dict(embed_dims=C, num_heads=2, sr_ratio=2), _grid_tokens),
    'LeMSAv2': (
        dict(embed_dims=C, num_heads=2, sr_ratio=2, h_ratio=0.5),
        _grid_tokens),
    'MultiheadSelfAttention': (dict(embed_dims=C, num_heads=2), _grid_tokens),
    'NormalCell': (
        dict(embed_dims=C, num_heads=2, feedforward_channels=16, groups=2),
        _grid_tokens),
    'PCM': (dict(in_channels=C, mid_channels=(C, C), out_channels=C),
            lambda: (_map(), )),
    'PRM': (dict(in_channels=3, embed_dims=C, kernel_size=3, stride=2,
                 dilations=(1, 2)), lambda: (_map(3, 8, 8), )),
    'PreActBasicBlock': (dict(in_channels=C, out_channels=16, stride=2),
                         lambda: (_map(), )),
    'ReductionCell': (
        dict(in_channels=3, embed_dims=C, token_dims=16, downsample_ratio=2,
             kernel_size=3, dilations=(1, 2)), lambda: (_map(3, 8, 8), )),
    'ResizeDWConvUpsampler': (dict(channels=C),
                              lambda: (_map(C, 2, 2), HW)),
    'ResizeUpsampler': (dict(channels=C), lambda: (_map(C, 2, 2), HW)),
    'SVConvTransposeUpsampler': (
        dict(channels=C, in_size=2, scale_factor=2, cr_ratio=0.5),
        lambda: (_map(C, 2, 2), HW)),
    'SeqPool': (dict(embed_dims=C), lambda: (_tokens(), )),
    'TokenPerformer': (dict(in_channels=C, embed_dims=16), _grid_tokens),
    'WindowAttention2d': (
        dict(in_channels=C, num_heads=2, head_dims=4, window_size=2),
        lambda: (_map(), )),
}


def _registered_blocks():
    return sorted(name for name, cls in MODELS.module_dict.items()
                  if cls.__module__.startswith('lect_mm.blocks'))


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


def test_every_registered_block_is_swept():
    registered = _registered_blocks()
    assert len(registered) >= 26
    assert sorted(BLOCKS) == registered, (
        'registered but not in BLOCKS: '
        f'{sorted(set(registered) - set(BLOCKS))}; in BLOCKS but not '
        f'registered: {sorted(set(BLOCKS) - set(registered))}')


@pytest.mark.parametrize('name', sorted(BLOCKS))
def test_block_builds_runs_forward_and_backward(name):
    torch.manual_seed(0)
    kwargs, make_inputs = BLOCKS[name]
    block = MODELS.build(dict(type=name, **kwargs)).train()
    assert type(block).__name__ == name
    inputs = make_inputs()
    x = inputs[0].requires_grad_()
    outputs = [t for t in _tensors(block(*inputs)) if t.is_floating_point()]
    assert outputs and all(torch.isfinite(t).all() for t in outputs)
    sum((t * torch.randn_like(t)).sum() for t in outputs).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert x.grad.abs().sum() > 0
    for pname, param in block.named_parameters():
        if not param.requires_grad:  # e.g. the Performer's fixed features
            continue
        assert param.grad is not None, f'{name}.{pname} got no gradient'
        assert torch.isfinite(param.grad).all(), f'{name}.{pname}'
