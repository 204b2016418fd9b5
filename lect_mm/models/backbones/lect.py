"""LeCT: Locally-enhanced Convolutional Transformer (LeCT report §3).

Three stages, each ``ConvPatchEmbed -> depth x LeCTBlock -> LayerNorm``. The
blocks themselves (LeMSA, LeMSAv2, LeFFN, the query upsamplers) live in
:mod:`lect_mm.blocks`; this file only wires them from config dicts, so a config
can swap the attention, the FFN, the patch embedding or an upsampler without
code changes.
"""
import copy
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
from einops import rearrange
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule, ModuleList
from mmpretrain.models.backbones.base_backbone import BaseBackbone
from mmpretrain.registry import MODELS

from lect_mm.blocks.deploy import FuseConvBNMixin
from lect_mm.blocks.utils import (accepted_args, conv_out_size, set_defaults,
                                  set_named_defaults, to_pair)
from lect_mm.models.utils import (TRUNC_NORMAL_INIT_CFG, FreezeNormEvalMixin,
                                  freeze_stages, parse_arch, parse_out_indices,
                                  run_block)


def merge_cfg(base: dict, override: Optional[dict]) -> dict:
    """Merge an override config onto a base config, recursively.

    Nested dicts are merged key by key. When ``override`` names a different
    ``type`` than ``base``, only the entries of ``base`` that the new type's
    ``__init__`` accepts are kept (so e.g. ``sr_ratio`` survives a swap from
    LeMSA to LeMSAv2, and nothing LeMSA-specific reaches
    MultiheadSelfAttention). ``_delete_=True`` in ``override`` discards
    ``base`` altogether, as in mmengine configs.

    Args:
        base (dict): The base config (not modified).
        override (dict, optional): The entries to apply on top.

    Returns:
        dict: A new merged config.
    """
    override = copy.deepcopy(dict(override or {}))
    if override.pop('_delete_', False):
        return override
    merged = copy.deepcopy(dict(base))
    new_type = override.get('type')
    if new_type is not None and new_type != merged.get('type'):
        accepted = accepted_args(new_type)
        if accepted is not None:
            merged = {k: v for k, v in merged.items() if k in accepted}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_cfg(merged[key], value)
        else:
            merged[key] = value
    return merged


def _per_stage(cfg: Union[dict, Sequence[dict], None], num_stages: int,
               name: str) -> List[Optional[dict]]:
    if cfg is None or isinstance(cfg, dict):
        return [cfg] * num_stages
    cfg = list(cfg)
    if len(cfg) != num_stages:
        raise ValueError(f'{name} must be a dict or a list of {num_stages} '
                         f'dicts (one per stage), got {len(cfg)} entries.')
    return cfg


def _lemsa_cfgs(query_upsampler: dict) -> List[dict]:
    """The per-stage attention of LeCT v1 and v3: LeMSA with ``sr_ratio``
    14, 7, 2 and a bilinear key-axis resize; they differ in
    ``query_upsampler`` only (LeCT report §3.3, Appendix "LeCTv3")."""
    return [
        dict(type='LeMSA', sr_ratio=sr, key_upsample='bilinear',
             query_upsampler=copy.deepcopy(query_upsampler))
        for sr in (14, 7, 2)
    ]


class LeCTStage(BaseModule):
    """One LeCT stage: patch embedding, blocks, LayerNorm (LeCT report §3).

    Args:
        patch_embed (dict): Config of the patch embedding.
        blocks (list[dict]): Configs of the blocks.
        embed_dims (int): Channels of the stage.
        norm_cfg (dict): Config of the stage's final norm.
        with_cp (bool): Use gradient checkpointing in the blocks.
            Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 patch_embed: dict,
                 blocks: List[dict],
                 embed_dims: int,
                 norm_cfg: dict,
                 with_cp: bool = False,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.patch_embed = MODELS.build(patch_embed)
        self.blocks = ModuleList([MODELS.build(cfg) for cfg in blocks])
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.with_cp = with_cp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C_in, H_in, W_in) map -> normalised (B, C, H, W) map."""
        x, hw_shape = self.patch_embed(x)
        for block in self.blocks:
            x = run_block(block, x, hw_shape, self.with_cp)
        x = self.norm(x)
        return rearrange(
            x, 'b (h w) c -> b c h w', h=hw_shape[0], w=hw_shape[1])


