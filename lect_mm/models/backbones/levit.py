"""LeViT (Graham et al., ICCV 2021) trained from scratch at the report's scale.

mmpretrain's ``LeViT`` is used block for block. mmpretrain 1.2.0 builds it
for converted weights only, and three gaps matter for training it here:

* its arch-dict check demands the keys ``embed_dim, num_heads, depth,
  key_dim`` and then reads ``embed_dims, num_heads, depths, key_dims``, so
  **every** custom arch dict fails;
* its table stops at LeViT-128S (7.0M parameters with 10 classes);
* it lacks the official init, which starts every residual branch at zero
  (``Linear_BN(..., bn_weight_init=0)`` on the attention projection and the
  second MLP linear). Without it, LeViT-128S fitting one batch of 64
  (AdamW lr 1e-3, clip 5, H100) went from loss 4.63 to 3.92 in 20 steps;
  with it, from 4.72 to 0.01.

``FlexibleLeViT`` fixes exactly these: it accepts a full dict, adds
``'64s'`` (LeViT-128S with its widths (64/128/192) and head counts (2/3/4)
halved, same depths (2/3/4) and 16-dim keys; 1.76M parameters with a
10-class ``LeViTClsHead``) and restores the zero init in ``init_weights``.
It also takes the ``frozen_stages`` and ``norm_eval`` of every lect_mm
backbone, which mmpretrain's LeViT lacks.
"""
import re
from functools import partial
from typing import Union

import torch
import torch.nn as nn
from mmpretrain.models.backbones.levit import (Attention, AttentionSubsample,
                                               LeViT, LinearBatchNorm,
                                               Residual)
from mmpretrain.registry import MODELS

from lect_mm.blocks.functional import tokens_to_map
from lect_mm.models.utils import is_pretrained, parse_arch
from .base_backbone import StageTap, ZooBackbone


def _square_tokens(args, out: torch.Tensor, side: int) -> torch.Tensor:
    return tokens_to_map(out, (side, side))


#: FAIR's LeViT (facebookresearch/LeViT ``levit.py``) inner keys -> those of
#: mmpretrain's blocks: Conv2d_BN / Linear_BN ``c`` -> ``conv`` / ``linear``,
#: a residual's ``m`` -> ``block``, its MLP ``m.0`` / ``m.2`` -> ``linear1`` /
#: ``linear2``, the classifiers ``l`` -> ``linear``.
_FAIR_INNER_KEYS = (
    (r'^m\.0\.', 'block.linear1.'),
    (r'^m\.2\.', 'block.linear2.'),
    (r'^m\.', 'block.'),
)


def _refresh_after_load(module, incompatible_keys):
    module.refresh_attention_bias_cache()


