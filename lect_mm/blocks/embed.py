"""Convolutional patch embedding at the start of every LeCT stage (LeCT
report §3)."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS

from .functional import map_to_tokens


@MODELS.register_module()
class ConvPatchEmbed(BaseModule):
    """Overlapping conv patch embedding: Conv2d → tokens → norm.

    ``proj = Conv2d(in_channels -> embed_dims, kernel_size, stride,
    padding, bias)``, flatten to ``(B, N, C)``, then ``norm`` (LayerNorm,
    eps 1e-5). LeCT uses kernel 7 / stride 4 for stage 1 and kernel 3 /
    stride 2 later (224 → 56 → 28 → 14). Submodules ``proj`` and ``norm``
    match the reference keys ``patch_embedI.{proj,norm}``.

    Args:
        in_channels (int): Input channels.
        embed_dims (int): Output channels ``C``.
        kernel_size (int): Conv kernel size.
        stride (int): Conv stride.
        padding (int, optional): Conv padding; ``kernel_size // 2`` when
            None. Defaults to None.
        norm_cfg (dict, optional): Token norm config; no norm when None.
            Defaults to ``dict(type='LN', eps=1e-5)``.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 kernel_size: int,
                 stride: int,
                 padding: Optional[int] = None,
                 norm_cfg: Optional[dict] = dict(type='LN', eps=1e-5),
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if padding is None:
            padding = kernel_size // 2
        self.proj = nn.Conv2d(
            in_channels, embed_dims, kernel_size, stride=stride,
            padding=padding, bias=True)
        self.norm = (
            build_norm_layer(norm_cfg, embed_dims)[1]
            if norm_cfg is not None else nn.Identity())

    def forward(self, x: torch.Tensor
                ) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """Embed a map ``x`` (B, C_in, H, W).

        Returns:
            tuple: tokens (B, H' * W', C) and ``(H', W')``.
        """
        x = self.proj(x)
        hw_shape = (x.shape[2], x.shape[3])
        return self.norm(map_to_tokens(x)), hw_shape
