"""LeFFN: locally-enhanced feed-forward network (LeCT report §3.4).

CeiT's LeFF without the class-token split; token-block interface
``forward(x, hw_shape)``.
"""
from typing import Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule

from mmpretrain.registry import MODELS
from .deploy import FuseConvBNMixin
from .dropout import FastDropout
from .functional import map_to_tokens, tokens_to_map
from .recompute import recompute, recompute_active
from .utils import check_hw_shape


@MODELS.register_module()
class LeFFN(FuseConvBNMixin, BaseModule):
    """Locally-enhanced feed-forward network.

    With ``r C`` hidden channels (``int(C * ffn_ratio)``)::

        tokens -> map -> conv1 Conv1x1(C -> rC, bias) -> bn1 -> GELU
        -> conv2 DWConv_k(rC, bias) -> bn2 -> GELU -> Dropout
        -> conv3 Conv1x1(rC -> C, bias) -> bn3 -> Dropout -> tokens

    Submodule names equal the reference keys (``blocksI.J.leff.conv{1,2,3}``,
    ``bn{1,2,3}``); with ``with_bn=False`` the ``bn*`` are ``nn.Identity``.
    ``switch_to_deploy()`` folds each ``bn*`` into its conv
    (:class:`~lect_mm.blocks.deploy.FuseConvBNMixin`).

    Args:
        embed_dims (int): Number of channels ``C``.
        ffn_ratio (float): Hidden expansion ratio ``r``.
        kernel_size (int): Depthwise kernel size. Defaults to 3.
        ffn_drop (float): Dropout after the depthwise stage and at the
            output. Defaults to 0.
        with_bn (bool): Use the three norms. Defaults to True.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation config. Defaults to
            ``dict(type='GELU')``.
        with_cp (bool): Gradient checkpointing of the cheap layers: in
            training, keep only conv1's output for the chain up to conv3 and
            recompute its norms, activations, depthwise conv and dropout in
            backward (same values and gradients, about half the LeFFN's
            activation memory, a slower step). Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    conv_bn_pairs = (('conv1', 'bn1'), ('conv2', 'bn2'), ('conv3', 'bn3'))

    def __init__(self,
                 embed_dims: int,
                 ffn_ratio: float,
                 kernel_size: int = 3,
                 ffn_drop: float = 0.,
                 with_bn: bool = True,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 with_cp: bool = False,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.with_cp = with_cp
        hidden = int(embed_dims * ffn_ratio)
        if hidden < 1:
            raise ValueError(f'int(embed_dims * ffn_ratio) = int({embed_dims}'
                             f' * {ffn_ratio}) must be at least 1.')
        self.embed_dims = embed_dims
        self.hidden_dims = hidden

        def norm(channels):
            if not with_bn:
                return nn.Identity()
            return build_norm_layer(norm_cfg, channels)[1]

        self.conv1 = nn.Conv2d(embed_dims, hidden, 1)
        self.bn1 = norm(hidden)
        self.conv2 = nn.Conv2d(
            hidden, hidden, kernel_size, padding=kernel_size // 2,
            groups=hidden)
        self.bn2 = norm(hidden)
        self.conv3 = nn.Conv2d(hidden, embed_dims, 1)
        self.bn3 = norm(embed_dims)
        self.act = build_activation_layer(act_cfg)
        self.drop = FastDropout(ffn_drop)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Forward tokens ``x`` (B, N, C) on the grid ``hw_shape`` = (H, W).

        Returns:
            torch.Tensor: Tokens (B, N, C).
        """
        H, W = check_hw_shape(x, hw_shape)
        x = tokens_to_map(x, (H, W))
        if recompute_active(self):
            # Only conv1's output is kept for the norms, activations and
            # dropout up to conv3; bn3 keeps conv3's output, which a rerun
            # would keep too.
            x = recompute(self._hidden, self.conv1(x), module=self)
        else:
            x = self._hidden(self.conv1(x))
        x = self.drop(self.bn3(self.conv3(x)))
        return map_to_tokens(x)

    def _hidden(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(self.act(self.bn1(x)))
        return self.drop(self.act(self.bn2(x)))
