"""AlterNet blocks (Park & Kim, "How Do Vision Transformers Work?", ICLR 2022).

AlterNet (§4 of the paper, "AlterNet") is a pre-activation ResNet whose last
block of stages 2-4 is replaced by a multi-head self-attention (MSA) block.
The three blocks here reproduce the official ``alternet.dnn_18`` code
(``xxxnell/how-do-vits-work``, branch ``transformer``) op for op; they work on
``(B, C, H, W)`` feature maps, not on token sequences.

Library -> reference key names inside a block (for weight conversion; the
shapes are equal, the 1x1 projections are ``Conv2d`` in both):

- PreActBasicBlock: ``norm1`` -> ``bn``, ``conv1`` -> ``conv1``,
  ``norm2`` -> ``conv2.0``, ``conv2`` -> ``conv2.2``,
  ``shortcut`` -> ``shortcut.0``.
- AlterNetMSABlock: ``norm1``, ``conv``, ``norm2`` keep their names,
  ``shortcut`` -> ``shortcut.0``, ``attn.q`` -> ``attn.attn.to_q``,
  ``attn.kv`` -> ``attn.attn.to_kv``, ``attn.proj`` -> ``attn.attn.to_out.0``,
  ``attn.relative_position_bias_table`` -> ``attn.pos_embedding``.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from einops import rearrange
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS

from .dropout import FastDropout
from .functional import IMPLS, softmax_attention
from .utils import check_choice


def _drop_path(rate: float) -> nn.Module:
    return DropPath(rate) if rate > 0. else nn.Identity()


class _PreActResidualMixin:
    """The pre-activation, shortcut and forward of AlterNet's residual blocks.

    A block using it sets ``norm1``, ``act``, ``shortcut`` (a module or
    None) and ``with_cp``, and defines ``_inner_forward(x)``, which
    ``forward`` runs (under gradient checkpointing with ``with_cp``).
    """

    def _pre_activate(
            self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return ``act(norm1(x))`` and the skip branch.

        The skip is ``x`` itself, or ``shortcut`` of the pre-activated map
        where the block has a projection shortcut (the official code's
        order).

        Args:
            x (torch.Tensor): The block's ``(B, C, H, W)`` input.

        Returns:
            tuple[torch.Tensor, torch.Tensor]: The pre-activated map and
            the skip.
        """
        if self.shortcut is None:
            return self.act(self.norm1(x)), x
        x = self.act(self.norm1(x))
        return x, self.shortcut(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the block on a ``(B, C, H, W)`` map."""
        if self.with_cp and x.requires_grad:
            return cp.checkpoint(self._inner_forward, x, use_reentrant=False)
        return self._inner_forward(x)


@MODELS.register_module()
class WindowAttention2d(BaseModule):
    """Windowed MSA on a feature map with one shared relative-position bias.

    The official AlterNet ``LocalAttention`` + ``Attention2d``: the map is cut
    into non-overlapping ``window_size x window_size`` windows, each attended
    independently. ``q`` and ``kv`` are bias-free 1x1 convolutions to
    ``num_heads * head_dims`` channels (``kv`` splits channel-wise into k then
    v), the logits ``q k^T / sqrt(head_dims)`` get a learnable relative
    position bias and the merged heads go through a 1x1 convolution with bias.
    Unlike Swin, the ``(2w-1) x (2w-1)`` bias table is **shared by all heads**
    (and all windows): entry ``[x_b - x_a + w - 1, y_b - y_a + w - 1]`` for
    query ``a`` and key ``b`` at row-major window coordinates ``(x, y)``.

    Since the projections are 1x1 convolutions they are applied to the whole
    map before the window partition; this equals the reference, which
    partitions first.

    Args:
        in_channels (int): Channels of the input map.
        out_channels (int, optional): Channels of the output map. Defaults to
            ``in_channels``.
        num_heads (int): Number of attention heads. Defaults to 8.
        head_dims (int): Channels per head (the inner width is
            ``num_heads * head_dims``, independent of ``in_channels``).
            Defaults to 64.
        window_size (int): Side of the square attention window. Map sides
            must be multiples of it. Defaults to 7.
        attn_drop (float): Dropout on the attention weights (the reference
            has none). Defaults to 0.
        proj_drop (float): Dropout after the output projection. Defaults
            to 0.
        impl (str): ``'fused'`` uses ``F.scaled_dot_product_attention``;
            ``'literal'`` writes out the matmuls (readable, and counted by
            FLOP tracers). Defaults to 'fused'.
        init_cfg (dict, optional): Initialization config. Defaults to None
            (PyTorch default init, as the reference).
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: Optional[int] = None,
                 num_heads: int = 8,
                 head_dims: int = 64,
                 window_size: int = 7,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 impl: str = 'fused',
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        check_choice(impl, IMPLS, 'impl')
        if window_size < 1:
            raise ValueError(f'window_size must be >= 1, got {window_size}.')
        out_channels = out_channels or in_channels
        inner_dims = num_heads * head_dims
        self.num_heads = num_heads
        self.head_dims = head_dims
        self.scale = head_dims**-0.5
        self.window_size = window_size
        self.attn_drop = attn_drop
        self.impl = impl

        self.q = nn.Conv2d(in_channels, inner_dims, 1, bias=False)
        self.kv = nn.Conv2d(in_channels, 2 * inner_dims, 1, bias=False)
        self.proj = nn.Conv2d(inner_dims, out_channels, 1)
        self.proj_drop = FastDropout(proj_drop)

        table_side = 2 * window_size - 1
        self.relative_position_bias_table = nn.Parameter(
            torch.empty(table_side, table_side))
        self.register_buffer(
            'relative_position_index',
            torch.empty(window_size**2, window_size**2, dtype=torch.long),
            persistent=False)
        self.reset_parameters()
        self.init_non_persistent_buffers()

    def reset_parameters(self) -> None:
        """The bias table: N(0, 0.02) (the reference's init)."""
        with torch.no_grad():
            self.relative_position_bias_table.copy_(
                torch.randn(self.relative_position_bias_table.shape) * 0.02)

    def init_non_persistent_buffers(self) -> None:
        """The index of each (query, key) pair's offset in the table."""
        w = self.window_size
        coords = torch.stack(
            torch.meshgrid(torch.arange(w), torch.arange(w), indexing='ij'),
            dim=-1).flatten(0, 1)  # (w*w, 2) row-major (x, y)
        rel = coords[None, :, :] - coords[:, None, :] + w - 1
        self.relative_position_index.copy_(rel[..., 0] * (2 * w - 1) +
                                           rel[..., 1])

    def relative_position_bias(self) -> torch.Tensor:
        """Return the ``(w*w, w*w)`` bias added to every head's logits."""
        return self.relative_position_bias_table.flatten()[
            self.relative_position_index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend within windows.

        Args:
            x (torch.Tensor): Map ``(B, C, H, W)`` with ``H`` and ``W``
                multiples of ``window_size``.

        Returns:
            torch.Tensor: Map ``(B, out_channels, H, W)``.
        """
        _, _, h, w = x.shape
        p = self.window_size
        if h % p or w % p:
            raise ValueError(
                f'WindowAttention2d needs map sides that are multiples of '
                f'window_size={p}, got a {h}x{w} map.')
        n1, n2 = h // p, w // p
        to_windows = 'b (nh d) (n1 p1) (n2 p2) -> (b n1 n2) nh (p1 p2) d'
        q = rearrange(
            self.q(x), to_windows, nh=self.num_heads, p1=p, p2=p)
        k, v = (
            rearrange(t, to_windows, nh=self.num_heads, p1=p, p2=p)
            for t in self.kv(x).chunk(2, dim=1))
        bias = self.relative_position_bias().to(q.dtype)
        out, _ = softmax_attention(
            q, k, v, self.scale, self.attn_drop if self.training else 0.,
            self.impl, bias=bias)
        out = rearrange(
            out,
            '(b n1 n2) nh (p1 p2) d -> b (nh d) (n1 p1) (n2 p2)',
            n1=n1,
            n2=n2,
            p1=p,
            p2=p)
        return self.proj_drop(self.proj(out))


@MODELS.register_module()
class PreActBasicBlock(_PreActResidualMixin, BaseModule):
    """Pre-activation ResNet basic block (He et al., ECCV 2016), AlterNet's.

    ``x' = act(norm1(x))``; the shortcut is ``x`` itself, or a bias-free 1x1
    convolution (stride ``stride``, no norm) **of x'** when the stride or the
    width changes; the residual is conv3x3(stride) -> norm2 -> act ->
    conv3x3 -> drop path. Nothing follows the sum.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        stride (int): Stride of the first convolution. Defaults to 1.
        drop_path_rate (float): Stochastic depth rate. Defaults to 0.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation config. Defaults to
            ``dict(type='ReLU')``.
        with_cp (bool): Use gradient checkpointing. Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1,
                 drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU'),
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.with_cp = with_cp
        self.norm1 = build_norm_layer(norm_cfg, in_channels)[1]
        self.conv1 = nn.Conv2d(
            in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.norm2 = build_norm_layer(norm_cfg, out_channels)[1]
        self.conv2 = nn.Conv2d(
            out_channels, out_channels, 3, padding=1, bias=False)
        self.act = build_activation_layer(act_cfg)
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Conv2d(
                in_channels, out_channels, 1, stride, bias=False)
        else:
            self.shortcut = None
        self.drop_path = _drop_path(drop_path_rate)

    def _inner_forward(self, x: torch.Tensor) -> torch.Tensor:
        x, skip = self._pre_activate(x)
        x = self.conv1(x)
        x = self.conv2(self.act(self.norm2(x)))
        return skip + self.drop_path(x)


@MODELS.register_module()
class AlterNetMSABlock(_PreActResidualMixin, BaseModule):
    """AlterNet's pre-activation MSA block (official ``AttentionBasicBlockB``).

    ``x' = act(norm1(x))`` (GELU); residual = conv1x1 (bias-free) -> norm2 ->
    :class:`WindowAttention2d` -> drop path; the shortcut is ``x`` itself, or a
    bias-free 1x1 convolution of ``x'`` when the width changes. There is no
    MLP: the block is a single attention residual.

    Args:
        in_channels (int): Input channels.
        out_channels (int, optional): Output channels. Defaults to
            ``in_channels``.
        num_heads (int): Attention heads. Defaults to 8.
        head_dims (int): Channels per head. Defaults to 64.
        window_size (int): Attention window side. Defaults to 7.
        drop_rate (float): Dropout after the attention projection (the
            reference's ``dropout``). Defaults to 0.
        attn_drop_rate (float): Dropout on attention weights. Defaults to 0.
        drop_path_rate (float): Stochastic depth rate. Defaults to 0.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation config. Defaults to
            ``dict(type='GELU')``.
        impl (str): Attention path, ``'fused'`` or ``'literal'``. Defaults to
            'fused'.
        with_cp (bool): Use gradient checkpointing. Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: Optional[int] = None,
                 num_heads: int = 8,
                 head_dims: int = 64,
                 window_size: int = 7,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 impl: str = 'fused',
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        out_channels = out_channels or in_channels
        self.with_cp = with_cp
        self.norm1 = build_norm_layer(norm_cfg, in_channels)[1]
        self.act = build_activation_layer(act_cfg)
        self.conv = nn.Conv2d(in_channels, in_channels, 1, bias=False)
        self.norm2 = build_norm_layer(norm_cfg, in_channels)[1]
        self.attn = WindowAttention2d(
            in_channels,
            out_channels,
            num_heads=num_heads,
            head_dims=head_dims,
            window_size=window_size,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate,
            impl=impl)
        if in_channels != out_channels:
            self.shortcut = nn.Conv2d(
                in_channels, out_channels, 1, bias=False)
        else:
            self.shortcut = None
        self.drop_path = _drop_path(drop_path_rate)

    def _inner_forward(self, x: torch.Tensor) -> torch.Tensor:
        x, skip = self._pre_activate(x)
        x = self.attn(self.norm2(self.conv(x)))
        return skip + self.drop_path(x)
