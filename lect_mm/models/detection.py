"""LeCT (or another multi-scale mmpretrain backbone) in torchvision detectors.

torchvision's detection models (``FasterRCNN``, ``MaskRCNN``, ``RetinaNet``,
...) take a backbone that returns an ``OrderedDict`` of feature maps, all
with ``backbone.out_channels`` channels. An mmpretrain backbone returns a
tuple with one map per ``out_indices`` at its stage's width (LeCT: 64, 128,
192 channels at strides 4, 8, 16). :class:`FPNBackbone` joins the two with
torchvision's ``FeaturePyramidNetwork``, as torchvision's own
``BackboneWithFPN`` does for its ResNets; that class cuts a model with
``IntermediateLayerGetter`` and cannot take a backbone that returns a tuple.
See ``docs/dense_prediction.md`` for a FasterRCNN built on it.
"""
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn
from torchvision.ops.feature_pyramid_network import (ExtraFPNBlock,
                                                     FeaturePyramidNetwork,
                                                     LastLevelMaxPool)

from mmpretrain.registry import MODELS


def stage_channels(backbone: nn.Module) -> List[int]:
    """Channels of the maps a backbone returns, from its own arch.

    Reads ``embed_dims`` (one entry per stage) at the backbone's
    ``out_indices``, as LeCT stores them.
    """
    dims = getattr(backbone, 'embed_dims', None)
    indices = getattr(backbone, 'out_indices', None)
    if not isinstance(dims, (list, tuple)) or indices is None:
        raise ValueError(
            f'cannot read the output channels of {type(backbone).__name__} '
            '(it has no per-stage embed_dims list and out_indices); pass '
            'in_channels, one entry per returned map.')
    return [dims[i] for i in indices]


class FPNBackbone(nn.Module):
    """A multi-scale mmpretrain backbone under torchvision's FPN.

    ``forward(images)`` returns the ``OrderedDict`` torchvision's detectors
    expect: the FPN maps of the backbone's outputs, named ``'0'``, ``'1'``,
    ... (:attr:`featmap_names`, for ``MultiScaleRoIAlign``), followed by
    what ``extra_blocks`` adds (``'pool'`` for the default max-pool level).

    Args:
        backbone (dict | nn.Module): The backbone or its config, e.g.
            ``dict(type='LeCT', arch='v1', out_indices=(0, 1, 2))``. A
            config is built from mmpretrain's ``MODELS`` and its
            ``init_weights()`` runs, so an ``init_cfg`` such as
            ``dict(type='Pretrained', checkpoint=CKPT, prefix='backbone.')``
            loads the backbone of a classifier checkpoint.
        in_channels (Sequence[int], optional): Channels of each map the
            backbone returns. Defaults to None: read from the backbone's
            ``embed_dims`` at its ``out_indices``.
        out_channels (int): Channels of every FPN map. Defaults to 256.
        extra_blocks (ExtraFPNBlock, optional): Extra FPN levels. Defaults
            to None: ``LastLevelMaxPool()``, one more level at twice the
            last stride, as in torchvision's ``BackboneWithFPN``.
        norm_layer (callable, optional): Norm of the FPN convolutions.
            Defaults to None (none).

    Attributes:
        out_channels (int): Channels of every returned map, read by the
            detectors' heads.
        featmap_names (list[str]): Names of the maps taken from the
            backbone (without the extra levels).
    """

    def __init__(self,
                 backbone: Union[dict, nn.Module],
                 in_channels: Optional[Sequence[int]] = None,
                 out_channels: int = 256,
                 extra_blocks: Optional[ExtraFPNBlock] = None,
                 norm_layer: Optional[Callable[..., nn.Module]] = None):
        super().__init__()
        if isinstance(backbone, dict):
            backbone = MODELS.build(backbone)
            backbone.init_weights()
        elif not isinstance(backbone, nn.Module):
            raise TypeError('backbone must be an nn.Module or a config dict, '
                            f'got {type(backbone).__name__}')
        if in_channels is None:
            in_channels = stage_channels(backbone)
        in_channels = [int(c) for c in in_channels]
        self.body = backbone
        self.fpn = FeaturePyramidNetwork(
            in_channels,
            out_channels,
            extra_blocks=LastLevelMaxPool()
            if extra_blocks is None else extra_blocks,
            norm_layer=norm_layer)
        self.out_channels = out_channels
        self.featmap_names = [str(i) for i in range(len(in_channels))]

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Images (B, 3, H, W) -> ``OrderedDict`` of FPN maps."""
        feats = self.body(x)
        if len(feats) != len(self.featmap_names):
            raise ValueError(
                f'{type(self.body).__name__} returned {len(feats)} maps, but '
                f'the FPN was built for {len(self.featmap_names)} '
                '(in_channels); set out_indices to match.')
        return self.fpn(OrderedDict(zip(self.featmap_names, feats)))
