"""ResNet v1 with free per-stage widths (the LeCT report's ~1M ResNet).

mmpretrain's ``ResNet`` doubles the width at every stage; the LeCT author's
``ResNet.py`` baseline uses 32, 64, 96, 128. This backbone keeps mmpretrain's
post-activation ``BasicBlock`` / ``ResLayer`` (so every block, shortcut and
key name is mmpretrain's) and only lets the widths be listed.
"""
from typing import Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_conv_layer, build_norm_layer
from mmpretrain.models.backbones.resnet import BasicBlock, ResLayer
from mmpretrain.registry import MODELS

from lect_mm.blocks.utils import check_choice
from lect_mm.models.utils import STEM_TYPES, check_per_stage, parse_arch
from .base_backbone import (StageTap, ZooBackbone, cumulative_strides,
                            map_output)


@MODELS.register_module()
class NarrowResNet(ZooBackbone):
    """Post-activation ResNet of BasicBlocks with listed stage widths.

    Stem ``'conv7x7'``: conv 7x7/2 (no bias) -> norm -> ReLU -> max-pool
    3x3/2; ``'conv3x3'``: conv 3x3/1 -> norm -> ReLU (the author's
    ``stem=False``, mmpretrain's ``ResNet_CIFAR``). Stage ``i`` has
    ``depths[i]`` mmpretrain ``BasicBlock`` s of width ``widths[i]``, the
    first with stride ``strides[i]`` and a conv1x1 + norm projection shortcut
    when the stride or width changes; each block returns
    ``ReLU(drop_path(residual) + shortcut)``.

    ``arch='report'`` is the author's ``ResNet(BasicBlock, [2, 2, 2, 2])``
    (the LeCT author's ``ResNet.py``; widths 32/64/96/128); ``arch='18'``
    equals mmpretrain's ``ResNet(depth=18)`` key for key.

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    ``conv1`` and ``norm1``; stage ``i`` is ``layer{i+1}`` (no output norm),
    as in mmpretrain's ResNet. Each output is the stage's (post-activation)
    output.

    Args:
        arch (str | dict): A key of ``arch_zoo`` or a dict with ``depths``
            and ``widths`` (one entry per stage). Defaults to 'report'.
        in_channels (int): Input image channels. Defaults to 3.
        stem_type (str): ``'conv7x7'`` or ``'conv3x3'``. Defaults to
            'conv7x7'.
        strides (Sequence[int]): Stride of the first block of each stage.
            Defaults to ``(1, 2, 2, 2)``.
        drop_path_rate (float): Stochastic depth; block ``j`` of ``n`` gets
            ``rate * j / (n - 1)`` (the author's rule). Defaults to 0 (the
            author's model line).
        conv_cfg (dict, optional): Conv config. Defaults to None.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation config. Defaults to
            ``dict(type='ReLU', inplace=True)``.
        **kwargs: ``out_indices`` (default -1, the last stage),
            ``frozen_stages``, ``norm_eval``, ``with_cp`` (mmpretrain's
            ``BasicBlock`` checkpointing) and ``init_cfg`` (default None:
            PyTorch's init, as the author's code) of :class:`ZooBackbone`.
    """
    essential_keys = ('depths', 'widths')
    FIRST_CONV = 'conv1'
    arch_zoo = {
        'report': {
            'depths': (2, 2, 2, 2),
            'widths': (32, 64, 96, 128)
        },
        '18': {
            'depths': (2, 2, 2, 2),
            'widths': (64, 128, 256, 512)
        },
    }

    def __init__(self,
                 arch: Union[str, dict] = 'report',
                 in_channels: int = 3,
                 stem_type: str = 'conv7x7',
                 strides: Sequence[int] = (1, 2, 2, 2),
                 drop_path_rate: float = 0.,
                 conv_cfg=None,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 **kwargs):
        arch = parse_arch(arch, self.arch_zoo, self.essential_keys,
                          self.essential_keys)
        num_stages = check_per_stage({'strides': strides},
                                     len(arch['depths']))
        check_choice(stem_type, STEM_TYPES, 'stem_type')
        super().__init__(num_stages, **kwargs)
        self.depths = tuple(arch['depths'])
        self.widths = tuple(arch['widths'])

        stem_channels = self.widths[0]
        if stem_type == 'conv7x7':
            self.conv1 = build_conv_layer(
                conv_cfg, in_channels, stem_channels, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv1 = build_conv_layer(
                conv_cfg, in_channels, stem_channels, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        self.norm1_name, norm1 = build_norm_layer(
            norm_cfg, stem_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.relu = build_activation_layer(act_cfg)

        dpr = self.drop_path_rates(drop_path_rate, self.depths)
        self.res_layers = []
        in_ch = stem_channels
        for i, (depth, width) in enumerate(zip(self.depths, self.widths)):
            layer = ResLayer(
                block=BasicBlock,
                num_blocks=depth,
                in_channels=in_ch,
                out_channels=width,
                expansion=1,
                stride=strides[i],
                conv_cfg=conv_cfg,
                norm_cfg=norm_cfg,
                drop_path_rate=dpr[i],
                act_cfg=act_cfg,
                with_cp=self.with_cp)
            in_ch = width
            self.add_module(f'layer{i + 1}', layer)
            self.res_layers.append(f'layer{i + 1}')

        self._freeze_stages()

    @property
    def norm1(self) -> nn.Module:
        return getattr(self, self.norm1_name)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Return the (post-activation) output of each stage in out_indices."""
        self.check_input(x)
        x = self.maxpool(self.relu(self.norm1(self.conv1(x))))
        outs = []
        for i, name in enumerate(self.res_layers):
            x = getattr(self, name)(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    def stem_and_stages(self):
        return ['conv1', self.norm1_name], [[n] for n in self.res_layers]

    def stage_taps(self):
        """The stages' outputs."""
        stem = self.conv1.stride[0] * (2 if isinstance(
            self.maxpool, nn.MaxPool2d) else 1)
        strides = [getattr(self, n)[0].conv1.stride[0]
                   for n in self.res_layers]
        return [
            StageTap(n, map_output, c, r) for n, c, r in zip(
                self.res_layers, self.widths,
                cumulative_strides(strides, stem))
        ]
