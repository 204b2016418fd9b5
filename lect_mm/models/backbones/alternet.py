"""AlterNet (Park & Kim, "How Do Vision Transformers Work?", ICLR 2022, §4).

Pre-activation ResNet whose last block of stages 2-4 is a windowed MSA block
(:class:`~lect_mm.blocks.AlterNetMSABlock`), following the official
``alternet.dnn_18`` (``xxxnell/how-do-vits-work``, branch ``transformer``).
The LeCT report's "alter(res)net_18" baseline is ``arch='18'`` with the
ImageNet stem.
"""
import math
from typing import Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmpretrain.registry import MODELS

from lect_mm.blocks.alternet import AlterNetMSABlock, PreActBasicBlock
from lect_mm.blocks.utils import check_choice
from lect_mm.models.utils import STEM_TYPES, check_per_stage, parse_arch
from .base_backbone import StageTap, ZooBackbone, map_output


@MODELS.register_module()
class AlterNet(ZooBackbone):
    """AlterNet backbone: pre-activation ResNet with MSA blocks.

    Stage ``i`` holds ``depths[i]`` blocks, its last ``2 * msa_depths[i]``
    alternating conv and MSA (official ``[conv] * (n - 2m) + [conv, MSA] *
    m``), so AlterNet-18 ends stages 2, 3 and 4 with one MSA block each.
    MSA blocks use ``num_heads[i]`` heads of ``head_dims`` channels,
    ``window_size`` windows and one relative-position bias table per block
    shared by its heads.

    Stem ``'conv7x7'`` (official ``stem=True``): bias-free conv 7x7/2 then
    max-pool 3x3/2, **without** norm or activation (pre-activation style);
    ``'conv3x3'``: a single bias-free conv 3x3/1. Each requested output gets
    norm + ReLU; for ``out_indices=(3,)`` this is the official ``BNGAPBlock``
    classifier minus its pooling and linear layer, which are the
    ``GlobalAveragePooling`` neck and ``LinearClsHead``.

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    ``stem``; stage ``i`` is ``layer{i+1}`` and, where ``out_indices``
    builds it, its output norm ``norm{i}``.

    With the 7x7 stem and ``window_size=7`` the maps entering the MSA blocks
    are input/8, /16 and /32, so input sides must be multiples of 224 (more
    precisely: ``ceil(side / 32)``, ``ceil(side / 16)`` and ``ceil(side / 8)``
    multiples of 7); anything else raises a ``ValueError`` naming the sizes.

    Args:
        arch (str | dict): A key of ``arch_zoo`` (``'18'``, ``'34'``) or a
            dict with keys ``depths``, ``msa_depths``, ``num_heads``,
            ``channels`` (one entry per stage). Defaults to '18'.
        in_channels (int): Input image channels. Defaults to 3.
        stem_type (str): ``'conv7x7'`` or ``'conv3x3'``. Defaults to
            'conv7x7'.
        strides (Sequence[int]): Stride of the first block of each stage.
            Defaults to ``(1, 2, 2, 2)``.
        head_dims (int): Channels per attention head. Defaults to 64.
        window_size (int): Attention window side. Defaults to 7.
        drop_rate (float): Dropout after the attention projection.
            Defaults to 0.
        attn_drop_rate (float): Dropout on attention weights. Defaults to 0.
        drop_path_rate (float): Stochastic depth; block ``j`` of the ``n``
            blocks gets ``rate * j / (n - 1)``. Defaults to 0 (official).
        impl (str): Attention path, ``'fused'`` (SDPA) or ``'literal'``.
            Defaults to 'fused'.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        **kwargs: ``out_indices`` (default -1, the last stage),
            ``frozen_stages``, ``norm_eval``, ``with_cp`` (each block
            checkpoints itself) and ``init_cfg`` (default None: PyTorch's
            init, as the official code) of :class:`ZooBackbone`.
    """
    arch_zoo = {
        '18': {
            'depths': (2, 2, 2, 2),
            'msa_depths': (0, 1, 1, 1),
            'num_heads': (3, 6, 12, 24),
            'channels': (64, 128, 256, 512),
        },
        '34': {
            'depths': (3, 4, 6, 4),
            'msa_depths': (0, 1, 2, 2),
            'num_heads': (3, 6, 12, 24),
            'channels': (64, 128, 256, 512),
        },
    }
    essential_keys = ('depths', 'msa_depths', 'num_heads', 'channels')
    FIRST_CONV = 'stem.0'

    def __init__(self,
                 arch: Union[str, dict] = '18',
                 in_channels: int = 3,
                 stem_type: str = 'conv7x7',
                 strides: Sequence[int] = (1, 2, 2, 2),
                 head_dims: int = 64,
                 window_size: int = 7,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 impl: str = 'fused',
                 norm_cfg: dict = dict(type='BN'),
                 **kwargs):
        arch = parse_arch(arch, self.arch_zoo, self.essential_keys,
                          self.essential_keys)
        num_stages = check_per_stage({'strides': strides},
                                     len(arch['depths']))
        for depth, msa_depth in zip(arch['depths'], arch['msa_depths']):
            if not 0 <= 2 * msa_depth <= depth:
                raise ValueError(
                    f'A stage of {depth} blocks holds at most {depth // 2} '
                    f'MSA blocks, got msa_depths={arch["msa_depths"]}.')
        check_choice(stem_type, STEM_TYPES, 'stem_type')
        super().__init__(num_stages, **kwargs)

        self.depths = tuple(arch['depths'])
        self.msa_depths = tuple(arch['msa_depths'])
        self.channels = tuple(arch['channels'])
        self.window_size = window_size

        stem_channels = self.channels[0]
        if stem_type == 'conv7x7':
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, stem_channels, 7, 2, 3, bias=False),
                nn.MaxPool2d(3, 2, 1))
            stem_stride = 4
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, stem_channels, 3, 1, 1, bias=False))
            stem_stride = 1

        dpr = self.drop_path_rates(drop_path_rate, self.depths)
        self.stage_strides = []
        total_stride = stem_stride
        in_ch = stem_channels
        for i, (depth, msa_depth, heads, out_ch) in enumerate(
                zip(self.depths, self.msa_depths, arch['num_heads'],
                    self.channels)):
            is_msa = [False] * (depth - 2 * msa_depth) + [False, True
                                                          ] * msa_depth
            blocks = []
            for j, msa in enumerate(is_msa):
                stride = strides[i] if j == 0 else 1
                if msa:
                    assert stride == 1, \
                        'An MSA block cannot open a strided stage.'
                    block = AlterNetMSABlock(
                        in_ch,
                        out_ch,
                        num_heads=heads,
                        head_dims=head_dims,
                        window_size=window_size,
                        attn_drop_rate=attn_drop_rate,
                        drop_rate=drop_rate,
                        drop_path_rate=dpr[i][j],
                        norm_cfg=norm_cfg,
                        impl=impl,
                        with_cp=self.with_cp)
                else:
                    block = PreActBasicBlock(
                        in_ch,
                        out_ch,
                        stride=stride,
                        drop_path_rate=dpr[i][j],
                        norm_cfg=norm_cfg,
                        with_cp=self.with_cp)
                blocks.append(block)
                in_ch = out_ch
            total_stride *= strides[i]
            self.stage_strides.append(total_stride)
            self.add_module(f'layer{i + 1}', nn.Sequential(*blocks))

        for i in self.out_indices:
            self.add_module(f'norm{i}',
                            build_norm_layer(norm_cfg, self.channels[i])[1])
        self.act = build_activation_layer(dict(type='ReLU'))

        self._freeze_stages()

    def check_input_size(self, hw: Tuple[int, int]) -> None:
        """Raise if an input size leaves an MSA stage off the window grid.

        Every stride-2 op here (padded conv, max-pool, 1x1 shortcut) maps a
        side ``s`` to ``ceil(s / 2)``, so stage ``i`` sees
        ``ceil(side / stage_strides[i])``.

        Args:
            hw (tuple[int, int]): Input height and width.
        """
        for i, stride in enumerate(self.stage_strides):
            if not self.msa_depths[i]:
                continue
            h, w = (math.ceil(s / stride) for s in hw)
            if h % self.window_size or w % self.window_size:
                raise ValueError(
                    f'AlterNet: a {hw[0]}x{hw[1]} input gives {h}x{w} maps '
                    f'at stage {i + 1}, whose sides are not multiples of '
                    f'window_size={self.window_size}. With the 7x7 stem and '
                    f'window 7 use input sides that are multiples of 224 '
                    f'(224, 448, ...).')

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Return ``act(norm_i(stage_i))`` for each ``i`` in out_indices."""
        self.check_input(x)
        self.check_input_size(tuple(x.shape[-2:]))
        x = self.stem(x)
        outs = []
        for i in range(self.num_stages):
            x = getattr(self, f'layer{i + 1}')(x)
            if i in self.out_indices:
                outs.append(self.act(getattr(self, f'norm{i}')(x)))
        return tuple(outs)

    def stem_and_stages(self):
        return ['stem'], [[f'layer{i + 1}', f'norm{i}']
                          for i in range(self.num_stages)]

    def stage_taps(self):
        """The stages' outputs; the last one after its norm + ReLU (the
        classifier's input), as timm's pre-activation ResNets read it."""
        taps = [
            StageTap(f'layer{i + 1}', map_output, c, r)
            for i, (c, r) in enumerate(zip(self.channels, self.stage_strides))
        ]
        last = self.num_stages - 1
        if last in self.out_indices:
            taps[last].module = 'act'
        return taps
