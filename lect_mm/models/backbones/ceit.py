"""CeiT backbone (Yuan et al., ICCV 2021) with the LeCT report's variants."""
from functools import partial
from typing import Sequence, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.utils import resize_pos_embed
from mmpretrain.registry import MODELS

from lect_mm.blocks.ceit import CeiTBlock, Image2Tokens, LCABlock
from lect_mm.blocks.dropout import FastDropout
from lect_mm.blocks.functional import map_to_tokens, tokens_to_map
from lect_mm.models.utils import (TRUNC_NORMAL_INIT_CFG, is_pretrained,
                                  parse_arch)
from .base_backbone import HeadPool, StageTap, ZooBackbone, token_output


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


@MODELS.register_module()
class CeiT(ZooBackbone):
    """Convolution-enhanced image Transformer.

    Image2Tokens stem (conv 7×7/2 + BN + max-pool) → 4×4/4 patch projection
    → ``num_layers`` × (MHSA + LeFF) blocks → head-side pooling:

    - ``pooling='lca'``: a class token is prepended, every block emits it,
      the layer-wise class-token attention (LCA) refines the last one, then
      LayerNorm → (B, C).
    - ``pooling='gap'``: no class token, no LCA, no layer positional
      embedding; mean over the patch tokens → LayerNorm → (B, C).

    Arches (parameter counts are for the whole classifier with a
    ``LinearClsHead``, 10 / 100 classes):

    - ``'ref'``: the LeCT author's ``CeiT(GAP).py`` as published (I2T 128
      channels, dim 112, 8 layers, 4 heads, LeFF ×2, LCA whose MLP hidden
      width is C because of the author's ``Mlp`` bug): 1,188,922 /
      1,199,092.
    - ``'gap'``: the report's prose description (same widths, global average
      pooling instead of the class token + LCA): 1,111,418 / 1,121,588.
    - ``'tiny'`` / ``'small'``: the official CeiT-T / CeiT-S (I2T 64
      channels, dims 192 / 384, 12 layers, 3 / 6 heads, LeFF ×4, LCA MLP
      ×4): CeiT-T 6.1658M / 6.1832M.

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    the Image2Tokens stem, projection, class token and positional
    embedding; a stage is a block (``num_stages = num_layers``), the last
    one's output side being the LCA and the final norm. ``out_indices``
    (default -1) counts blocks.

    Args:
        arch (str | dict): A key of ``arch_zoo`` or a dict with the keys
            ``i2t_channels, embed_dims, num_layers, num_heads, ffn_ratio,
            pooling`` and, for ``pooling='lca'``, ``lca_ffn_ratio``.
            Defaults to 'ref'.
        img_size (int | tuple): Training input size; sets the positional
            embedding grid (other sizes are handled by bicubic resizing of
            the embedding). Defaults to 224.
        in_channels (int): Input channels. Defaults to 3.
        patch_size (int): Kernel/stride of the projection after the stem.
            Defaults to 4.
        leff_kernel_size (int): LeFF depth-wise kernel. Defaults to 3.
        qkv_bias (bool): Bias of the qkv projections. Defaults to True.
        drop_rate (float): Dropout after the positional embedding and on the
            attention/MLP outputs. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth, linear from 0 over the
            blocks (not the LCA). Defaults to 0.1.
        attn_cfg (dict): Attention of every block (not of the LCA), built
            with the block's ``embed_dims``, ``num_heads``, ``qkv_bias`` and
            dropouts filled in where accepted (see
            :class:`~lect_mm.blocks.CeiTBlock`). With ``pooling='lca'`` it
            also sees the class token, so it must not need the (H, W) grid;
            a grid attention such as
            ``dict(type='LeMSA', sr_ratio=2)`` needs ``pooling='gap'``.
            Defaults to ``dict(type='MultiheadSelfAttention')``.
        norm_cfg (dict): Token norm. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        conv_norm_cfg (dict): Norm of the stem and the LeFF. Defaults to
            ``dict(type='BN')``.
        act_cfg (dict): LeFF/MLP activation. Defaults to
            ``dict(type='GELU')``.
        out_type (str): ``'pooled'``: the (B, C) feature the classifier
            reads (only after the last block); ``'featmap'``: the patch
            tokens after each block in ``out_indices`` as (B, C, H, W)
            (un-normalised: CeiT has no norm on the patch tokens; the LCA
            and the final norm are then not built). Defaults to 'pooled'.
        init_cfg (dict | list[dict], optional): Defaults to trunc-normal
            (std 0.02, bias 0) Linear layers and unit LayerNorms; convs and
            BN keep PyTorch defaults, as in the references.
        **kwargs: ``out_indices``, ``frozen_stages``, ``norm_eval`` and
            ``with_cp`` (the blocks run under checkpointing) of
            :class:`ZooBackbone`.
    """

    arch_zoo = {
        'ref': dict(i2t_channels=128, embed_dims=112, num_layers=8,
                    num_heads=4, ffn_ratio=2, pooling='lca',
                    lca_ffn_ratio=1),
        'gap': dict(i2t_channels=128, embed_dims=112, num_layers=8,
                    num_heads=4, ffn_ratio=2, pooling='gap'),
        'tiny': dict(i2t_channels=64, embed_dims=192, num_layers=12,
                     num_heads=3, ffn_ratio=4, pooling='lca',
                     lca_ffn_ratio=4),
        'small': dict(i2t_channels=64, embed_dims=384, num_layers=12,
                      num_heads=6, ffn_ratio=4, pooling='lca',
                      lca_ffn_ratio=4),
    }  # yapf: disable
    essential_keys = ('i2t_channels', 'embed_dims', 'num_layers',
                      'num_heads', 'ffn_ratio', 'pooling')
    POOLINGS = ('lca', 'gap')
    takes_img_size = True
    FIRST_CONV = 'i2t.conv'
    OUT_TYPES = ('pooled', 'featmap')
    stage_name = 'blocks'

    def __init__(self,
                 arch: Union[str, dict] = 'ref',
                 img_size: Union[int, Sequence[int]] = 224,
                 in_channels: int = 3,
                 patch_size: int = 4,
                 leff_kernel_size: int = 3,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 attn_cfg: dict = dict(type='MultiheadSelfAttention'),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 conv_norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 out_type: str = 'pooled',
                 init_cfg=TRUNC_NORMAL_INIT_CFG,
                 **kwargs):
        a = self._parse_arch(arch)
        super().__init__(
            a['num_layers'], out_type=out_type, init_cfg=init_cfg, **kwargs)
        self.arch_settings = a
        self.embed_dims = a['embed_dims']
        self.num_layers = a['num_layers']
        self.pooling = a['pooling']
        self.num_extra_tokens = 1 if self.pooling == 'lca' else 0

        img_size = (img_size, img_size) if isinstance(img_size,
                                                      int) else img_size
        self.i2t = Image2Tokens(
            in_channels, a['i2t_channels'], norm_cfg=conv_norm_cfg)
        self.proj = nn.Conv2d(
            a['i2t_channels'],
            self.embed_dims,
            kernel_size=patch_size,
            stride=patch_size)
        self.patch_resolution = tuple(
            self.i2t.output_size(s) // patch_size for s in img_size)
        num_patches = self.patch_resolution[0] * self.patch_resolution[1]

        if self.num_extra_tokens:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        else:
            self.cls_token = None
        self.pos_embed = nn.Parameter(
            torch.zeros(1, num_patches + self.num_extra_tokens,
                        self.embed_dims))
        self.drop_after_pos = FastDropout(p=drop_rate)

        rates, = self.drop_path_rates(drop_path_rate, [self.num_layers])
        self.layers = nn.ModuleList([
            CeiTBlock(
                self.embed_dims,
                a['num_heads'],
                a['ffn_ratio'],
                num_extra_tokens=self.num_extra_tokens,
                qkv_bias=qkv_bias,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=rate,
                kernel_size=leff_kernel_size,
                attn_cfg=attn_cfg,
                norm_cfg=norm_cfg,
                ffn_norm_cfg=conv_norm_cfg,
                act_cfg=act_cfg) for rate in rates
        ])

        # Only the pooled output uses the head side (DDP needs every
        # parameter to be used).
        pooled = out_type == 'pooled'
        if pooled and self.pooling == 'lca':
            self.pos_layer_embed = nn.Parameter(
                torch.zeros(1, self.num_layers, self.embed_dims))
            self.lca = LCABlock(
                self.embed_dims,
                a['num_heads'],
                a['lca_ffn_ratio'],
                qkv_bias=qkv_bias,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                norm_cfg=norm_cfg,
                act_cfg=act_cfg)
        else:
            self.pos_layer_embed = None
            self.lca = None
        self.norm = build_norm_layer(norm_cfg,
                                     self.embed_dims)[1] if pooled else None

        self._freeze_stages()

    @classmethod
    def _parse_arch(cls, arch: Union[str, dict]) -> dict:
        essential_keys = cls.essential_keys
        if isinstance(arch, dict) and arch.get('pooling') == 'lca':
            essential_keys += ('lca_ffn_ratio', )
        arch = parse_arch(arch, cls.arch_zoo, essential_keys)
        if arch['pooling'] not in cls.POOLINGS:
            raise ValueError(f"arch['pooling'] must be one of "
                             f"{list(cls.POOLINGS)}, got {arch['pooling']!r}")
        return arch

    def init_weights(self):
        super().init_weights()
        if is_pretrained(self.init_cfg):
            return
        trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            trunc_normal_(self.cls_token, std=0.02)

    def reset_parameters(self):
        """The submodules', then the class token and the position
        embeddings: zeros, as built (``init_weights`` draws two of them)."""
        super().reset_parameters()
        with torch.no_grad():
            for p in (self.cls_token, self.pos_embed, self.pos_layer_embed):
                if p is not None:
                    p.zero_()

    def stem_and_stages(self):
        stages = [[f'layers.{i}'] for i in range(self.num_layers)]
        stages[-1] += ['pos_layer_embed', 'lca', 'norm']
        return ['i2t', 'proj', 'cls_token', 'pos_embed',
                'drop_after_pos'], stages

    def resized_state_dict(self, state_dict, source):
        """``source``'s position embedding resampled to this grid
        (mmpretrain's ``resize_pos_embed``, bicubic, as the forward does
        for other input sizes)."""
        state_dict = dict(state_dict)
        state_dict['pos_embed'] = resize_pos_embed(
            state_dict['pos_embed'], source.patch_resolution,
            self.patch_resolution, mode='bicubic',
            num_extra_tokens=self.num_extra_tokens)
        return super().resized_state_dict(state_dict, source)

    def stage_taps(self):
        """The patch tokens after each block (un-normalised: CeiT has no
        norm on them)."""
        reduction = 224 // self.i2t.output_size(224) * self.proj.stride[0]
        to_map = partial(token_output, extra=self.num_extra_tokens)
        return [
            StageTap(f'layers.{i}', to_map, self.embed_dims, reduction)
            for i in range(self.num_layers)
        ]

    def head_pool(self):
        """``pooling='gap'``: the mean of the last patch tokens, then the
        norm (None with LCA, which pools every block's class token)."""
        if self.norm is None or self.lca is not None:
            return None
        return HeadPool('avg', _same, self._mean_norm)

    def _mean_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(map_to_tokens(x).mean(dim=1))

    def _pooled(self, x: torch.Tensor, cls_tokens: list) -> torch.Tensor:
        if self.pooling == 'lca':
            tokens = torch.stack(cls_tokens, dim=1) + self.pos_layer_embed
            return self.norm(self.lca(tokens)).flatten(1)
        return self.norm(x.mean(dim=1))

    def forward(self, x: torch.Tensor) -> tuple:
        self.check_input(x)
        x = self.proj(self.i2t(x))
        hw_shape = x.shape[-2:]
        x = map_to_tokens(x)
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x),
                          dim=1)
        x = x + resize_pos_embed(
            self.pos_embed,
            self.patch_resolution,
            hw_shape,
            mode='bicubic',
            num_extra_tokens=self.num_extra_tokens)
        x = self.drop_after_pos(x)

        outs, cls_tokens = [], []
        for i, layer in enumerate(self.layers):
            x = self.run_block(layer, x, hw_shape)
            if self.num_extra_tokens:
                cls_tokens.append(x[:, 0])
            if i in self.out_indices:
                if self.out_type == 'pooled':
                    outs.append(self._pooled(x, cls_tokens))
                else:
                    outs.append(tokens_to_map(x[:, self.num_extra_tokens:],
                                              hw_shape))
        return tuple(outs)