@MODELS.register_module()
class LeCT(FreezeNormEvalMixin, BaseBackbone):
    """Locally-enhanced Convolutional Transformer backbone.

    Implements the network of the LeCT report (§3 LeMSA and LeFFN, Appendix
    LeCT v2 and v3): stage ``i`` is a convolutional patch embedding (kernel
    7 stride 4, then kernel 3 stride 2) followed by ``depths[i]``
    :class:`~lect_mm.blocks.LeCTBlock` and a LayerNorm.

    Everything inside a stage comes from config dicts: the arch table gives
    per-stage attention configs (``attn_cfgs``), and ``patch_cfg``,
    ``attn_cfg`` and ``ffn_cfg`` are merged on top of them with
    :func:`merge_cfg` (nested dicts merge; naming another ``type`` keeps only
    the entries the new type accepts). Examples::

        attn_cfg=dict(type='MultiheadSelfAttention')            # plain MSA
        attn_cfg=dict(conv_skip=False, qkv_mode='parallel')     # Table 3
        attn_cfg=dict(query_upsampler=dict(type='ResizeUpsampler'))
        attn_cfg=dict(type='LeMSAv2', h_ratio=0.25)     # keeps sr_ratio

    Args:
        arch (str | dict): LeCT variant, one of ``'v1'``, ``'v2'``, ``'v3'``
            (LeCT report §3 and Appendix), or a dict with the keys
            ``embed_dims``, ``depths``, ``num_heads``, ``ffn_ratios``,
            ``attn_cfgs`` (lists with one entry per stage) and optionally
            ``patch_sizes`` and ``strides`` (default kernel 7 stride 4, then
            kernel 3 stride 2).
            Defaults to 'v1'.
        img_size (int | tuple[int, int]): Input size the network is trained
            for. Only v3's SVConvTransposeUpsampler uses it: its
            per-position kernels are built for the pooled grids of this
            size, exact there and resampled for any other input size. Every
            variant accepts any input size. Defaults to 224.
        in_channels (int): Number of input image channels. Defaults to 3.
        drop_rate (float): Dropout of the attention projection
            (``proj_drop``) and of the FFN (``ffn_drop``). Defaults to 0.1.
        attn_drop_rate (float): Dropout of the attention weights.
            Defaults to 0.
        drop_path_rate (float): Stochastic depth rate, increased linearly
            from 0 over all blocks. Defaults to 0.1.
        patch_cfg (dict | list[dict]): Merged into each stage's patch
            embedding config ``dict(type='ConvPatchEmbed', kernel_size=...,
            stride=..., norm_cfg=LN eps 1e-5)`` (kernel and stride from the
            arch's ``patch_sizes`` and ``strides``; a ``kernel_size``,
            ``stride`` or ``padding`` given here wins). ``in_channels``
            and ``embed_dims`` follow from the arch and, like a key the
            type does not take, raise a ValueError. Defaults to ``dict()``.
        attn_cfg (dict | list[dict]): Merged into each stage's attention
            config from the arch. Defaults to ``dict()``.
        ffn_cfg (dict | list[dict]): Merged into each stage's FFN config
            ``dict(type='LeFFN', ffn_ratio=...)``. A type that takes
            ``feedforward_channels`` gets ``int(embed_dims * ffn_ratio)``,
            and a token-wise FFN is called without ``hw_shape`` (see
            :class:`~lect_mm.blocks.LeCTBlock`), so mmcv's
            ``dict(type='FFN', act_cfg=dict(type='GELU'))`` swaps in a plain
            MLP of the same width. Defaults to ``dict()``.
        norm_cfg (dict): Norm of the blocks and of each stage's output.
            Defaults to ``dict(type='LN', eps=1e-6)``.
        out_indices (Sequence[int] | int): Stages whose normalised
            ``(B, C, H, W)`` maps are returned. Defaults to ``(2, )``, the
            last stage.
        frozen_stages (int): -1 freezes nothing; k >= 0 freezes the stem and
            stages 0..k-1, each with its output norm (no gradients, eval
            mode), so k = num_stages freezes the whole backbone. The stem is
            stage 0's patch embedding; a stage is its patch embedding,
            blocks and norm. Defaults to -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training.
            Defaults to False.
        with_cp (bool): Gradient checkpointing of each block. Defaults to
            False.
        deploy (bool): Build the inference structure, every conv →
            BatchNorm pair folded (:meth:`switch_to_deploy`), to load a
            checkpoint folded by mmpretrain's
            ``tools/model_converters/reparameterize_model.py``. Defaults to
            False.
        init_cfg (dict | list[dict], optional): Initialization config:
            truncated normal (std 0.02, bias 0) for Linear, 1/0 for
            LayerNorm; convolutions and BatchNorm keep PyTorch defaults.
    """

    arch_zoo = {
        'v1': dict(
            embed_dims=[64, 128, 192],
            depths=[1, 3, 1],
            num_heads=[2, 4, 6],
            ffn_ratios=[2, 3, 4],
            attn_cfgs=_lemsa_cfgs(
                dict(type='ResizeDWConvUpsampler', mode='bilinear'))),
        'v2': dict(
            embed_dims=[64, 128, 192],
            depths=[1, 3, 1],
            num_heads=[2, 3, 7],
            ffn_ratios=[2, 3, 4],
            attn_cfgs=[
                dict(type='LeMSAv2', sr_ratio=sr, h_ratio=h_ratio,
                     key_upsample=mode,
                     query_upsampler=dict(
                         type='ResizeDWConvUpsampler', mode=mode))
                for sr, h_ratio, mode in [(14, 1 / 2, 'bicubic'),
                                          (7, 1 / 4, 'bilinear'),
                                          (7, 1 / 8, 'bilinear')]
            ]),
    }
    # v3 is v1 with the spatially-varying ConvTranspose query upsampler.
    arch_zoo['v3'] = dict(
        arch_zoo['v1'],
        attn_cfgs=_lemsa_cfgs(
            dict(type='SVConvTransposeUpsampler', cr_ratio=0.1)))
    essential_keys = ('embed_dims', 'depths', 'num_heads', 'ffn_ratios',
                      'attn_cfgs')

    def __init__(self,
                 arch: Union[str, dict] = 'v1',
                 img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 drop_rate: float = 0.1,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 patch_cfg: Union[dict, Sequence[dict]] = dict(),
                 attn_cfg: Union[dict, Sequence[dict]] = dict(),
                 ffn_cfg: Union[dict, Sequence[dict]] = dict(),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 out_indices: Union[int, Sequence[int]] = (2, ),
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 deploy: bool = False,
                 init_cfg=TRUNC_NORMAL_INIT_CFG):
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self._parse_arch(arch)
        arch = self.arch_settings
        self.embed_dims = list(arch['embed_dims'])
        self.num_stages = len(self.embed_dims)
        self.img_size = to_pair(img_size, 'img_size')
        self.out_indices = tuple(
            parse_out_indices(out_indices, self.num_stages, 'stages'))
        self._init_freezing(frozen_stages, self.num_stages, norm_eval)

        patch_cfgs = _per_stage(patch_cfg, self.num_stages, 'patch_cfg')
        attn_cfgs = _per_stage(attn_cfg, self.num_stages, 'attn_cfg')
        ffn_cfgs = _per_stage(ffn_cfg, self.num_stages, 'ffn_cfg')

        total_depth = sum(arch['depths'])
        dpr = torch.linspace(0, drop_path_rate, total_depth).tolist()
        size = self.img_size
        self.stages = ModuleList()
        prev_dims, block_idx = in_channels, 0
        for i, dims in enumerate(self.embed_dims):
            patch = self._patch_embed_cfg(patch_cfgs[i],
                                          arch['patch_sizes'][i],
                                          arch['strides'][i])
            patch.update(in_channels=prev_dims, embed_dims=dims)
            kernel = patch.get('kernel_size', arch['patch_sizes'][i])
            stride = patch.get('stride', arch['strides'][i])
            padding = patch.get('padding')
            padding = kernel // 2 if padding is None else padding
            size = tuple(
                conv_out_size(s, kernel, stride, padding) for s in size)

            attn = merge_cfg(arch['attn_cfgs'][i], attn_cfgs[i])
            attn = set_defaults(
                attn, num_heads=arch['num_heads'][i],
                attn_drop=attn_drop_rate, proj_drop=drop_rate)
            self._bind_resolution(attn, size)
            ffn = merge_cfg(
                dict(type='LeFFN', ffn_ratio=arch['ffn_ratios'][i]),
                ffn_cfgs[i])
            ffn = set_defaults(ffn, ffn_drop=drop_rate)
            ffn = set_named_defaults(
                ffn, feedforward_channels=int(dims * arch['ffn_ratios'][i]))

            blocks = [
                dict(type='LeCTBlock', embed_dims=dims,
                     attn_cfg=copy.deepcopy(attn),
                     ffn_cfg=copy.deepcopy(ffn), norm_cfg=norm_cfg,
                     drop_path_rate=dpr[block_idx + j])
                for j in range(arch['depths'][i])
            ]
            block_idx += arch['depths'][i]
            self.stages.append(
                LeCTStage(patch, blocks, dims, norm_cfg, with_cp=with_cp))
            prev_dims = dims

        self._freeze_stages()
        self.deploy = False
        if deploy:
            self.switch_to_deploy()

    @classmethod
    def _parse_arch(cls, arch: Union[str, dict]) -> dict:
        arch = parse_arch(arch, cls.arch_zoo, cls.essential_keys,
                          cls.essential_keys + ('patch_sizes', 'strides'))
        num_stages = len(arch['embed_dims'])
        arch.setdefault('patch_sizes', [7] + [3] * (num_stages - 1))
        arch.setdefault('strides', [4] + [2] * (num_stages - 1))
        return arch

    @staticmethod
    def _patch_embed_cfg(patch_cfg: Optional[dict], kernel_size: int,
                         stride: int) -> dict:
        """A stage's patch embedding config: ``patch_cfg`` merged onto
        ``ConvPatchEmbed`` with the arch's kernel and stride, every key
        checked against what the type accepts (``in_channels`` and
        ``embed_dims`` follow from the arch's widths)."""
        patch = merge_cfg(
            dict(type='ConvPatchEmbed', kernel_size=kernel_size,
                 stride=stride, norm_cfg=dict(type='LN', eps=1e-5)),
            patch_cfg)
        accepted = accepted_args(patch['type'])
        if accepted is None:
            return patch
        allowed = accepted - {'in_channels', 'embed_dims'}
        refused = sorted(set(patch) - allowed - {'type'})
        if refused:
            raise ValueError(
                f'patch_cfg sets {refused}, which {patch["type"]!r} does not '
                'take or LeCT derives from the arch (in_channels, '
                f"embed_dims: arch['embed_dims']); accepted keys: "
                f'{sorted(allowed)}.')
        return patch

    @staticmethod
    def _bind_resolution(attn: dict, size: Tuple[int, int]):
        """Give a query upsampler that takes ``in_size`` (v3's
        SVConvTransposeUpsampler) the pooled grid ``(ceil(H/K), ceil(W/K))``
        and ``scale_factor=K`` of this stage's map ``(H, W)`` at
        ``img_size`` (with ``pool_size``, the attention passes that grid)."""
        upsampler = attn.get('query_upsampler')
        sr_ratio = attn.get('sr_ratio')
        if (not isinstance(upsampler, dict) or 'type' not in upsampler
                or sr_ratio is None):
            return
        accepted = accepted_args(upsampler['type'])
        if accepted is not None and 'in_size' in accepted:
            upsampler.setdefault(
                'in_size', tuple(math.ceil(s / sr_ratio) for s in size))
            upsampler.setdefault('scale_factor', sr_ratio)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Return the normalised ``(B, C, H, W)`` maps of ``out_indices``."""
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    def switch_to_deploy(self):
        """Fold every conv → BatchNorm pair for inference, as mmpretrain's
        LeViT: LeMSA's depthwise branches (and LeMSAv2's ``conv3``), the
        query upsamplers and LeFFN
        (:class:`~lect_mm.blocks.deploy.FuseConvBNMixin`). Eval-mode outputs
        are unchanged up to float rounding; the folded model is for
        inference only."""
        if self.deploy:
            return
        for module in list(self.modules()):
            if isinstance(module, FuseConvBNMixin):
                module.switch_to_deploy()
        self.deploy = True

    def _freeze_stages(self):
        freeze_stages(self.frozen_stages, [self.stages[0].patch_embed],
                      [[stage] for stage in self.stages])
