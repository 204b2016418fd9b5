"""CeiT blocks: Image-to-Tokens stem, LeFF with class-token split, LCA.

Paper: Yuan et al., "Incorporating Convolution Designs into Visual
Transformers" (CeiT), ICCV 2021. References: the official code
(coeusguo/ceit, ``ceit_model.py``) and the LeCT author's ``CeiT(GAP).py``
(ysj9909/Vision_Backbone_projects), which differ only where noted.
"""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS

from .attention import MultiheadSelfAttention
from .ffn import LeFFN
from .functional import softmax_attention
from .utils import build_attention, build_mlp, check_grid, conv_out_size


@MODELS.register_module()
class Image2Tokens(BaseModule):
    """Image-to-Tokens stem (CeiT paper, section "Image-to-Tokens with
    Low-level Features").

    Conv k×k (stride 2, padding k//2, no bias) → norm → max-pool 3×3 stride 2
    padding 1. There is no activation, as in both reference files. The
    patch projection that follows (a 4×4/4 convolution) belongs to the
    backbone.

    Args:
        in_channels (int): Input image channels. Defaults to 3.
        out_channels (int): Stem width; 64 in the official CeiT, 128 in the
            LeCT author's file. Defaults to 64.
        kernel_size (int): Convolution kernel size. Defaults to 7.
        stride (int): Convolution stride. Defaults to 2.
        norm_cfg (dict): Norm layer after the convolution.
            Defaults to ``dict(type='BN')``.
        init_cfg (dict, optional): Initialisation config. Defaults to None
            (PyTorch defaults, as in the references).
    """

    def __init__(self,
                 in_channels: int = 3,
                 out_channels: int = 64,
                 kernel_size: int = 7,
                 stride: int = 2,
                 norm_cfg: dict = dict(type='BN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.out_channels = out_channels
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=kernel_size,
            stride=stride,
            padding=kernel_size // 2,
            bias=False)
        self.bn = build_norm_layer(norm_cfg, out_channels)[1]
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def output_size(self, size: int) -> int:
        """Spatial size after the stem for an input side ``size``."""
        size = conv_out_size(size, self.conv.kernel_size[0],
                             self.conv.stride[0], self.conv.padding[0])
        return conv_out_size(size, 3, 2, 1)  # the max pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C_in, H, W) → (B, out_channels, H/4, W/4)."""
        return self.maxpool(self.bn(self.conv(x)))


@MODELS.register_module()
class CeiTLeFF(LeFFN):
    """Locally-enhanced feed-forward with class-token split (CeiT paper,
    section "Locally-Enhanced Feed-Forward Network").

    The first ``num_extra_tokens`` tokens (the class token) are split off and
    concatenated back **unchanged**; the patch tokens go through
    :class:`~lect_mm.blocks.LeFFN` (Conv1×1 → BN → GELU → DWConv k×k → BN →
    GELU → Conv1×1 → BN) on their (H, W) grid. Inside a pre-norm residual the
    class token therefore receives its own normalised value, exactly as in
    both references. CeiT applies no dropout here (``ffn_drop`` stays 0).
    With ``num_extra_tokens=0`` this is the plain LeFF.

    Args:
        embed_dims (int): Token channels C.
        ffn_ratio (float): Hidden expansion ratio.
        num_extra_tokens (int): Leading tokens passed through unchanged.
            Defaults to 1.
        **kwargs: ``kernel_size``, ``ffn_drop``, ``with_bn``, ``norm_cfg``,
            ``act_cfg``, ``init_cfg`` of :class:`~lect_mm.blocks.LeFFN`.
    """

    def __init__(self,
                 embed_dims: int,
                 ffn_ratio: float,
                 num_extra_tokens: int = 1,
                 **kwargs):
        super().__init__(embed_dims, ffn_ratio, **kwargs)
        if num_extra_tokens < 0:
            raise ValueError(
                f'num_extra_tokens must be >= 0, got {num_extra_tokens}')
        self.num_extra_tokens = num_extra_tokens

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """x: (B, num_extra_tokens + H*W, C) → same shape."""
        h, w = check_grid(hw_shape)
        n = self.num_extra_tokens
        if x.shape[1] != n + h * w:
            raise ValueError(f'CeiTLeFF expects {n} + {h}*{w} tokens, got '
                             f'{x.shape[1]}')
        tokens = super().forward(x[:, n:], hw_shape)
        return torch.cat((x[:, :n], tokens), dim=1) if n else tokens


@MODELS.register_module()
class CeiTBlock(BaseModule):
    """CeiT encoder block: pre-norm MHSA followed by a pre-norm LeFF.

    ``x ← x + DP(MHSA(LN1(x), hw))``; ``x ← x + DP(LeFF(LN2(x), hw))``. The
    MHSA is built from ``attn_cfg``; the default
    :class:`~lect_mm.blocks.MultiheadSelfAttention` (qkv Linear C→3C in
    (3, heads, d) layout, proj Linear C→C) is CeiT's layout. The attention
    sees all ``num_extra_tokens + H·W`` tokens, so with a class token it
    must not depend on the (H, W) grid (LeMSA needs
    ``num_extra_tokens=0``).

    Args:
        embed_dims (int): Token channels C.
        num_heads (int): Attention heads.
        ffn_ratio (float): LeFF hidden expansion ratio.
        num_extra_tokens (int): Class tokens in front of the patch tokens
            (passed through the LeFF unchanged). Defaults to 1.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        drop_rate (float): Projection dropout of the attention.
            Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        kernel_size (int): LeFF depth-wise kernel. Defaults to 3.
        with_bn (bool): LeFF norm layers. Defaults to True.
        impl (str): Attention path, 'fused' or 'literal'.
            Defaults to 'fused'.
        attn_cfg (dict): Attention config, built with ``embed_dims``;
            ``num_heads``, ``qkv_bias``, ``attn_drop`` (``attn_drop_rate``),
            ``proj_drop`` (``drop_rate``) and ``impl`` are filled in where
            the config leaves them unset and its type accepts them.
            Defaults to ``dict(type='MultiheadSelfAttention')``.
        norm_cfg (dict): Token norm. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        ffn_norm_cfg (dict): LeFF norm. Defaults to ``dict(type='BN')``.
        act_cfg (dict): LeFF activation. Defaults to ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 ffn_ratio: float,
                 num_extra_tokens: int = 1,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 kernel_size: int = 3,
                 with_bn: bool = True,
                 impl: str = 'fused',
                 attn_cfg: dict = dict(type='MultiheadSelfAttention'),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 ffn_norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = build_attention(attn_cfg, embed_dims, num_heads,
                                    qkv_bias, attn_drop_rate, drop_rate,
                                    impl)
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.leff = CeiTLeFF(
            embed_dims,
            ffn_ratio,
            num_extra_tokens=num_extra_tokens,
            kernel_size=kernel_size,
            with_bn=with_bn,
            norm_cfg=ffn_norm_cfg,
            act_cfg=act_cfg)
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
        x = x + self.drop_path(self.leff(self.norm2(x), hw_shape))
        return x


@MODELS.register_module()
class LCAttention(MultiheadSelfAttention):
    """Layer-wise class-token attention: the query comes from the last row
    only (CeiT paper, section "Layer-wise Class-Token Attention").

    Same parameters as :class:`~lect_mm.blocks.MultiheadSelfAttention`: one
    ``qkv`` Linear(C→3C) whose rows ``[:C]`` make q and ``[C:]`` make k and
    v (in (2, heads, d) layout), and ``proj`` Linear(C→C) — the layout of
    both references. The attention is computed for the last token only,
    which is all the LCA uses.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        **kwargs: ``attn_drop``, ``proj_drop``, ``qk_scale``, ``impl``
            ('fused' or 'literal'), ``init_cfg`` of
            :class:`~lect_mm.blocks.MultiheadSelfAttention`.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 **kwargs):
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, **kwargs)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Sequence[int]] = None) -> torch.Tensor:
        """x: (B, L, C) class tokens → (B, 1, C) for the last one."""
        c = self.embed_dims
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x[:, -1:], weight[:c], None if bias is None else bias[:c])
        kv = F.linear(x, weight[c:], None if bias is None else bias[c:])
        q = rearrange(q, 'b n (m d) -> b m n d', m=self.num_heads)
        k, v = rearrange(
            kv, 'b n (two m d) -> two b m n d', two=2, m=self.num_heads)
        out, _ = softmax_attention(
            q, k, v, self.scale, self.attn_drop.p if self.training else 0.,
            self.impl)
        out = rearrange(out, 'b m n d -> b n (m d)')
        return self.proj_drop(self.proj(out))


