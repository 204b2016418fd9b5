"""Compact Convolutional Transformer backbone (Hassani et al., 2021)."""
import re
from typing import Optional, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.utils import resize_pos_embed
from mmpretrain.registry import MODELS

from lect_mm.blocks.cct import CCTEncoderLayer, CCTTokenizer, SeqPool
from lect_mm.blocks.dropout import FastDropout
from lect_mm.blocks.functional import map_to_tokens, tokens_to_map
from lect_mm.models.utils import (TRUNC_NORMAL_INIT_CFG, is_pretrained,
                                  parse_arch)
from .base_backbone import HeadPool, StageTap, ZooBackbone, token_output


def _sinusoid_table(num_tokens: int, dims: int) -> torch.Tensor:
    """The reference's fixed 1-D sinusoid over the token index."""
    pos = torch.arange(num_tokens, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(dims, dtype=torch.float64)
    angle = pos / torch.pow(10000., 2 * torch.div(i, 2, rounding_mode='floor')
                            / dims)
    table = angle.float()
    table[:, 0::2] = torch.sin(table[:, 0::2])
    table[:, 1::2] = torch.cos(table[:, 1::2])
    return table.unsqueeze(0)


#: SHI-Labs/Compact-Transformers' keys (``src/cct.py``: ``tokenizer`` and
#: ``classifier = TransformerClassifier``) -> an ImageClassifier's with CCT.
_SHI_LABS_KEYS = (
    (r'^tokenizer\.', 'backbone.tokenizer.'),
    (r'^classifier\.positional_emb$', 'backbone.pos_embed'),
    (r'^classifier\.attention_pool\.', 'backbone.seq_pool.attention_pool.'),
    (r'^classifier\.blocks\.(\d+)\.self_attn\.', r'backbone.layers.\1.attn.'),
    (r'^classifier\.blocks\.(\d+)\.linear1\.',
     r'backbone.layers.\1.ffn.layers.0.0.'),
    (r'^classifier\.blocks\.(\d+)\.linear2\.',
     r'backbone.layers.\1.ffn.layers.1.'),
    (r'^classifier\.blocks\.(\d+)\.(pre_norm|norm1)\.',
     r'backbone.layers.\1.\2.'),
    (r'^classifier\.norm\.', 'backbone.norm.'),
    (r'^classifier\.fc\.', 'head.fc.'),
)


@MODELS.register_module()
class CCT(ZooBackbone):
    """Compact Convolutional Transformer: convolutional tokenizer →
    positional embedding → ``num_layers`` encoder layers → LayerNorm →
    SeqPool (no class token).

    Arches (``cct_<layers>_<kernel>x<convs>``; whole classifier with a
    ``LinearClsHead``, 10 / 100 classes): ``'7_3x1'`` 3.7601M / 3.7833M
    and ``'2_3x2'`` 0.2837M / 0.2953M at 32×32; ``'6_3x1'``, ``'4_3x2'``,
    ``'6_3x2'``, ``'7_3x2'`` (32×32); ``'7_7x2'`` 4.5501M / 4.5732M and
    ``'14_7x2'`` (224×224).

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    the tokenizer and positional embedding; a stage is an encoder layer
    (``num_stages = num_layers``), the last one's output side being the
    final norm and SeqPool. ``out_indices`` (default -1) counts layers.

    Args:
        arch (str | dict): A key of ``arch_zoo`` or a dict with the keys
            ``num_layers, num_heads, ffn_ratio, embed_dims, kernel_size,
            num_conv_layers``. Defaults to '7_3x1'.
        img_size (int, optional): Square input size the positional
            embedding is built for; None uses the arch's native size (32
            for the 3×3 tokenizers, 224 for the 7×7 ones). Defaults to None.
        in_channels (int): Input channels. Defaults to 3.
        positional_embedding (str): ``'learnable'`` (trunc-normal std 0.2),
            ``'sine'`` (fixed sinusoid, a frozen parameter) or ``'none'``
            (any input size). Defaults to 'learnable'.
        drop_rate (float): Dropout after the positional embedding and in the
            layers. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.1.
        drop_path_rate (float): Stochastic depth, linear from 0.
            Defaults to 0.1.
        attn_cfg (dict): Attention of every encoder layer, built with the
            layer's ``embed_dims``, ``num_heads``, ``qkv_bias`` and dropouts
            filled in where accepted (see
            :class:`~lect_mm.blocks.CCTEncoderLayer`); it gets the token
            grid, so e.g. ``dict(type='LeMSA', sr_ratio=2)`` works.
            Defaults to ``dict(type='MultiheadSelfAttention')``.
        norm_cfg (dict): Token norm. Defaults to ``dict(type='LN')``.
        act_cfg (dict): MLP activation. Defaults to ``dict(type='GELU')``.
        out_type (str): ``'pooled'``: the SeqPool feature (B, C) of the
            normalised last layer (only for the last layer);
            ``'featmap'``: (B, C, H, W) token maps after each layer in
            ``out_indices``, the last one normalised (SeqPool is then not
            built; it also works as a neck). Defaults to 'pooled'.
        init_cfg (dict | list[dict], optional): Defaults to trunc-normal
            (std 0.02, bias 0) Linear layers and unit LayerNorms; the
            tokenizer uses its own Kaiming-normal init.
        **kwargs: ``out_indices``, ``frozen_stages``, ``norm_eval`` and
            ``with_cp`` (the layers run under checkpointing) of
            :class:`ZooBackbone`.
    """

    arch_zoo = {
        '2_3x2': dict(num_layers=2, num_heads=2, ffn_ratio=1, embed_dims=128,
                      kernel_size=3, num_conv_layers=2),
        '4_3x2': dict(num_layers=4, num_heads=2, ffn_ratio=1, embed_dims=128,
                      kernel_size=3, num_conv_layers=2),
        '6_3x1': dict(num_layers=6, num_heads=4, ffn_ratio=2, embed_dims=256,
                      kernel_size=3, num_conv_layers=1),
        '6_3x2': dict(num_layers=6, num_heads=4, ffn_ratio=2, embed_dims=256,
                      kernel_size=3, num_conv_layers=2),
        '7_3x1': dict(num_layers=7, num_heads=4, ffn_ratio=2, embed_dims=256,
                      kernel_size=3, num_conv_layers=1),
        '7_3x2': dict(num_layers=7, num_heads=4, ffn_ratio=2, embed_dims=256,
                      kernel_size=3, num_conv_layers=2),
        '7_7x2': dict(num_layers=7, num_heads=4, ffn_ratio=2, embed_dims=256,
                      kernel_size=7, num_conv_layers=2),
        '14_7x2': dict(num_layers=14, num_heads=6, ffn_ratio=3,
                       embed_dims=384, kernel_size=7, num_conv_layers=2),
    }  # yapf: disable
    essential_keys = ('num_layers', 'num_heads', 'ffn_ratio', 'embed_dims',
                      'kernel_size', 'num_conv_layers')
    POS_EMBEDS = ('learnable', 'sine', 'none')
    OUT_TYPES = ('pooled', 'featmap')
    stage_name = 'layers'
    takes_img_size = True
    square_img_size = True
    FIRST_CONV = 'tokenizer.conv_layers.0.0'
    FOREIGN_LAYOUT = "SHI-Labs' Compact-Transformers layout"

    def __init__(self,
                 arch: Union[str, dict] = '7_3x1',
                 img_size: Optional[int] = None,
                 in_channels: int = 3,
                 positional_embedding: str = 'learnable',
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.1,
                 drop_path_rate: float = 0.1,
                 attn_cfg: dict = dict(type='MultiheadSelfAttention'),
                 norm_cfg: dict = dict(type='LN'),
                 act_cfg: dict = dict(type='GELU'),
                 out_type: str = 'pooled',
                 init_cfg=TRUNC_NORMAL_INIT_CFG,
                 **kwargs):
        a = parse_arch(arch, self.arch_zoo, self.essential_keys)
        super().__init__(
            a['num_layers'], out_type=out_type, init_cfg=init_cfg, **kwargs)
        self.arch_settings = a
        self.embed_dims = a['embed_dims']
        self.num_layers = a['num_layers']
        if positional_embedding not in self.POS_EMBEDS:
            raise ValueError(f'positional_embedding must be one of '
                             f'{list(self.POS_EMBEDS)}, got '
                             f'{positional_embedding!r}')
        self.positional_embedding = positional_embedding

        self.tokenizer = CCTTokenizer(
            in_channels,
            self.embed_dims,
            num_conv_layers=a['num_conv_layers'],
            kernel_size=a['kernel_size'])
        if img_size is None:
            img_size = 224 if a['kernel_size'] >= 7 else 32
        if not isinstance(img_size, int):
            raise TypeError(f'img_size must be an int (square inputs), got '
                            f'{img_size!r}')
        self.img_size = img_size
        side = self.tokenizer.output_size(img_size)
        self.patch_resolution = (side, side)
        num_tokens = side * side
        if positional_embedding == 'learnable':
            self.pos_embed = nn.Parameter(
                torch.zeros(1, num_tokens, self.embed_dims))
        elif positional_embedding == 'sine':
            self.pos_embed = nn.Parameter(
                _sinusoid_table(num_tokens, self.embed_dims),
                requires_grad=False)
        else:
            self.pos_embed = None
        self.drop_after_pos = FastDropout(p=drop_rate)

        rates, = self.drop_path_rates(drop_path_rate, [self.num_layers])
        self.layers = nn.ModuleList([
            CCTEncoderLayer(
                self.embed_dims, a['num_heads'], a['ffn_ratio'],
                drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                drop_path_rate=rate, attn_cfg=attn_cfg, norm_cfg=norm_cfg,
                act_cfg=act_cfg) for rate in rates
        ])
        self.norm = build_norm_layer(norm_cfg, self.embed_dims)[1]
        # Built only where forward uses it (DDP needs every parameter used).
        self.seq_pool = SeqPool(
            self.embed_dims) if out_type == 'pooled' else None

        self._freeze_stages()

    def init_weights(self):
        super().init_weights()
        if is_pretrained(self.init_cfg):
            return
        if self.positional_embedding == 'learnable':
            trunc_normal_(self.pos_embed, std=0.2)

    def reset_parameters(self):
        """The submodules', then the position embedding as built: zeros
        (``init_weights`` draws a learnable one) or the sinusoid."""
        super().reset_parameters()
        if self.pos_embed is None:
            return
        with torch.no_grad():
            if self.positional_embedding == 'sine':
                self.pos_embed.copy_(
                    _sinusoid_table(*self.pos_embed.shape[1:]))
            else:
                self.pos_embed.zero_()

    def stem_and_stages(self):
        stages = [[f'layers.{i}'] for i in range(self.num_layers)]
        stages[-1] += ['norm', 'seq_pool']
        return ['tokenizer', 'pos_embed', 'drop_after_pos'], stages

    def resized_state_dict(self, state_dict, source):
        """A learnable position embedding resampled to this grid
        (mmpretrain's ``resize_pos_embed``, bicubic); a sinusoid is this
        backbone's own table."""
        state_dict = dict(state_dict)
        if self.positional_embedding == 'learnable':
            state_dict['pos_embed'] = resize_pos_embed(
                state_dict['pos_embed'], source.patch_resolution,
                self.patch_resolution, mode='bicubic', num_extra_tokens=0)
        elif self.positional_embedding == 'sine':
            state_dict['pos_embed'] = self.pos_embed.detach().clone()
        return super().resized_state_dict(state_dict, source)

    @classmethod
    def convert_foreign(cls, state_dict):
        """The CCT authors' classifier (SHI-Labs/Compact-Transformers
        ``src/cct.py``, its published weights): ``tokenizer.*`` and
        ``classifier.{positional_emb, blocks.N, norm, attention_pool,
        fc}``, mapped onto an ImageClassifier with CCT and a
        ``LinearClsHead`` (``self_attn`` -> ``attn``, ``linear1`` /
        ``linear2`` -> the FFN's layers)."""
        if 'classifier.attention_pool.weight' not in state_dict:
            return None
        out, unmapped = {}, []
        for key, value in state_dict.items():
            for pattern, repl in _SHI_LABS_KEYS:
                new, n = re.subn(pattern, repl, key)
                if n:
                    out[new] = value
                    break
            else:
                unmapped.append(key)
        if unmapped:
            raise ValueError(f'{len(unmapped)} key(s) of the SHI-Labs CCT '
                             f'layout have no mapping: {unmapped[:10]}')
        return out

    def stage_taps(self):
        """The tokens after each layer (the last one before the norm)."""
        reduction = self.img_size // self.patch_resolution[0]
        return [
            StageTap(f'layers.{i}', token_output, self.embed_dims, reduction)
            for i in range(self.num_layers)
        ]

    def head_pool(self):
        """The norm on the last layer's tokens, then SeqPool."""
        if self.seq_pool is None:
            return None
        return HeadPool('seq', self._norm_map, self._seq_pool_map)

    def _norm_map(self, x: torch.Tensor) -> torch.Tensor:
        return tokens_to_map(self.norm(map_to_tokens(x)), x.shape[-2:])

    def _seq_pool_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.seq_pool(x)

    def forward(self, x: torch.Tensor) -> tuple:
        self.check_input(x)
        in_hw = tuple(x.shape[-2:])
        x, hw_shape = self.tokenizer(x)
        if self.pos_embed is not None:
            if hw_shape != self.patch_resolution:
                raise ValueError(
                    f'CCT with a {self.positional_embedding!r} positional '
                    f'embedding is built for img_size={self.img_size} '
                    f'({self.patch_resolution[0]}x'
                    f'{self.patch_resolution[1]} tokens) but got a '
                    f'{in_hw[0]}x{in_hw[1]} input ({hw_shape[0]}x'
                    f'{hw_shape[1]} tokens); set img_size to the input size '
                    "or use positional_embedding='none'.")
            x = x + self.pos_embed
        x = self.drop_after_pos(x)

        outs = []
        for i, layer in enumerate(self.layers):
            x = self.run_block(layer, x, hw_shape)
            if i == self.num_layers - 1:
                x = self.norm(x)
            if i in self.out_indices:
                if self.out_type == 'pooled':
                    outs.append(self.seq_pool(x))
                else:
                    outs.append(tokens_to_map(x, hw_shape))
        return tuple(outs)
