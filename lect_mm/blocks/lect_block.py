"""The LeCT transformer block (LeCT report §3)."""
from typing import Tuple

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS
from torch import nn

from lect_mm.blocks.utils import (channels_last_weights, run_checkpointed,
                                  set_defaults, takes_hw_shape)


@MODELS.register_module()
class LeCTBlock(BaseModule):
    """Pre-norm block: ``x += DP(attn(LN(x)))``; ``x += DP(ffn(LN(x)))``.

    ``attn`` and ``ffn`` are token blocks built from configs with
    ``embed_dims`` as default argument, so LeMSA, LeMSAv2,
    MultiheadSelfAttention, LeFFN (or any block with
    ``forward(x, hw_shape)``) can be swapped in from a config. The FFN may
    also be token-wise, ``forward(x)``, as mmcv's ``FFN``: whether its
    ``forward`` takes ``hw_shape`` is read once at build time, and an FFN
    that adds its own identity (``add_identity``, True by default in mmcv's
    ``FFN``) is built with ``add_identity=False`` unless the config asks for
    it, which raises (the block adds the residual). Submodules ``norm1``,
    ``attn``, ``norm2``, ``ffn`` (reference: ``norm1``, ``leatt``,
    ``norm2``, ``leff``).

    ``with_cp`` is the one checkpointing switch of the block: a sub-block
    that implements it (has a ``with_cp`` attribute, as LeMSA, LeMSAv2 and
    LeFFN, which recompute only their cheap layers) gets the block's value;
    any other runs under ``torch.utils.checkpoint``. The block itself is
    never run twice, and a sub-config that sets ``with_cp`` raises.

    Args:
        embed_dims (int): Number of channels ``C``.
        attn_cfg (dict): Token-mixer config, e.g.
            ``dict(type='LeMSA', num_heads=2, sr_ratio=14)``.
        ffn_cfg (dict): Channel-mixer config, e.g.
            ``dict(type='LeFFN', ffn_ratio=2)`` or
            ``dict(type='FFN', feedforward_channels=128)``.
        norm_cfg (dict): Norm config. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        drop_path_rate (float): Stochastic-depth rate. Defaults to 0.
        with_cp (bool): Gradient checkpointing of the sub-blocks.
            Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 attn_cfg: dict,
                 ffn_cfg: dict,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 drop_path_rate: float = 0.,
                 with_cp: bool = False,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        for name, cfg in (('attn_cfg', attn_cfg), ('ffn_cfg', ffn_cfg)):
            if 'with_cp' in cfg:
                raise ValueError(
                    f'{name} sets with_cp; checkpointing has one switch, the '
                    "block's (a backbone's) with_cp, which reaches every "
                    'sub-block.')
        self.embed_dims = embed_dims
        self.with_cp = with_cp
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = MODELS.build(
            attn_cfg, default_args=dict(embed_dims=embed_dims))
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        ffn_cfg = set_defaults(ffn_cfg, add_identity=False)
        self.ffn = MODELS.build(
            ffn_cfg, default_args=dict(embed_dims=embed_dims))
        if getattr(self.ffn, 'add_identity', False):
            raise ValueError(
                'ffn_cfg: add_identity=True would add the identity twice '
                '(LeCTBlock adds the residual itself); leave it unset or '
                'set it to False.')
        self.ffn_takes_hw_shape = takes_hw_shape(self.ffn, 'ffn_cfg')
        self.drop_path = (
            DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity())
        for sub in (self.attn, self.ffn):
            if hasattr(sub, 'with_cp'):
                sub.with_cp = with_cp
        # LeMSA and LeFFN run their convolutions on channels_last maps
        channels_last_weights(self)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Forward tokens ``x`` (B, N, C) on the grid ``hw_shape`` = (H, W).

        Returns:
            torch.Tensor: Tokens (B, N, C).
        """
        x = x + self.drop_path(
            run_checkpointed(self.attn, self.norm1(x), hw_shape,
                             with_cp=self.with_cp))
        args = (hw_shape, ) if self.ffn_takes_hw_shape else ()
        return x + self.drop_path(
            run_checkpointed(self.ffn, self.norm2(x), *args,
                             with_cp=self.with_cp))
