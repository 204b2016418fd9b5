"""LeMSA: locally-enhanced multi-head self-attention (LeCT report §3.3).

:class:`LeMSA` (LeCT v1/v3) and :class:`LeMSAv2` (LeCT v2, report Appendix)
build their value, query and key maps and combine the attention output;
pooling, attention, query upsampling and projection come from
:class:`~lect_mm.blocks.pooled_attention.PooledKeyAttention`.
"""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer, build_norm_layer

from mmpretrain.registry import MODELS
from .functional import map_to_tokens, tokens_to_map
from .pooled_attention import PooledKeyAttention, resolve_impl_for
from .recompute import recompute, recompute_active
from .utils import check_choice, check_hw_shape

QKV_MODES = ('sequential', 'parallel')


def _conv_bn(channels: int, kernel_size: int, bias: bool,
             norm_cfg: dict) -> nn.Sequential:
    """Depthwise conv + norm, keys ``0.*`` / ``1.*`` as in the reference."""
    return nn.Sequential(
        nn.Conv2d(
            channels,
            channels,
            kernel_size,
            padding=kernel_size // 2,
            groups=channels,
            bias=bias),
        build_norm_layer(norm_cfg, channels)[1])


@MODELS.register_module()
class LeMSA(PooledKeyAttention):
    """Locally-enhanced multi-head self-attention (report §3.3).

    With tokens laid out as a ``(B, C, H, W)`` map::

        v    = Linear(C -> C, bias=qkv_bias)(x)
        a    = BN(DWConv_k(v))                  # conv1
        q    = AvgPool_K(a)                     # (B, C, h', w')
        b    = BN(DWConv_k(GELU(a)))            # conv2
        k    = AvgPool_K(b)
        skip = GELU(b)
        per head: A = softmax(Up_key(q kᵀ) * C^-0.5) ; o = A v_head
        out  = QueryUpsampler(o, (H, W)) + skip
        y    = Dropout(Linear(C -> C)(out))

    The scale uses the full ``C``, as the reference. Table-3 ablation:
    ``conv_skip=False`` drops ``skip``; ``qkv_mode='parallel'`` computes
    ``b`` from ``v`` instead of ``GELU(a)``. Reference keys (under
    ``blocksI.J.leatt.``) are the attribute names, but ``query_upsampler``
    is ``v_upsample`` (see :mod:`lect_mm.blocks.upsample`).

    Args:
        embed_dims (int): Number of channels ``C``.
        num_heads (int): Number of heads ``m``; must divide ``embed_dims``.
        sr_ratio (int, optional): Pooling kernel and stride ``K``; give
            exactly one of ``sr_ratio`` and ``pool_size``. Defaults to None.
        pool_size (int | tuple[int, int], optional): Fixed pooled grid
            ``(h', w')``. Defaults to None.
        kernel_size (int): Depthwise kernel of conv1/conv2. Defaults to 3.
        qkv_bias (bool): Bias of ``proj_v`` and of the depthwise convs.
            Defaults to False.
        attn_drop (float): Attention-weight dropout. Defaults to 0.
        proj_drop (float): Output dropout. Defaults to 0.
        key_upsample (str): Key-axis resize mode. Defaults to 'bilinear'.
        query_upsampler (dict): Query upsampler config, built with
            ``channels=C``. Defaults to ``dict(type='ResizeDWConvUpsampler')``.
        conv_skip (bool): Add ``skip``. Defaults to True.
        qkv_mode (str): ``'sequential'`` or ``'parallel'``.
            Defaults to 'sequential'.
        impl (str): ``'auto'``, ``'fused'`` or ``'literal'``.
            Defaults to 'auto'.
        norm_cfg (dict): Norm of the convs and of the query upsampler
            where it has one and its config sets none. Defaults to
            ``dict(type='BN')``.
        act_cfg (dict): Activation. Defaults to ``dict(type='GELU')``.
        with_cp (bool): Gradient checkpointing: recompute the depthwise
            branches and the attention in backward instead of keeping their
            intermediates
            (:class:`~lect_mm.blocks.pooled_attention.PooledKeyAttention`).
            Defaults to False.
        input_size (tuple[int, int], optional): The ``(H, W)`` grid the
            layer is built for (see
            :class:`~lect_mm.blocks.pooled_attention.PooledKeyAttention`).
            Defaults to None.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    conv_bn_pairs = (('conv1.0', 'conv1.1'), ('conv2.0', 'conv2.1'))

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: Optional[int] = None,
                 pool_size: Optional[Union[int, Sequence[int]]] = None,
                 kernel_size: int = 3,
                 qkv_bias: bool = False,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 key_upsample: str = 'bilinear',
                 query_upsampler: dict = dict(type='ResizeDWConvUpsampler'),
                 conv_skip: bool = True,
                 qkv_mode: str = 'sequential',
                 impl: str = 'auto',
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 with_cp: bool = False,
                 input_size: Optional[Sequence[int]] = None,
                 init_cfg=None):
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible '
                             f'by num_heads ({num_heads}).')
        super().__init__(embed_dims, num_heads, sr_ratio, pool_size,
                         key_upsample, attn_drop, proj_drop, impl,
                         with_cp=with_cp, input_size=input_size,
                         init_cfg=init_cfg)
        self.qkv_mode = check_choice(qkv_mode, QKV_MODES, 'qkv_mode')
        self.conv_skip = conv_skip
        self.proj_v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.conv1 = _conv_bn(embed_dims, kernel_size, qkv_bias, norm_cfg)
        self.conv2 = _conv_bn(embed_dims, kernel_size, qkv_bias, norm_cfg)
        self.act = build_activation_layer(act_cfg)
        self._build_output(query_upsampler, embed_dims, norm_cfg)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Tokens ``x`` (B, N, C) on the grid ``hw_shape`` -> (B, N, C)."""
        H, W = check_hw_shape(x, hw_shape)
        if self.exports_static(x, (H, W)):
            return self._forward_exported(x, (H, W))
        v = self.proj_v(x)
        v_map = tokens_to_map(v, (H, W))
        recompute_now = recompute_active(self)
        if recompute_now:
            q_map, k_map, skip = recompute(self._local, v_map, module=self)
        else:
            q_map, k_map, skip = self._local(v_map)
        out = self.attend(q_map, k_map, v, (H, W), recompute_now)
        if skip is not None:
            out = out + skip
        return self.proj_drop(
            self.proj(map_to_tokens(out)))

    def _forward_exported(self, x: torch.Tensor,
                          hw_shape: Tuple[int, int]) -> torch.Tensor:
        """:meth:`forward` under export on fixed sizes: the pooled queries
        and keys as tokens (:meth:`pool_tokens`), the attention from tokens
        (:meth:`attend_tokens`) and the output projection as the 1x1
        convolution it is on the map, so that the graph keeps each tensor
        in one layout (docs/export.md)."""
        v = self.proj_v(x)
        v_map = tokens_to_map(v, hw_shape)
        a = self.conv1(v_map)
        b = self.conv2(self.act(a) if self.qkv_mode == 'sequential' else
                       v_map)
        out = self.attend_tokens(self.pool_tokens(a), self.pool_tokens(b), v,
                                 self.pooled_grid(hw_shape), hw_shape)
        if self.conv_skip:
            out = out + self.act(b)
        out = F.conv2d(out, self.proj.weight[..., None, None], self.proj.bias)
        return self.proj_drop(map_to_tokens(out))

    def _local(self, v_map: torch.Tensor):
        """The depthwise branches: pooled queries and keys and the skip
        (None without ``conv_skip``)."""
        a = self.conv1(v_map)
        b = self.conv2(self.act(a) if self.qkv_mode == 'sequential' else v_map)
        return (self.pool(a), self.pool(b),
                self.act(b) if self.conv_skip else None)

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, conv_skip={self.conv_skip}, '
                f'qkv_mode={self.qkv_mode!r}')


