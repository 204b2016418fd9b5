"""Where each zoo backbone's stage outputs are read, for timm's feature API.

The backbones return only the outputs of their ``out_indices`` (a classifier
builds them for the last stage, and AlterNet, CeiT and CCT build modules for
exactly what they return). timm's ``forward_intermediates`` and
``features_only`` ask for any stage of the same model, so the stage outputs
are read with forward hooks on the module that ends each stage, during the
backbone's own forward: one implementation, no second copy of a forward.

A :class:`StageTap` names that module (a path inside the backbone) and turns
what it returned into a ``(B, C, H, W)`` map; :func:`stage_taps` gives one
per stage, with the stage's channels and its stride from the input
(``feature_info``'s ``num_chs`` and ``reduction``).
"""
from dataclasses import dataclass
from functools import partial
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn as nn

from lect_mm.blocks.functional import map_to_tokens, tokens_to_map


@dataclass
class StageTap:
    """The output of one stage.

    Attributes:
        module (str): Path of the module that ends the stage, inside the
            backbone.
        to_map (callable): ``(args, output) -> (B, C, H, W)`` from the
            arguments that module was called with and what it returned.
        num_chs (int): Channels of the map.
        reduction (int): Stride of the map from the input.
    """
    module: str
    to_map: Callable
    num_chs: int
    reduction: int


def _map(args, out):
    return out


def _tokens(args, out, extra: int = 0):
    """Blocks called as ``block(x, hw_shape)`` on ``(B, N, C)`` tokens."""
    return tokens_to_map(out[:, extra:], args[1])


def _cell(args, out):
    """A ViTAE reduction cell returns ``(tokens, hw_shape)``."""
    return tokens_to_map(out[0], out[1])


def _square_tokens(args, out, side: int):
    return tokens_to_map(out, (side, side))


def _cumulative(strides: Sequence[int], first: int = 1) -> List[int]:
    out, total = [], first
    for s in strides:
        total *= s
        out.append(total)
    return out


def _lect(b) -> List[StageTap]:
    reductions = _cumulative(b.arch_settings['strides'])
    return [
        StageTap(f'stages.{i}', _map, c, r)
        for i, (c, r) in enumerate(zip(b.embed_dims, reductions))
    ]


def _vitae(b) -> List[StageTap]:
    reductions = _cumulative(b.arch_settings['downsample_ratios'])
    taps = []
    for i, stage in enumerate(b.stages):
        if len(stage.ncs):
            taps.append(
                StageTap(f'stages.{i}.ncs.{len(stage.ncs) - 1}', _tokens,
                         b.out_channels[i], reductions[i]))
        else:
            taps.append(
                StageTap(f'stages.{i}.rc', _cell, b.out_channels[i],
                         reductions[i]))
    return taps


def _levit(b) -> List[StageTap]:
    taps = []
    for i, stage in enumerate(b.stages):
        side = b.resolutions[i]
        taps.append(
            StageTap(f'stages.{i}.{len(stage) - 1}',
                     partial(_square_tokens, side=side), b.embed_dims[i],
                     16 * 2**i))
    return taps


def _ceit(b) -> List[StageTap]:
    extra = b.num_extra_tokens
    reduction = 224 // b.i2t.output_size(224) * b.proj.stride[0]
    return [
        StageTap(f'layers.{i}', partial(_tokens, extra=extra), b.embed_dims,
                 reduction) for i in range(b.num_layers)
    ]


def _cct(b) -> List[StageTap]:
    reduction = b.img_size // b.patch_resolution[0]
    return [
        StageTap(f'layers.{i}', _tokens, b.embed_dims, reduction)
        for i in range(b.num_layers)
    ]


