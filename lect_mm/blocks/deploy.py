"""Folding a block's conv → BatchNorm pairs for inference (deploy mode).

mmpretrain's re-parameterisable models (LeViT, RepVGG, MobileOne) switch to
an inference structure with ``switch_to_deploy()``; the blocks of LeCT do
the same through :class:`FuseConvBNMixin`.
"""
from typing import Tuple

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils.fusion import fuse_conv_bn_weights


class FuseConvBNMixin:
    """A block whose ``conv_bn_pairs`` fold into their convolutions.

    A subclass lists its ``(conv, norm)`` submodule paths in
    ``conv_bn_pairs``, each norm applied right after its conv.
    :meth:`switch_to_deploy` folds every BatchNorm's running statistics and
    affine parameters into its conv (``torch.nn.utils.fusion``), which gets
    a bias if it had none, replaces the norm with ``nn.Identity`` and does
    the same in every such block nested inside. The result computes what the
    block computes in eval mode, with one kernel less per pair; in training
    it no longer normalises with batch statistics, so it is for inference
    only. ``deploy`` tells whether the switch was made. Norms that are
    already ``nn.Identity`` (e.g. ``LeFFN(with_bn=False)``) are skipped; any
    other norm cannot be folded and raises.
    """

    #: Whether the block's conv → BN pairs are folded.
    deploy: bool = False
    #: ``(conv, norm)`` submodule paths, e.g. ``('conv1.0', 'conv1.1')``.
    conv_bn_pairs: Tuple[Tuple[str, str], ...] = ()

    @torch.no_grad()
    def switch_to_deploy(self) -> None:
        """Fold the conv → BN pairs of this block and of the blocks in it."""
        if self.deploy:
            return
        for conv_name, norm_name in self.conv_bn_pairs:
            self._fold(conv_name, norm_name)
        nested = [
            m for m in self.modules()
            if m is not self and isinstance(m, FuseConvBNMixin)
        ]
        for module in nested:
            module.switch_to_deploy()
        self.deploy = True

    def _fold(self, conv_name: str, norm_name: str) -> None:
        conv = self.get_submodule(conv_name)
        norm = self.get_submodule(norm_name)
        if isinstance(norm, nn.Identity):
            return
        where = f'{type(self).__name__}.{norm_name}'
        if not isinstance(norm, _BatchNorm):
            raise TypeError(
                f'switch_to_deploy: {where} is a {type(norm).__name__}; only '
                'BatchNorm layers (norm_cfg type BN or SyncBN) fold into '
                'the preceding convolution.')
        if norm.running_mean is None:
            raise ValueError(
                f'switch_to_deploy: {where} has no running statistics '
                '(track_running_stats=False), so it cannot be folded.')
        weight, bias = fuse_conv_bn_weights(
            conv.weight, conv.bias, norm.running_mean, norm.running_var,
            norm.eps, norm.weight, norm.bias,
            transpose=isinstance(conv, nn.modules.conv._ConvTransposeNd))
        conv.weight, conv.bias = weight, bias.requires_grad_(
            weight.requires_grad)
        self.set_submodule(norm_name, nn.Identity())