@MODELS.register_module()
class LeMSAv2(PooledKeyAttention):
    """Frequency-ramp split LeMSA of LeCT v2 (report Appendix).

    ``C`` splits into ``h_dim = int(C * h_ratio)`` high-frequency and
    ``l_dim = C - h_dim`` low-frequency (attention) channels::

        src  = x[..., :h_dim]            (default, as the reference)
               x[..., h_dim:]            (low_from_input=True)
        v    = Linear(len(src) -> l_dim, bias=qkv_bias)(src)
        a    = BN(DWConv_k(v))                              # conv1
        b    = BN(DWConv_k(GELU(a)))                        # conv2
        high = GELU(BN(Conv1x1(l_dim -> h_dim, bias)(b)))   # conv3
        per head (l_dim / m channels each):
            q = concat_feat(AvgPool_K(a)_head, MaxPool_K(a)_head)   # 2 l_dim/m
            k = concat_feat(AvgPool_K(b)_head, MaxPool_K(b)_head)
            o = softmax(Up_key(q kᵀ) * C^-0.5) v_head
        low  = QueryUpsampler(o, (H, W))                    # l_dim channels
        y    = Dropout(Linear(C -> C)(concat[high, low]))

    The reference feeds only the first ``h_dim`` input channels to the
    layer; ``low_from_input=True`` feeds the last ``l_dim`` instead, as the
    report's prose (Inception-Transformer style) describes. Reference keys
    are the attribute names, but ``query_upsampler.conv`` / ``.norm`` are
    ``v_conv`` / ``v_bn``.

    Args:
        embed_dims (int): Number of channels ``C``.
        num_heads (int): Number of heads; must divide ``l_dim``.
        sr_ratio (int, optional): Pooling kernel and stride ``K``; give
            exactly one of ``sr_ratio`` and ``pool_size``.
        h_ratio (float): High-frequency share of the channels, in (0, 1).
        kernel_size (int): Depthwise kernel of conv1/conv2. Defaults to 3.
        qkv_bias (bool): Bias of ``proj_v`` and the depthwise convs.
            Defaults to False.
        attn_drop (float): Attention-weight dropout. Defaults to 0.
        proj_drop (float): Output dropout. Defaults to 0.
        key_upsample (str): Key-axis resize mode. Defaults to 'bicubic'.
        query_upsampler (dict): Query upsampler config, built with
            ``channels=l_dim``. Defaults to
            ``dict(type='ResizeDWConvUpsampler', mode='bicubic')``.
        low_from_input (bool): Feed the low split to the attention branch.
            Defaults to False.
        impl (str): ``'auto'``, ``'fused'`` or ``'literal'``.
            Defaults to 'auto'.
        norm_cfg (dict): Norm of the convs and of the query upsampler, as
            :class:`LeMSA`'s. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation. Defaults to ``dict(type='GELU')``.
        pool_size (int | tuple[int, int], optional): Fixed pooled grid
            instead of ``sr_ratio``. Defaults to None.
        with_cp (bool): As :class:`LeMSA`'s. Defaults to False.
        input_size (tuple[int, int], optional): As :class:`LeMSA`'s.
            Defaults to None.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    conv_bn_pairs = (('conv1.0', 'conv1.1'), ('conv2.0', 'conv2.1'),
                     ('conv3.0', 'conv3.1'))

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: Optional[int],
                 h_ratio: float,
                 kernel_size: int = 3,
                 qkv_bias: bool = False,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 key_upsample: str = 'bicubic',
                 query_upsampler: dict = dict(
                     type='ResizeDWConvUpsampler', mode='bicubic'),
                 low_from_input: bool = False,
                 impl: str = 'auto',
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 pool_size: Optional[Union[int, Sequence[int]]] = None,
                 with_cp: bool = False,
                 input_size: Optional[Sequence[int]] = None,
                 init_cfg=None):
        h_dim = int(embed_dims * h_ratio)
        l_dim = embed_dims - h_dim
        if not 0 < h_dim < embed_dims:
            raise ValueError(
                f'h_ratio ({h_ratio}) must leave both splits non-empty: '
                f'h_dim = int({embed_dims} * {h_ratio}) = {h_dim}.')
        if l_dim % num_heads != 0:
            raise ValueError(
                f'l_dim = embed_dims - int(embed_dims * h_ratio) = '
                f'{l_dim} (embed_dims {embed_dims}, h_ratio {h_ratio}) '
                f'must be divisible by num_heads ({num_heads}).')
        super().__init__(embed_dims, num_heads, sr_ratio, pool_size,
                         key_upsample, attn_drop, proj_drop, impl,
                         with_cp=with_cp, input_size=input_size,
                         init_cfg=init_cfg)
        self.h_dim, self.l_dim = h_dim, l_dim
        self.low_from_input = low_from_input
        self.proj_v = nn.Linear(
            l_dim if low_from_input else h_dim, l_dim, bias=qkv_bias)
        self.conv1 = _conv_bn(l_dim, kernel_size, qkv_bias, norm_cfg)
        self.conv2 = _conv_bn(l_dim, kernel_size, qkv_bias, norm_cfg)
        self.conv3 = nn.Sequential(
            nn.Conv2d(l_dim, h_dim, 1, bias=True),
            build_norm_layer(norm_cfg, h_dim)[1])
        self.act = build_activation_layer(act_cfg)
        self._build_output(query_upsampler, l_dim, norm_cfg)
        # Channel order of the per-head [avg, max] maps in the concatenated
        # [avg, max] map (a non-persistent buffer: not in the state dict).
        self.register_buffer(
            'head_order', torch.empty(2 * l_dim, dtype=torch.long),
            persistent=False)
        self.init_non_persistent_buffers()

    def init_non_persistent_buffers(self) -> None:
        """``head_order``, computed from the widths (timm's name for it)."""
        d = self.l_dim // self.num_heads
        order = torch.arange(2 * self.l_dim).view(2, self.num_heads, d)
        self.head_order.copy_(order.transpose(0, 1).flatten())

    def _pooled_heads(self, x: torch.Tensor,
                      channels_last: bool = True) -> torch.Tensor:
        """(B, l, H, W) -> per-head [avg, max] map (B, m * 2l/m, h', w').

        ``channels_last`` for the fused path, so that the resized keys
        split into heads without a copy; contiguous for the literal path,
        whose head matmuls then take the heads without a copy.
        """
        # One concatenation and one gather: fewer ops, and gradients without
        # the copies of per-head views.
        heads = torch.cat([self.pool(x, 'avg'), self.pool(x, 'max')],
                          1).index_select(1, self.head_order)
        return heads.contiguous(memory_format=torch.channels_last
                                if channels_last else torch.contiguous_format)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Tokens ``x`` (B, N, C) on the grid ``hw_shape`` -> (B, N, C)."""
        H, W = check_hw_shape(x, hw_shape)
        src = x[..., self.h_dim:] if self.low_from_input else \
            x[..., :self.h_dim]
        v = self.proj_v(src)
        v_map = tokens_to_map(v, (H, W))
        # Resolved once: it also picks the pooled maps' layout.
        impl = resolve_impl_for(
            self.impl, v.device, v.dtype, v.requires_grad,
            2 * self.l_dim // self.num_heads, self.pooled_cells((H, W)))
        literal = impl == 'literal'
        recompute_now = recompute_active(self)
        if recompute_now:
            q_map, k_map, high = recompute(
                lambda v_map: self._local(v_map, not literal), v_map,
                module=self)
        else:
            q_map, k_map, high = self._local(v_map, not literal)
        low = self.attend(q_map, k_map, v, (H, W), recompute_now, impl)
        # One concatenated map (both are channels_last), one projection.
        out = map_to_tokens(torch.cat([high, low], 1))
        return self.proj_drop(self.proj(out))

    def _local(self, v_map: torch.Tensor, channels_last: bool = True):
        """The convolutional branches: pooled query and key heads and the
        high-frequency output."""
        a = self.conv1(v_map)
        b = self.conv2(self.act(a))
        high = self.act(self.conv3(b))
        return (self._pooled_heads(a, channels_last),
                self._pooled_heads(b, channels_last), high)

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, h_dim={self.h_dim}, '
                f'l_dim={self.l_dim}, low_from_input={self.low_from_input}')