def _alternet(b) -> List[StageTap]:
    taps = [
        StageTap(f'layer{i + 1}', _map, c, r)
        for i, (c, r) in enumerate(zip(b.channels, b.stage_strides))
    ]
    # The last stage is read after its output norm + ReLU (the classifier's
    # input), as timm's pre-activation ResNets do.
    last = b.num_stages - 1
    if last in b.out_indices:
        taps[last].module = 'act'
    return taps


def _narrow_resnet(b) -> List[StageTap]:
    stem = b.conv1.stride[0] * (2 if isinstance(b.maxpool, nn.MaxPool2d)
                                else 1)
    strides = [getattr(b, n)[0].conv1.stride[0] for n in b.res_layers]
    return [
        StageTap(n, _map, c, r) for n, c, r in zip(
            b.res_layers, b.widths, _cumulative(strides, stem))
    ]


#: Backbone class name -> its taps.
_TAPS = {
    'LeCT': _lect,
    'ViTAE': _vitae,
    'FlexibleLeViT': _levit,
    'CeiT': _ceit,
    'CCT': _cct,
    'AlterNet': _alternet,
    'NarrowResNet': _narrow_resnet,
}


def stage_taps(backbone: nn.Module) -> List[StageTap]:
    """One :class:`StageTap` per stage of a zoo backbone."""
    name = type(backbone).__name__
    if name not in _TAPS:
        raise TypeError(f'No stage taps for {name}; known backbones: '
                        f'{sorted(_TAPS)}.')
    return _TAPS[name](backbone)


@dataclass
class HeadPool:
    """The pooling of a backbone that pools itself (CeiT with GAP, CCT),
    split as timm's ``forward_features`` / ``forward_head``.

    Attributes:
        name (str): Its ``global_pool`` name.
        features (callable): ``(backbone, map) -> (B, C, H, W)``: the map
            the pooling reads, from the last stage's tap.
        pool (callable): ``(backbone, map) -> (B, C)``: the backbone's
            pooling on that map.
    """
    name: str
    features: Callable
    pool: Callable


def _same(b, x):
    return x


def _mean_norm(b, x):
    return b.norm(map_to_tokens(x).mean(dim=1))


def _norm(b, x):
    return tokens_to_map(b.norm(map_to_tokens(x)), x.shape[-2:])


def _seq_pool(b, x):
    return b.seq_pool(x)


#: CeiT(pooling='gap'): mean of the patch tokens, then the backbone's norm.
_CEIT_GAP = HeadPool('avg', _same, _mean_norm)
#: CCT: the backbone's norm on the last tokens, then its SeqPool.
_CCT_SEQ = HeadPool('seq', _norm, _seq_pool)


def head_pool(backbone: nn.Module) -> Optional[HeadPool]:
    """The :class:`HeadPool` of a backbone that pools itself from its last
    map (None: the backbone returns maps, or, as CeiT's LCA over every
    block's class token, pools from more than one map)."""
    name = type(backbone).__name__
    if name == 'CeiT' and backbone.norm is not None and \
            backbone.lca is None:
        return _CEIT_GAP
    if name == 'CCT' and backbone.seq_pool is not None:
        return _CCT_SEQ
    return None


def run_tapped(backbone: nn.Module, x: torch.Tensor, taps: List[StageTap],
               indices: Sequence[int]):
    """Run ``backbone(x)`` and read the stages of ``indices`` on the way.

    Returns:
        tuple: The backbone's own outputs and the maps of ``indices``, in
        that order.
    """
    maps = {}
    handles = []
    for i in sorted(set(indices)):
        tap = taps[i]

        def hook(module, args, out, i=i, tap=tap):
            maps[i] = tap.to_map(args, out)

        handles.append(
            backbone.get_submodule(tap.module).register_forward_hook(hook))
    try:
        outs = backbone(x)
    finally:
        for h in handles:
            h.remove()
    missing = [i for i in indices if i not in maps]
    if missing:
        raise RuntimeError(f'stages {missing} of {type(backbone).__name__} '
                           'were not reached by its forward.')
    return outs, [maps[i] for i in indices]