@MODELS.register_module()
class LCABlock(BaseModule):
    """Layer-wise class-token attention block (CeiT paper, section
    "Layer-wise Class-Token Attention").

    Input: the class tokens emitted by the L encoder blocks, (B, L, C).
    ``z = x_L + LCAttention(LN1(x))`` (the un-normalised last class token
    plus the attention of its normalised value over all L), then
    ``z ← z + MLP(LN2(z))``. No drop path, as in the references.

    ``ffn_ratio`` sets the MLP hidden width ``int(C * ffn_ratio)``: 4 in the
    official CeiT-T; the LeCT author's ``Mlp`` ignores its hidden argument
    (``hidden = in_features``), so ``ceit_ref`` uses 1.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        ffn_ratio (float): MLP hidden width over ``embed_dims``.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        drop_rate (float): Projection/MLP dropout. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        norm_cfg (dict): Norm config. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        act_cfg (dict): MLP activation. Defaults to ``dict(type='GELU')``.
        impl (str): Attention path, 'fused' or 'literal'.
            Defaults to 'fused'.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 ffn_ratio: float,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 act_cfg: dict = dict(type='GELU'),
                 impl: str = 'fused',
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = LCAttention(
            embed_dims,
            num_heads,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate,
            impl=impl)
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = build_mlp(embed_dims, int(embed_dims * ffn_ratio),
                             act_cfg, drop_rate)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Sequence[int]] = None) -> torch.Tensor:
        """x: (B, L, C) → (B, 1, C). ``hw_shape`` is unused."""
        z = x[:, -1:] + self.attn(self.norm1(x))
        return self.ffn(self.norm2(z), identity=z)
