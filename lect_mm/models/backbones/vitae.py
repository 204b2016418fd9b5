"""ViTAE backbone (Xu et al., NeurIPS 2021), ``ViTAE_basic_*`` family."""
from typing import Union

import torch
import torch.nn as nn
from mmpretrain.registry import MODELS

from lect_mm.blocks.functional import tokens_to_map
from lect_mm.blocks.vitae import NormalCell, ReductionCell
from lect_mm.models.utils import TRUNC_NORMAL_INIT_CFG, parse_arch
from .base_backbone import (StageTap, ZooBackbone, cumulative_strides,
                            token_output)


def _cell_output(args, out) -> torch.Tensor:
    """A reduction cell returns ``(tokens, hw_shape)``."""
    return tokens_to_map(out[0], out[1])


class _ViTAEStage(nn.Module):
    """A reduction cell followed by normal cells."""

    def __init__(self, rc: ReductionCell, ncs: nn.ModuleList):
        super().__init__()
        self.rc = rc
        self.ncs = ncs


@MODELS.register_module()
class ViTAE(ZooBackbone):
    """ViTAE: stages of one reduction cell (PRM + PCM + Performer) and
    ``nc_depths[i]`` normal cells (MHSA + PCM + MLP).

    No class token and no positional embedding; the classifier is the mean
    over the last stage's tokens → Linear, i.e. this backbone's last map +
    ``GlobalAveragePooling`` neck + ``LinearClsHead`` (exact). Each output is
    a stage's tokens as a (B, C, H, W) map (no norm: ViTAE has none at
    stage outputs).

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    stage 0's reduction cell; a stage is its reduction cell and normal
    cells (no output norm).

    Arches (whole classifier with a 10 / 100-class head, frozen Performer
    features included):

    - ``'tiny'``: ``ViTAE_basic_Tiny`` — 4,632,458 / 4,655,588 (4.6325M /
      4.6556M).
    - ``'6M'``: ``ViTAE_basic_6M`` (10 normal cells) — 6.3597M / 6.3828M.
    - ``'xs'``: our small-scale variant for the LeCT report's ~1.2M
      comparisons (not from the paper): ViTAE-T with every width halved
      (embed 32/32/64, tokens 32/32/128, PCM groups 32), same 7 normal cells
      and 4 heads (head dim 32) — 1,259,466 / 1,271,076.

    Args:
        arch (str | dict): A key of ``arch_zoo`` or a dict with the keys
            ``embed_dims, token_dims, downsample_ratios, kernel_sizes,
            dilations, rc_types, nc_depths, nc_heads, nc_groups,
            ffn_ratio`` (all but ``ffn_ratio`` with one entry per stage).
            Defaults to 'tiny'.
        in_channels (int): Input channels. Defaults to 3.
        qkv_bias (bool): Normal-cell qkv bias. Defaults to True.
        drop_rate (float): Normal-cell projection/MLP dropout.
            Defaults to 0.
        attn_drop_rate (float): Normal-cell attention dropout.
            Defaults to 0.
        drop_path_rate (float): Stochastic depth, linear over all normal
            cells (the reference offsets each stage by the previous stage's
            depth only, which is the same for its [0, 0, n] arches).
            Defaults to 0.
        performer_drop (float): Performer dropouts in the reduction cells
            (fixed 0.1 in the reference). Defaults to 0.1.
        attn_cfg (dict): Attention of every normal cell, built with the
            cell's ``embed_dims``, ``num_heads``, ``qkv_bias`` and dropouts
            filled in where accepted (see
            :class:`~lect_mm.blocks.NormalCell`), e.g.
            ``dict(type='LeMSA', sr_ratio=2)``. The reduction cells keep
            their Performer. Defaults to
            ``dict(type='MultiheadSelfAttention')``.
        norm_cfg (dict): Normal-cell norm. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        rc_norm_cfg (dict): Reduction-cell norm (the reference uses the
            PyTorch default eps there). Defaults to
            ``dict(type='LN', eps=1e-5)``.
        conv_norm_cfg (dict): PCM norm. Defaults to ``dict(type='BN')``.
        act_cfg (dict): PRM/MLP activation. Defaults to
            ``dict(type='GELU')``.
        pcm_act_cfg (dict): PCM activation. Defaults to
            ``dict(type='SiLU', inplace=True)``.
        init_cfg (dict | list[dict], optional): Defaults to trunc-normal
            (std 0.02, bias 0) Linear layers and unit LayerNorms; convs and
            BN keep PyTorch defaults, the Performer features stay frozen.
        **kwargs: ``out_indices`` (default -1, the last stage),
            ``frozen_stages``, ``norm_eval`` and ``with_cp`` (the normal
            cells run under checkpointing) of :class:`ZooBackbone`.
    """

    arch_zoo = {
        'tiny': dict(embed_dims=[64, 64, 128], token_dims=[64, 64, 256],
                     downsample_ratios=[4, 2, 2], kernel_sizes=[7, 3, 3],
                     dilations=[[1, 2, 3, 4], [1, 2, 3], [1, 2]],
                     rc_types=['performer', 'performer', 'performer_less'],
                     nc_depths=[0, 0, 7], nc_heads=[1, 1, 4],
                     nc_groups=[1, 1, 64], ffn_ratio=2),
    }  # yapf: disable
    # '6M' is 'tiny' with 10 normal cells; 'xs' is 'tiny' at half width.
    arch_zoo['6M'] = dict(arch_zoo['tiny'], nc_depths=[0, 0, 10])
    arch_zoo['xs'] = dict(arch_zoo['tiny'], embed_dims=[32, 32, 64],
                          token_dims=[32, 32, 128], nc_groups=[1, 1, 32])
    essential_keys = ('embed_dims', 'token_dims', 'downsample_ratios',
                      'kernel_sizes', 'dilations', 'rc_types', 'nc_depths',
                      'nc_heads', 'nc_groups', 'ffn_ratio')
    TRAINING_ARGS = ZooBackbone.TRAINING_ARGS + ('performer_drop', )

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 performer_drop: float = 0.1,
                 attn_cfg: dict = dict(type='MultiheadSelfAttention'),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 rc_norm_cfg: dict = dict(type='LN', eps=1e-5),
                 conv_norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 pcm_act_cfg: dict = dict(type='SiLU', inplace=True),
                 init_cfg=TRUNC_NORMAL_INIT_CFG,
                 **kwargs):
        a = parse_arch(arch, self.arch_zoo, self.essential_keys,
                       self.essential_keys[:-1])
        super().__init__(len(a['embed_dims']), init_cfg=init_cfg, **kwargs)
        self.arch_settings = a
        self.out_channels = list(a['token_dims'])

        dpr = self.drop_path_rates(drop_path_rate, a['nc_depths'])
        self.stages = nn.ModuleList()
        for i in range(self.num_stages):
            rc = ReductionCell(
                in_channels,
                a['embed_dims'][i],
                a['token_dims'][i],
                downsample_ratio=a['downsample_ratios'][i],
                kernel_size=a['kernel_sizes'][i],
                dilations=a['dilations'][i],
                tokens_type=a['rc_types'][i],
                performer_drop=performer_drop,
                norm_cfg=rc_norm_cfg,
                conv_norm_cfg=conv_norm_cfg,
                act_cfg=act_cfg,
                pcm_act_cfg=pcm_act_cfg)
            dims = a['token_dims'][i]
            ncs = nn.ModuleList([
                NormalCell(
                    dims,
                    a['nc_heads'][i],
                    a['ffn_ratio'],
                    qkv_bias=qkv_bias,
                    drop_rate=drop_rate,
                    attn_drop_rate=attn_drop_rate,
                    drop_path_rate=dpr[i][j],
                    groups=a['nc_groups'][i],
                    attn_cfg=attn_cfg,
                    norm_cfg=norm_cfg,
                    conv_norm_cfg=conv_norm_cfg,
                    act_cfg=act_cfg,
                    pcm_act_cfg=pcm_act_cfg)
                for j in range(a['nc_depths'][i])
            ])
            self.stages.append(_ViTAEStage(rc, ncs))
            in_channels = dims

        self._freeze_stages()

    @classmethod
    def first_conv(cls, arch=None):
        """The first reduction cell's PRM convolutions (one per dilation)
        and its PCM's first convolution (``arch`` None: 'tiny')."""
        a = parse_arch(arch or 'tiny', cls.arch_zoo, cls.essential_keys,
                       cls.essential_keys[:-1])
        return tuple(f'stages.0.rc.prm.convs.{i}.0'
                     for i in range(len(a['dilations'][0]))) + (
                         'stages.0.rc.pcm.0', )

    def stem_and_stages(self):
        return ['stages.0.rc'], [[f'stages.{i}']
                                 for i in range(self.num_stages)]

    def stage_taps(self):
        """The stages' tokens: after the last normal cell, or the reduction
        cell of a stage without normal cells."""
        reductions = cumulative_strides(
            self.arch_settings['downsample_ratios'])
        taps = []
        for i, stage in enumerate(self.stages):
            if len(stage.ncs):
                module, to_map = f'stages.{i}.ncs.{len(stage.ncs) - 1}', \
                    token_output
            else:
                module, to_map = f'stages.{i}.rc', _cell_output
            taps.append(
                StageTap(module, to_map, self.out_channels[i], reductions[i]))
        return taps

    def forward(self, x: torch.Tensor) -> tuple:
        self.check_input(x)
        outs = []
        hw_shape = None
        for i, stage in enumerate(self.stages):
            x, hw_shape = stage.rc(x, hw_shape)
            for nc in stage.ncs:
                x = self.run_block(nc, x, hw_shape)
            if i in self.out_indices:
                outs.append(tokens_to_map(x, hw_shape))
        return tuple(outs)
