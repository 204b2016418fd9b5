"""Plain multi-head self-attention with the token-block interface.

A drop-in replacement for :class:`~lect_mm.blocks.LeMSA` (ViT-style global
attention, Vaswani et al. 2017) used by the ViT/CeiT baselines and for
ablations: ``forward(x, hw_shape)`` with ``hw_shape`` accepted and unused.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from einops import rearrange
from mmengine.model import BaseModule

from mmpretrain.registry import MODELS
from .dropout import FastDropout
from .functional import IMPLS, softmax_attention
from .utils import check_choice


@MODELS.register_module()
class MultiheadSelfAttention(BaseModule):
    """Multi-head self-attention over all ``N`` tokens.

    ``qkv = Linear(C -> 3C)`` with output channels laid out as
    ``(3, heads, d)`` (timm / mmpretrain layout), softmax attention with
    scale ``qk_scale or d^-0.5``, then ``proj = Linear(C -> C)`` and dropout.
    ``impl='fused'`` runs
    :func:`torch.nn.functional.scaled_dot_product_attention`;
    ``impl='literal'`` writes the softmax out (use it to count FLOPs or to
    read the map). ``return_attn_map = True`` stores the ``(B, m, N, N)``
    softmaxed map (before dropout, detached) in ``attn_map``.

    Args:
        embed_dims (int): Number of channels ``C``.
        num_heads (int): Number of heads; must divide ``embed_dims``.
        qkv_bias (bool): Bias of the qkv projection. Defaults to False.
        attn_drop (float): Attention-weight dropout. Defaults to 0.
        proj_drop (float): Output dropout. Defaults to 0.
        qk_scale (float, optional): Logit scale; ``head_dim ** -0.5`` when
            None. Defaults to None.
        impl (str): ``'fused'`` or ``'literal'``. Defaults to 'fused'.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = False,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 qk_scale: Optional[float] = None,
                 impl: str = 'fused',
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible '
                             f'by num_heads ({num_heads}).')
        check_choice(impl, IMPLS, 'impl')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.impl = impl
        self.scale = qk_scale or (embed_dims // num_heads)**-0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = FastDropout(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = FastDropout(proj_drop)
        self.return_attn_map = False
        self.attn_map = None

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        """Forward tokens ``x`` (B, N, C); ``hw_shape`` is unused.

        Returns:
            torch.Tensor: Tokens (B, N, C).
        """
        q, k, v = rearrange(
            self.qkv(x), 'b n (three m d) -> three b m n d', three=3,
            m=self.num_heads)
        out, attn_map = softmax_attention(
            q, k, v, self.scale, self.attn_drop.p if self.training else 0.,
            self.impl, need_map=self.return_attn_map)
        if self.return_attn_map:
            self.attn_map = attn_map
        out = rearrange(out, 'b m n d -> b n (m d)')
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'impl={self.impl!r}')
