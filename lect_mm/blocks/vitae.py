"""ViTAE blocks: PRM, PCM, TokenPerformer, ReductionCell, NormalCell.

Paper: Xu et al., "ViTAE: Vision Transformer Advanced by Exploring
Intrinsic Inductive Bias", NeurIPS 2021 (sections "Reduction cell" and
"Normal cell"). Reference: ViTAE-Transformer/ViTAE-Transformer,
``Image-Classification/vitae``, and the T2T-ViT token Performer it uses.
"""
import math
from contextlib import nullcontext
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmengine.model import BaseModule, Sequential
from mmpretrain.registry import MODELS

from .dropout import FastDropout
from .functional import map_to_tokens, tokens_to_map
from .utils import build_attention, build_mlp, check_hw_shape

RC_TOKEN_TYPES = ('performer', 'performer_less')


def _to_map(x: torch.Tensor, hw_shape: Optional[Sequence[int]]):
    """Accept a (B, C, H, W) map or (B, N, C) tokens with ``hw_shape``."""
    if x.dim() == 4:
        return x
    if hw_shape is None:
        raise ValueError('hw_shape is required for (B, N, C) token input')
    return tokens_to_map(x, check_hw_shape(x, hw_shape))


@MODELS.register_module()
class PRM(BaseModule):
    """Pyramid reduction module (ViTAE paper, section "Reduction cell").

    One ``Conv k×k (stride = downsample ratio, dilation d, bias) → GELU``
    per dilation rate, with padding ``ceil(((k−1)·d + 1 − stride) / 2)``
    (2/5/8/11 for k=7, s=4, d=1..4); the outputs are concatenated along the
    channels dilation-major (channel ``i·C + c`` is channel c of dilation
    i) and flattened to tokens. For an input side not divisible by the
    stride, that side gets ``ceil(stride/2) − 1`` extra padding (as in
    ViTAE-v2), so every branch and the PCM give ``ceil(H/stride)``;
    divisible sizes are computed exactly as in ViTAE.

    Args:
        in_channels (int): Input channels.
        embed_dims (int): Output channels of every dilated convolution.
        kernel_size (int): Kernel size. Defaults to 7.
        stride (int): Down-sampling ratio. Defaults to 4.
        dilations (Sequence[int]): Dilation rates. Defaults to (1, 2, 3, 4).
        act_cfg (dict): Activation. Defaults to ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 kernel_size: int = 7,
                 stride: int = 4,
                 dilations: Sequence[int] = (1, 2, 3, 4),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if not dilations:
            raise ValueError('dilations must not be empty')
        self.dilations = tuple(dilations)
        self.stride = stride
        self.extra_padding = math.ceil(stride / 2) - 1
        self.out_channels = embed_dims * len(self.dilations)
        self.convs = nn.ModuleList()
        for d in self.dilations:
            padding = math.ceil(((kernel_size - 1) * d + 1 - stride) / 2)
            self.convs.append(
                nn.Sequential(
                    nn.Conv2d(
                        in_channels,
                        embed_dims,
                        kernel_size,
                        stride=stride,
                        padding=padding,
                        dilation=d), build_activation_layer(act_cfg)))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, tuple]:
        """(B, C_in, H, W) → (tokens (B, H'·W', D·C), (H', W'))."""
        h, w = x.shape[-2:]
        extra = (self.extra_padding * (h % self.stride != 0),
                 self.extra_padding * (w % self.stride != 0))
        if any(extra):
            outs = []
            for conv, act in self.convs:
                padding = tuple(p + e for p, e in zip(conv.padding, extra))
                outs.append(
                    act(
                        F.conv2d(x, conv.weight, conv.bias, conv.stride,
                                 padding, conv.dilation)))
        else:
            outs = [conv(x) for conv in self.convs]
        sizes = {(int(o.shape[-2]), int(o.shape[-1])) for o in outs}
        if len(sizes) != 1:
            raise ValueError(f'PRM branches give different sizes {sizes} for '
                             f'input {tuple(x.shape[-2:])}')
        y = torch.cat(outs, dim=1)
        hw_shape = tuple(y.shape[-2:])
        return map_to_tokens(y), hw_shape


@MODELS.register_module()
class PCM(Sequential):
    """Parallel convolutional module (ViTAE paper, sections "Reduction cell"
    and "Normal cell").

    Three 3×3 convolutions (padding 1, bias, ``groups``), each followed by
    an optional norm and the activation:
    ``in → mid[0] → mid[1] → out`` with strides ``strides``.
    The reduction cell uses ``with_norm=(False, True, False)`` (conv → SiLU →
    conv → BN → SiLU → conv → SiLU); the normal cell
    ``with_norm=(True, True, False)``. Built as a ``Sequential`` so the
    parameter keys follow the reference's ``PCM.<index>`` layout.

    Args:
        in_channels (int): Input channels.
        mid_channels (Sequence[int]): Outputs of the first two convs.
        out_channels (int): Output channels.
        strides (Sequence[int]): Strides of the three convs.
            Defaults to (1, 1, 1).
        groups (int): Convolution groups. Defaults to 1.
        with_norm (Sequence[bool]): Norm after each conv.
            Defaults to (True, True, False).
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation. Defaults to
            ``dict(type='SiLU', inplace=True)``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 mid_channels: Sequence[int],
                 out_channels: int,
                 strides: Sequence[int] = (1, 1, 1),
                 groups: int = 1,
                 with_norm: Sequence[bool] = (True, True, False),
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='SiLU', inplace=True),
                 init_cfg: Optional[dict] = None):
        if len(mid_channels) != 2 or len(strides) != 3 or len(with_norm) != 3:
            raise ValueError('PCM needs 2 mid_channels, 3 strides and 3 '
                             'with_norm flags')
        channels = [in_channels, *mid_channels, out_channels]
        layers = []
        for i in range(3):
            layers.append(
                nn.Conv2d(
                    channels[i],
                    channels[i + 1],
                    3,
                    stride=strides[i],
                    padding=1,
                    groups=groups))
            if with_norm[i]:
                layers.append(build_norm_layer(norm_cfg, channels[i + 1])[1])
            layers.append(build_activation_layer(act_cfg))
        super().__init__(*layers, init_cfg=init_cfg)


