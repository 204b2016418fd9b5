"""CCT blocks: convolutional tokenizer, sequence pooling, encoder layer.

Paper: Hassani et al., "Escaping the Big Data Paradigm with Compact
Transformers", 2021 (sections "Compact Vision Transformer" for SeqPool and
"Compact Convolutional Transformer" for the tokenizer). Reference:
SHI-Labs/Compact-Transformers (``src/cct.py``, ``src/utils/tokenizer.py``,
``src/utils/transformers.py``).
"""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS

from .functional import map_to_tokens
from .utils import build_attention, build_mlp, conv_out_size


@MODELS.register_module()
class CCTTokenizer(BaseModule):
    """Convolutional tokenizer (CCT paper, section "Compact Convolutional
    Transformer").

    ``num_conv_layers`` × [Conv k×k (stride, padding, no bias) → ReLU →
    MaxPool 3×3 stride 2 padding 1]; channels ``in → hidden … → embed``
    (``hidden_channels`` = the reference's ``in_planes`` = 64), then
    flattened to tokens. Defaults follow the reference's ``_cct``:
    stride ``max(1, k//2 − 1)``, padding ``max(1, k//2)`` (k=3: s1 p1;
    k=7: s2 p3). Kaiming-normal (fan-in) conv init, as in the reference.

    Args:
        in_channels (int): Input channels. Defaults to 3.
        embed_dims (int): Output token channels. Defaults to 256.
        num_conv_layers (int): Number of conv blocks. Defaults to 1.
        kernel_size (int): Conv kernel size. Defaults to 3.
        stride (int, optional): Conv stride; None derives it from the
            kernel. Defaults to None.
        padding (int, optional): Conv padding; None derives it from the
            kernel. Defaults to None.
        hidden_channels (int): Channels of the intermediate convs.
            Defaults to 64.
        max_pool (bool): Whether each block ends with the max-pool.
            Defaults to True.
        act_cfg (dict): Activation. Defaults to ``dict(type='ReLU')``.
        init_cfg (dict | list[dict], optional): Defaults to Kaiming-normal
            (fan-in, ReLU gain) for ``Conv2d``.
    """

    def __init__(self,
                 in_channels: int = 3,
                 embed_dims: int = 256,
                 num_conv_layers: int = 1,
                 kernel_size: int = 3,
                 stride: Optional[int] = None,
                 padding: Optional[int] = None,
                 hidden_channels: int = 64,
                 max_pool: bool = True,
                 act_cfg: dict = dict(type='ReLU'),
                 init_cfg=dict(
                     type='Kaiming',
                     layer='Conv2d',
                     mode='fan_in',
                     nonlinearity='relu',
                     distribution='normal')):
        super().__init__(init_cfg=init_cfg)
        if num_conv_layers < 1:
            raise ValueError(
                f'num_conv_layers must be >= 1, got {num_conv_layers}')
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else max(
            1, kernel_size // 2 - 1)
        self.padding = padding if padding is not None else max(
            1, kernel_size // 2)
        self.max_pool = max_pool
        channels = [in_channels] + [hidden_channels] * (num_conv_layers - 1)
        channels.append(embed_dims)
        self.conv_layers = nn.Sequential(*[
            nn.Sequential(
                nn.Conv2d(
                    channels[i],
                    channels[i + 1],
                    kernel_size,
                    stride=self.stride,
                    padding=self.padding,
                    bias=False), build_activation_layer(act_cfg),
                nn.MaxPool2d(3, stride=2, padding=1)
                if max_pool else nn.Identity())
            for i in range(num_conv_layers)
        ])

    def output_size(self, size: int) -> int:
        """Token-grid side for an input side ``size``."""
        for _ in self.conv_layers:
            size = conv_out_size(size, self.kernel_size, self.stride,
                                 self.padding)
            if self.max_pool:
                size = conv_out_size(size, 3, 2, 1)
        return size

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, tuple]:
        """(B, C_in, H, W) → (tokens (B, H'·W', embed_dims), (H', W'))."""
        x = self.conv_layers(x)
        return map_to_tokens(x), tuple(x.shape[-2:])


@MODELS.register_module()
class SeqPool(BaseModule):
    """Sequence pooling (CCT paper, section "Compact Vision Transformer").

    ``w = softmax_N(Linear(C→1)(x))``; ``out = Σ_n w_n x_n`` → (B, C).
    Usable inside a backbone (tensor in, tensor out) or as a neck: a tuple
    of (B, N, C) tokens or (B, C, H, W) maps gives a tuple of (B, C).

    Args:
        embed_dims (int): Token channels C.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self, embed_dims: int, init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.attention_pool = nn.Linear(embed_dims, 1)

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            x = map_to_tokens(x)
        weights = self.attention_pool(x).softmax(dim=1)
        return (weights.transpose(1, 2) @ x).squeeze(1)

    def forward(
        self,
        x: Union[torch.Tensor, Sequence[torch.Tensor]],
        hw_shape: Optional[Sequence[int]] = None
    ) -> Union[torch.Tensor, tuple]:
        if isinstance(x, (tuple, list)):
            return tuple(self._pool(t) for t in x)
        return self._pool(x)


@MODELS.register_module()
class CCTEncoderLayer(BaseModule):
    """CCT transformer encoder layer (CCT reference
    ``TransformerEncoderLayer``).

    ``x ← x + DP(MHSA(LN_pre(x), hw))``; ``x ← LN1(x)`` — the normalised
    tensor **replaces** the stream (the reference's quirk, kept for
    exactness); ``x ← x + DP(Dropout(Linear2(Dropout(GELU(Linear1(x))))))``.
    The MHSA is built from ``attn_cfg``; the default
    :class:`~lect_mm.blocks.MultiheadSelfAttention` is the reference's: no
    qkv bias, a biased projection, attention dropout and projection dropout
    ``drop_rate``.

    Args:
        embed_dims (int): Token channels C.
        num_heads (int): Attention heads.
        ffn_ratio (float): MLP hidden width over ``embed_dims``.
        drop_rate (float): Projection/MLP dropout. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.1.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        qkv_bias (bool): Bias of the qkv projection. Defaults to False.
        impl (str): Attention path, 'fused' or 'literal'.
            Defaults to 'fused'.
        attn_cfg (dict): Attention config, built with ``embed_dims``;
            ``num_heads``, ``qkv_bias``, ``attn_drop`` (``attn_drop_rate``),
            ``proj_drop`` (``drop_rate``) and ``impl`` are filled in where
            the config leaves them unset and its type accepts them. A grid
            attention (LeMSA) needs ``hw_shape`` in ``forward``.
            Defaults to ``dict(type='MultiheadSelfAttention')``.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='LN')``
            (eps 1e-5).
        act_cfg (dict): MLP activation. Defaults to ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 ffn_ratio: float,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.1,
                 drop_path_rate: float = 0.,
                 qkv_bias: bool = False,
                 impl: str = 'fused',
                 attn_cfg: dict = dict(type='MultiheadSelfAttention'),
                 norm_cfg: dict = dict(type='LN'),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.pre_norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = build_attention(attn_cfg, embed_dims, num_heads,
                                    qkv_bias, attn_drop_rate, drop_rate,
                                    impl)
        self.drop_path = DropPath(drop_path_rate)
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = build_mlp(embed_dims, int(embed_dims * ffn_ratio),
                             act_cfg, drop_rate, drop_path_rate)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Sequence[int]] = None) -> torch.Tensor:
        """x: (B, N, C) → (B, N, C); ``hw_shape`` goes to the attention."""
        attn = self.attn(self.pre_norm(x), hw_shape)
        x = self.norm1(x + self.drop_path(attn))
        return self.ffn(x)