@MODELS.register_module()
class FlexibleLeViT(ZooBackbone, LeViT):
    """mmpretrain's LeViT with custom archs and the official residual init.

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    the convolutional ``patch_embed``; stage ``i`` is ``stages[i]``, its
    attention subsampling included (no output norm). Each output is a
    stage's tokens as a ``(B, C, H, W)`` map.

    Args:
        arch (str | dict): A key of ``arch_zoo`` (mmpretrain's ``'128s'``,
            ``'128'``, ``'192'``, ``'256'``, ``'384'`` plus ``'64s'``) or a
            dict with ``embed_dims``, ``num_heads``, ``depths`` and
            ``key_dims`` (one entry per stage). Defaults to '64s'.
        zero_init_residual (bool): In ``init_weights``, set the weight of the
            last BatchNorm of every residual branch to 0 (official LeViT), so
            each residual starts as the identity. Skipped when ``init_cfg``
            loads pretrained weights. Defaults to True.
        **kwargs: ``out_indices``, ``frozen_stages``, ``norm_eval``,
            ``with_cp`` (each residual block runs under checkpointing) and
            ``init_cfg`` of :class:`ZooBackbone`, and the other arguments of
            mmpretrain's ``LeViT`` (``img_size`` fixes the attention-bias
            grid, so inputs must have that size; ``drop_path_rate`` is one
            rate for every residual, as the official LeViT).
    """
    arch_zoo = {
        **LeViT.arch_zoo,
        '64s': {
            'embed_dims': [64, 128, 192],
            'num_heads': [2, 3, 4],
            'depths': [2, 3, 4],
            'key_dims': [16, 16, 16],
        },
    }
    essential_keys = ('embed_dims', 'num_heads', 'depths', 'key_dims')
    takes_img_size = True
    square_img_size = True
    fixed_in_channels = 3
    FIRST_CONV = 'patch_embed.patch_embed.0.conv'
    TRAINING_ARGS = ZooBackbone.TRAINING_ARGS + ('zero_init_residual', )
    FOREIGN_LAYOUT = "FAIR's LeViT layout"

    def __init__(self,
                 arch: Union[str, dict] = '64s',
                 zero_init_residual: bool = True,
                 **kwargs):
        if isinstance(arch, str):
            arch = arch.lower()
        settings = parse_arch(arch, self.arch_zoo, self.essential_keys,
                              self.essential_keys)
        if isinstance(arch, dict):
            # LeViT.__init__ looks the arch up in ``self.arch_zoo``.
            self.arch_zoo = {
                **type(self).arch_zoo, 'custom': {
                    k: list(settings[k])
                    for k in self.essential_keys
                }
            }
            arch = 'custom'
        super().__init__(len(settings['depths']), arch=arch, **kwargs)
        self.zero_init_residual = zero_init_residual
        self._freeze_stages()
        self.register_load_state_dict_post_hook(_refresh_after_load)

    def reset_parameters(self) -> None:
        """The submodules', then each attention's biases and bias indices
        as mmpretrain's LeViT builds them: zeros, and the index of each
        (query, key) offset, taken from a copy of the attention at its
        resolution with one-channel widths (mmpretrain's own code)."""
        super().reset_parameters()
        with torch.no_grad():
            for i, stage in enumerate(self.stages):
                for m in stage.modules():
                    if isinstance(m, AttentionSubsample):
                        ref = AttentionSubsample(
                            1, 1, 1, num_heads=1, attn_ratio=1,
                            stride=m.stride, resolution=m.resolution)
                    elif isinstance(m, Attention):
                        ref = Attention(
                            1, 1, num_heads=1, attn_ratio=1,
                            resolution=self.resolutions[i])
                    else:
                        continue
                    m.attention_biases.zero_()
                    m.attention_bias_idxs.copy_(ref.attention_bias_idxs)
        self.refresh_attention_bias_cache()

    def refresh_attention_bias_cache(self) -> None:
        """Recompute the attention biases an eval-mode mmpretrain LeViT
        attention keeps (``ab``, gathered from ``attention_biases`` when
        ``train(False)`` is called): after ``.to()`` / ``.half()`` or
        loading weights in eval mode it would keep the old device, dtype
        or values."""
        with torch.no_grad():
            for m in self.modules():
                if hasattr(m, 'ab') and not m.training:
                    m.ab = m.attention_biases[:, m.attention_bias_idxs]

    def _apply(self, fn, *args, **kwargs):
        # .to() / .cuda() / .half() reach parameters only; refresh ``ab``
        super()._apply(fn, *args, **kwargs)
        self.refresh_attention_bias_cache()
        return self

    def stem_and_stages(self):
        return ['patch_embed'], [[f'stages.{i}']
                                 for i in range(self.num_stages)]

    @classmethod
    def convert_foreign(cls, state_dict):
        """FAIR's LeViT classifier (facebookresearch/LeViT ``levit.py``, its
        published weights: ``patch_embed.N``, one flat ``blocks.N``
        sequence, ``head`` and ``head_dist``) mapped onto an ImageClassifier
        with this backbone and a ``LeViTClsHead`` (with distillation when
        the file has ``head_dist``): the blocks are split into stages at
        each subsampling attention (``blocks.N.kv``), as mmpretrain's
        ``tools/model_converters/levit2mmpretrain.py`` does."""
        if 'patch_embed.0.c.weight' not in state_dict:
            return None
        starts = sorted({int(k.split('.')[1]) for k in state_dict
                         if re.match(r'^blocks\.\d+\.kv\.', k)})
        out, unmapped = {}, []
        for key, value in state_dict.items():
            match = re.match(r'^blocks\.(\d+)\.(.+)$', key)
            head = re.match(r'^(head|head_dist)\.(bn|l)\.(.+)$', key)
            if key.startswith('patch_embed.'):
                new = 'backbone.patch_embed.' + key.replace('.c.', '.conv.')
            elif match:
                index, rest = int(match.group(1)), match.group(2)
                stage = sum(s <= index for s in starts)
                first = max([0] + [s for s in starts if s <= index])
                for pattern, repl in _FAIR_INNER_KEYS:
                    rest, n = re.subn(pattern, repl, rest)
                    if n:
                        break
                rest = re.sub(r'(^|\.)c\.', r'\1linear.', rest)
                new = f'backbone.stages.{stage}.{index - first}.{rest}'
            elif head:
                part = 'linear' if head.group(2) == 'l' else 'bn'
                new = f'head.{head.group(1)}.{part}.{head.group(3)}'
            else:
                unmapped.append(key)
                continue
            out[new] = value
        if unmapped:
            raise ValueError(f'{len(unmapped)} key(s) of the FAIR LeViT '
                             f'layout have no mapping: {unmapped[:10]}')
        return out

    def stage_taps(self):
        """The stages' tokens, on the stages' square grids."""
        return [
            StageTap(f'stages.{i}.{len(stage) - 1}',
                     partial(_square_tokens, side=self.resolutions[i]),
                     self.embed_dims[i], 16 * 2**i)
            for i, stage in enumerate(self.stages)
        ]

    def forward(self, x: torch.Tensor) -> tuple:
        """LeViT's forward, block by block (``with_cp`` checkpoints each).

        An empty batch is refused: mmpretrain's LeViT attention reshapes
        with an inferred size, which an empty tensor cannot give.
        """
        self.check_input(x)
        in_hw = x.shape[-2:]
        if type(x.shape[0]) is int and x.shape[0] == 0:
            raise ValueError(
                f'{type(self).__name__} got an empty batch, x of shape '
                f'{tuple(x.shape)}: mmpretrain\'s LeViT attention cannot run '
                'on 0 samples; skip the call or pass at least one sample.')
        x = self.patch_embed(x)
        grid = (self.resolutions[0], ) * 2
        if tuple(x.shape[-2:]) != grid:
            side = grid[0] * 16
            raise ValueError(
                f'{type(self).__name__} is built for img_size={side} (a '
                f'{grid[0]}x{grid[1]} grid after its stride-16 patch '
                f'embedding) but got a {tuple(x.shape[-2:])} grid from a '
                f'{tuple(in_hw)} input: its attention biases belong to one '
                'grid. Build it with img_size set to the input size '
                "(timm: create_model(..., img_size=...)) or resize the "
                'input.')
        x = x.flatten(2).transpose(1, 2)
        outs = []
        for i, stage in enumerate(self.stages):
            for block in stage:
                x = self.run_block(block, x)
            if i in self.out_indices:
                side = self.resolutions[i]
                outs.append(tokens_to_map(x, (side, side)).contiguous())
        return tuple(outs)

    def residual_output_norms(self):
        """The last BatchNorm of every residual branch (attention, MLP)."""
        for m in self.modules():
            if isinstance(m, Residual):
                last = [
                    b for b in m.block.modules()
                    if isinstance(b, LinearBatchNorm)
                ][-1]
                yield last.bn

    def init_weights(self):
        super().init_weights()
        if self.zero_init_residual and not is_pretrained(self.init_cfg):
            for bn in self.residual_output_norms():
                nn.init.zeros_(bn.weight)