@MODELS.register_module()
class TokenPerformer(BaseModule):
    """Single-head token Performer of T2T-ViT, as used in ViTAE's reduction
    cells (ViTAE paper, section "Reduction cell").

    ``y = LN1(x)``; ``k, q, v = split(kqv(y))`` (in that order);
    ``φ(u) = exp(W·u − ‖u‖²/2) / √m`` with ``m = embed_dims·kernel_ratio``
    fixed random orthogonal features ``w`` (×√m). ``w`` is a frozen
    parameter (``requires_grad=False``), so it is in the state dict and in
    the parameter count, as in the reference. The kernel runs in fp32 even
    under autocast. ``a = φ(q)(φ(k)ᵀv) / (φ(q)·Σφ(k) + 1e-8)``;
    ``out = v + Dropout(proj(a))``; optionally ``out ← out + local`` (the
    reduction cell's PCM branch); ``out ← out + Dropout(MLP(LN2(out)))``
    with MLP = Linear(e→e) → GELU → Linear(e→e).

    Args:
        in_channels (int): Input token channels (``dim``).
        embed_dims (int): Output channels e (``in_dim``).
        kernel_ratio (float): m / e. Defaults to 0.5.
        proj_drop (float): Dropout after ``proj``. Defaults to 0.1
            (fixed in the reference).
        mlp_drop (float): Dropout after the MLP. Defaults to 0.1.
        eps (float): Denominator stabiliser. Defaults to 1e-8.
        norm_cfg (dict): Norm config. Defaults to
            ``dict(type='LN', eps=1e-5)``.
        act_cfg (dict): MLP activation. Defaults to ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 kernel_ratio: float = 0.5,
                 proj_drop: float = 0.1,
                 mlp_drop: float = 0.1,
                 eps: float = 1e-8,
                 norm_cfg: dict = dict(type='LN', eps=1e-5),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.embed_dims = embed_dims
        self.eps = eps
        self.norm1 = build_norm_layer(norm_cfg, in_channels)[1]
        self.kqv = nn.Linear(in_channels, 3 * embed_dims)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = FastDropout(proj_drop)
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.mlp = FFN(
            embed_dims=embed_dims,
            feedforward_channels=embed_dims,
            act_cfg=act_cfg,
            ffn_drop=0.,
            dropout_layer=dict(type='Dropout', drop_prob=mlp_drop),
            add_identity=True)
        self.m = int(embed_dims * kernel_ratio)
        if self.m < 1:
            raise ValueError(f'kernel_ratio {kernel_ratio} gives no random '
                             f'features for embed_dims {embed_dims}')
        self.w = nn.Parameter(
            torch.empty(self.m, embed_dims), requires_grad=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The fixed random features: orthogonal rows scaled by
        ``sqrt(m)``."""
        with torch.no_grad():
            w = nn.init.orthogonal_(torch.empty(self.w.shape))
            self.w.copy_(w * math.sqrt(self.m))

    def _phi(self, x: torch.Tensor) -> torch.Tensor:
        xd = (x * x).sum(dim=-1, keepdim=True) / 2
        return torch.exp(x @ self.w.float().t() - xd) / math.sqrt(self.m)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Performer attention of already-normalised tokens (B, N, C)."""
        k, q, v = self.kqv(x).split(self.embed_dims, dim=-1)
        # fp32 under autocast; a device without autocast (meta) runs as is
        device = x.device.type
        with (torch.autocast(device_type=device, enabled=False)
              if torch.amp.is_autocast_available(device) else nullcontext()):
            kp, qp, vf = self._phi(k.float()), self._phi(q.float()), v.float()
            denom = qp @ kp.sum(dim=1).unsqueeze(-1)
            y = (qp @ (kp.transpose(1, 2) @ vf)) / (denom + self.eps)
        return v + self.proj_drop(self.proj(y.to(v.dtype)))

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Sequence[int]] = None,
                local: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: (B, N, in_channels) → (B, N, embed_dims); ``local`` (B, N, e)
        is added after the attention. ``hw_shape`` is unused."""
        x = self.attention(self.norm1(x))
        if local is not None:
            x = x + local
        return self.mlp(self.norm2(x), identity=x)


@MODELS.register_module()
class ReductionCell(BaseModule):
    """ViTAE reduction cell (ViTAE paper, section "Reduction cell").

    ``'performer'``: tokens = TokenPerformer(PRM(x), local=PCM(x)) — the PRM
    tokens are normalised and attended, the PCM branch (on the cell's input
    map) is added, then the MLP. ``'performer_less'``: PRM tokens only (no
    attention, PCM or MLP; ``token_dims`` must equal
    ``len(dilations) * embed_dims``). The reference silently turns every
    other type into ``'performer_less'``; here they raise.

    Args:
        in_channels (int): Input channels.
        embed_dims (int): PRM (and PCM hidden) channels.
        token_dims (int): Output token channels.
        downsample_ratio (int): 1, 2 or 4. Defaults to 4.
        kernel_size (int): PRM kernel. Defaults to 7.
        dilations (Sequence[int]): PRM dilations. Defaults to (1, 2, 3, 4).
        tokens_type (str): 'performer' or 'performer_less'.
            Defaults to 'performer'.
        groups (int): PCM groups. Defaults to 1.
        kernel_ratio (float): Performer random-feature ratio.
            Defaults to 0.5.
        performer_drop (float): Performer proj/MLP dropout (fixed 0.1 in the
            reference). Defaults to 0.1.
        norm_cfg (dict): Token norm. Defaults to
            ``dict(type='LN', eps=1e-5)``.
        conv_norm_cfg (dict): PCM norm. Defaults to ``dict(type='BN')``.
        act_cfg (dict): PRM/MLP activation. Defaults to
            ``dict(type='GELU')``.
        pcm_act_cfg (dict): PCM activation. Defaults to
            ``dict(type='SiLU', inplace=True)``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 token_dims: int,
                 downsample_ratio: int = 4,
                 kernel_size: int = 7,
                 dilations: Sequence[int] = (1, 2, 3, 4),
                 tokens_type: str = 'performer',
                 groups: int = 1,
                 kernel_ratio: float = 0.5,
                 performer_drop: float = 0.1,
                 norm_cfg: dict = dict(type='LN', eps=1e-5),
                 conv_norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 pcm_act_cfg: dict = dict(type='SiLU', inplace=True),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if tokens_type not in RC_TOKEN_TYPES:
            raise ValueError(f'tokens_type must be one of '
                             f'{list(RC_TOKEN_TYPES)}, got {tokens_type!r}')
        if downsample_ratio not in (1, 2, 4):
            raise ValueError('downsample_ratio must be 1, 2 or 4, got '
                             f'{downsample_ratio}')
        self.tokens_type = tokens_type
        self.prm = PRM(
            in_channels,
            embed_dims,
            kernel_size=kernel_size,
            stride=downsample_ratio,
            dilations=dilations,
            act_cfg=act_cfg)
        if tokens_type == 'performer_less':
            if token_dims != self.prm.out_channels:
                raise ValueError(
                    "tokens_type='performer_less' outputs the PRM tokens: "
                    f'token_dims ({token_dims}) must equal len(dilations) * '
                    f'embed_dims ({self.prm.out_channels})')
            self.pcm = None
            self.attn = None
        else:
            strides = {4: (2, 2, 1), 2: (2, 1, 1), 1: (1, 1, 1)}
            self.pcm = PCM(
                in_channels, (embed_dims, embed_dims),
                token_dims,
                strides=strides[downsample_ratio],
                groups=groups,
                with_norm=(False, True, False),
                norm_cfg=conv_norm_cfg,
                act_cfg=pcm_act_cfg)
            self.attn = TokenPerformer(
                self.prm.out_channels,
                token_dims,
                kernel_ratio=kernel_ratio,
                proj_drop=performer_drop,
                mlp_drop=performer_drop,
                norm_cfg=norm_cfg,
                act_cfg=act_cfg)
        self.out_channels = token_dims

    def forward(
        self,
        x: torch.Tensor,
        hw_shape: Optional[Sequence[int]] = None
    ) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """x: a (B, C, H, W) map, or (B, N, C) tokens with ``hw_shape``.

        Returns:
            tuple: tokens (B, H'·W', token_dims) and (H', W').
        """
        x = _to_map(x, hw_shape)
        tokens, out_hw = self.prm(x)
        if self.attn is None:
            return tokens, out_hw
        local = self.pcm(x)
        if tuple(local.shape[-2:]) != out_hw:
            raise ValueError(f'PCM output {tuple(local.shape[-2:])} and PRM '
                             f'output {out_hw} differ for input '
                             f'{tuple(x.shape[-2:])}')
        local = map_to_tokens(local)
        return self.attn(tokens, local=local), out_hw


@MODELS.register_module()
class NormalCell(BaseModule):
    """ViTAE normal cell (ViTAE paper, section "Normal cell").

    ``local = DP(PCM(x))`` on the un-normalised token map;
    ``x ← x + DP(MHSA(LN1(x), hw)) + local``; ``x ← x + DP(MLP(LN2(x)))``,
    MHSA built from ``attn_cfg`` (by default
    :class:`~lect_mm.blocks.MultiheadSelfAttention`, as in ViTAE).
    PCM = Conv3×3(C→F, g) → BN → SiLU → Conv3×3(F→C, g) → BN → SiLU →
    Conv3×3(C→C, g) → SiLU with F = ``int(C * ffn_ratio)``. Leading
    ``num_extra_tokens`` (class tokens) skip the PCM branch.

    Args:
        embed_dims (int): Token channels C.
        num_heads (int): Attention heads.
        ffn_ratio (float): MLP hidden width over ``embed_dims`` (also sets
            the PCM width).
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        drop_rate (float): Projection/MLP dropout. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        groups (int): PCM groups. Defaults to 64.
        num_extra_tokens (int): Leading class tokens. Defaults to 0.
        impl (str): Attention path, 'fused' or 'literal'.
            Defaults to 'fused'.
        attn_cfg (dict): Attention config, built with ``embed_dims``;
            ``num_heads``, ``qkv_bias``, ``attn_drop`` (``attn_drop_rate``),
            ``proj_drop`` (``drop_rate``) and ``impl`` are filled in where
            the config leaves them unset and its type accepts them. It sees
            the class tokens too, so a grid attention (LeMSA) needs
            ``num_extra_tokens=0``. Defaults to
            ``dict(type='MultiheadSelfAttention')``.
        norm_cfg (dict): Token norm. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        conv_norm_cfg (dict): PCM norm. Defaults to ``dict(type='BN')``.
        act_cfg (dict): MLP activation. Defaults to ``dict(type='GELU')``.
        pcm_act_cfg (dict): PCM activation. Defaults to
            ``dict(type='SiLU', inplace=True)``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 ffn_ratio: float,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 groups: int = 64,
                 num_extra_tokens: int = 0,
                 impl: str = 'fused',
                 attn_cfg: dict = dict(type='MultiheadSelfAttention'),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 conv_norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 pcm_act_cfg: dict = dict(type='SiLU', inplace=True),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.num_extra_tokens = num_extra_tokens
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = build_attention(attn_cfg, embed_dims, num_heads,
                                    qkv_bias, attn_drop_rate, drop_rate,
                                    impl)
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        hidden_dims = int(embed_dims * ffn_ratio)
        self.ffn = build_mlp(embed_dims, hidden_dims, act_cfg, drop_rate,
                             drop_path_rate)
        self.pcm = PCM(
            embed_dims, (hidden_dims, embed_dims),
            embed_dims,
            groups=groups,
            with_norm=(True, True, False),
            norm_cfg=conv_norm_cfg,
            act_cfg=pcm_act_cfg)
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """x: (B, num_extra_tokens + H·W, C) → same shape."""
        n = self.num_extra_tokens
        local = self.pcm(_to_map(x[:, n:], hw_shape))
        local = self.drop_path(map_to_tokens(local))
        if n:
            local = torch.cat((local.new_zeros(local.shape[0], n,
                                               local.shape[2]), local),
                              dim=1)
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape)) + local
        return self.ffn(self.norm2(x), identity=x)
