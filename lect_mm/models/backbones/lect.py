"""LeCT: Locally-enhanced Convolutional Transformer (LeCT report §3).

Three stages, each ``ConvPatchEmbed -> depth x LeCTBlock -> LayerNorm``. The
blocks themselves (LeMSA, LeMSAv2, LeFFN, the query upsamplers) live in
:mod:`lect_mm.blocks`; this file composes one explicit config per stage
from the arch table and the per-stage overrides, so a config can swap the
attention, the FFN, the patch embedding or an upsampler without code
changes, and a swap that cannot serve is refused when the model is built.
"""
import copy
import inspect
import warnings
from typing import List, Optional, Sequence, Tuple, Union

import torch
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule, ModuleList
from mmpretrain.registry import MODELS

from lect_mm.blocks import SVConvTransposeUpsampler
from lect_mm.blocks.deploy import FuseConvBNMixin
from lect_mm.blocks.functional import batch_size, is_exporting
from lect_mm.blocks.utils import (accepted_args, check_norm_cfg, conv_out_size,
                                  set_defaults, to_pair)
from lect_mm.models.convert import convert_lect_ref
from lect_mm.models.utils import TRUNC_NORMAL_INIT_CFG, parse_arch
from .base_backbone import (StageTap, ZooBackbone, cumulative_strides,
                            map_output)


def _registered(type_) -> Optional[type]:
    """The class a config ``type`` names (None if it names none)."""
    return type_ if isinstance(type_, type) else MODELS.get(type_)


def merge_cfg(base: dict, override: Optional[dict]) -> dict:
    """Merge an override config onto a base config, recursively.

    Nested dicts are merged key by key. An override that names another
    ``type`` than ``base`` replaces it (nothing of ``base`` is kept), as
    does ``_delete_=True``, as in mmengine configs.

    Args:
        base (dict): The base config (not modified).
        override (dict, optional): The entries to apply on top.

    Returns:
        dict: A new merged config.
    """
    override = copy.deepcopy(dict(override or {}))
    if override.pop('_delete_', False):
        return override
    new_type = override.get('type')
    if new_type is not None and _registered(new_type) is not _registered(
            base.get('type')):
        return override
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_cfg(merged[key], value)
        else:
            merged[key] = value
    return merged


def _per_stage(cfg: Union[dict, Sequence[dict], None], num_stages: int,
               name: str) -> List[Tuple[Optional[dict], str]]:
    """One ``(override, config path)`` per stage."""
    if cfg is None or isinstance(cfg, dict):
        return [(cfg, name)] * num_stages
    cfg = list(cfg)
    if len(cfg) != num_stages:
        raise ValueError(f'{name} must be a dict or a list of {num_stages} '
                         f'dicts (one per stage), got {len(cfg)} entries.')
    return [(c, f'{name}[{i}]') for i, c in enumerate(cfg)]


def _with_eps(norm_cfg: dict, eps: float) -> dict:
    """``norm_cfg`` with ``eps`` where it sets none."""
    return dict(dict(eps=eps), **norm_cfg)


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
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 patch_embed: dict,
                 blocks: List[dict],
                 embed_dims: int,
                 norm_cfg: dict,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.patch_embed = MODELS.build(patch_embed)
        self.blocks = ModuleList([MODELS.build(cfg) for cfg in blocks])
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C_in, H_in, W_in) map -> normalised (B, C, H, W) map."""
        x, hw_shape = self.patch_embed(x)
        for block in self.blocks:
            x = block(x, hw_shape)
        # Normalised as the (B, H, W, C) map it becomes, a view of the
        # tokens: the same values, and an exported graph's last residual
        # addition stays an Add and a LayerNormalization, which ONNX
        # Runtime runs faster than the SkipLayerNormalization it fuses
        # from tokens.
        h, w = hw_shape
        x = self.norm(x.reshape(batch_size(x), h, w, x.shape[-1]))
        return x.permute(0, 3, 1, 2)


@MODELS.register_module()
class LeCT(ZooBackbone):
    """Locally-enhanced Convolutional Transformer backbone.

    Implements the network of the LeCT report (§3 LeMSA and LeFFN, Appendix
    LeCT v2 and v3): stage ``i`` is a convolutional patch embedding (kernel
    7 stride 4, then kernel 3 stride 2) followed by ``depths[i]``
    :class:`~lect_mm.blocks.LeCTBlock` and a LayerNorm.

    Each stage's blocks are built from one explicit config per sub-block:
    the arch table's (``attn_cfgs[i]``, ``LeFFN`` with ``ffn_ratios[i]``,
    ``ConvPatchEmbed``) with ``attn_cfg``, ``ffn_cfg`` and ``patch_cfg``
    (a dict for every stage or a list with one dict per stage) merged on
    top by :func:`merge_cfg`: keys merge, nested dicts too, and naming
    another ``type`` replaces the arch's config (no key of it is kept or
    dropped by the new type's signature). LeCT then offers each sub-block
    the backbone-level arguments below, where the config leaves them unset
    and the type's ``__init__`` names them (through ``**kwargs``, its base
    class's; docs/adding_a_block.md):

    - the attention: ``num_heads`` (the arch's), ``attn_drop``
      (``attn_drop_rate``), ``proj_drop`` (``drop_rate``), ``norm_cfg``
      (``conv_norm_cfg``) and ``input_size``, the stage's grid at
      ``img_size``, from which LeMSA and LeMSAv2 alone set their query
      upsampler's geometry;
    - the FFN: ``ffn_ratio`` (the arch's), ``ffn_drop`` (``drop_rate``),
      ``norm_cfg`` (``conv_norm_cfg``) and ``feedforward_channels =
      int(C * ffn_ratio)`` (mmcv's ``FFN`` names the width so).

    Examples::

        attn_cfg=dict(type='MultiheadSelfAttention')            # plain MSA
        attn_cfg=dict(conv_skip=False, qkv_mode='parallel')     # Table 3
        attn_cfg=dict(query_upsampler=dict(type='ResizeUpsampler'))
        attn_cfg=[dict(type='LeMSAv2', sr_ratio=sr, h_ratio=0.25)
                  for sr in (14, 7, 2)]
        ffn_cfg=dict(type='FFN', act_cfg=dict(type='GELU'))     # an MLP

    A sub-block that cannot serve in a LeCT block is refused at build,
    naming its config path: an attention whose ``forward`` takes no
    ``hw_shape``, or a block that expects extra (class) tokens before the
    ``H * W`` tokens (``num_extra_tokens``).

    Stem and stages (``frozen_stages``, ``get_layer_depth``): the stem is
    stage 0's patch embedding; a stage is its patch embedding, blocks and
    norm. Each output is a stage's normalised ``(B, C, H, W)`` map.

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
            size, exact there and resampled for any other input size (a
            warning says so, once, when training on another size). Every
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
            stride=..., norm_cfg=...)`` (kernel and stride from the arch's
            ``patch_sizes`` and ``strides``; a ``kernel_size``, ``stride``
            or ``padding`` given here wins). ``in_channels`` and
            ``embed_dims`` follow from the arch and, like a key the type
            does not take, raise a ValueError. Defaults to ``dict()``.
        attn_cfg (dict | list[dict]): Merged into each stage's attention
            config from the arch. Defaults to ``dict()``.
        ffn_cfg (dict | list[dict]): Merged into each stage's FFN config
            ``dict(type='LeFFN', ffn_ratio=...)``. A token-wise FFN is
            called without ``hw_shape`` (see
            :class:`~lect_mm.blocks.LeCTBlock`). Defaults to ``dict()``.
        norm_cfg (dict): Every LayerNorm of LeCT: those of the patch
            embeddings, the blocks and the stage outputs, which normalise
            ``(B, N, C)`` tokens. An ``eps`` it leaves unset is the
            reference's, 1e-5 in the patch embeddings and 1e-6 elsewhere.
            Defaults to ``dict(type='LN')``.
        conv_norm_cfg (dict): Every BatchNorm of LeCT: those of LeMSA and
            LeMSAv2, of their query upsamplers and of LeFFN, which normalise
            ``(B, C, H, W)`` maps (e.g. ``dict(type='SyncBN')``); it reaches
            any attention or FFN whose ``__init__`` takes ``norm_cfg``,
            unless its config sets one. A norm that cannot normalise maps
            (or, for ``norm_cfg``, tokens) raises a ValueError naming the
            argument. Defaults to ``dict(type='BN')``.
        deploy (bool): Build the inference structure, every conv →
            BatchNorm pair folded (:meth:`switch_to_deploy`), to load a
            checkpoint folded by mmpretrain's
            ``tools/model_converters/reparameterize_model.py``. Defaults to
            False.
        init_cfg (dict | list[dict], optional): Initialization config:
            truncated normal (std 0.02, bias 0) for Linear, 1/0 for
            LayerNorm; convolutions and BatchNorm keep PyTorch defaults.
        **kwargs: ``out_indices`` (default -1, the last stage),
            ``frozen_stages``, ``norm_eval`` and ``with_cp`` of
            :class:`ZooBackbone`. With ``with_cp`` the blocks recompute
            their cheap layers (norms, activations, dropouts, pooling,
            resizes, depthwise convolutions, the attention and the query
            upsampler) in backward; a swapped-in sub-block that does not
            implement ``with_cp`` runs under ``torch.utils.checkpoint``.
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
    takes_img_size = True
    FIRST_CONV = 'stages.0.patch_embed.proj'
    FOREIGN_LAYOUT = "the LeCT author's reference layout"

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
                 norm_cfg: dict = dict(type='LN'),
                 conv_norm_cfg: dict = dict(type='BN'),
                 deploy: bool = False,
                 init_cfg=TRUNC_NORMAL_INIT_CFG,
                 **kwargs):
        arch = self._parse_arch(arch)
        super().__init__(len(arch['embed_dims']), init_cfg=init_cfg, **kwargs)
        self.arch_settings = arch
        self.embed_dims = list(arch['embed_dims'])
        self.img_size = to_pair(img_size, 'img_size')
        check_norm_cfg(
            norm_cfg, 'tokens', 'norm_cfg', self.embed_dims[0],
            "LeCT's LayerNorms (patch embeddings, blocks, stage outputs; "
            "for its BatchNorms use conv_norm_cfg)")
        check_norm_cfg(
            conv_norm_cfg, 'maps', 'conv_norm_cfg', self.embed_dims[0],
            "LeCT's BatchNorms (LeMSA, LeMSAv2, their query upsamplers and "
            'LeFFN; for its LayerNorms use norm_cfg)')
        block_norm = _with_eps(norm_cfg, 1e-6)

        patch_cfgs = _per_stage(patch_cfg, self.num_stages, 'patch_cfg')
        attn_cfgs = _per_stage(attn_cfg, self.num_stages, 'attn_cfg')
        ffn_cfgs = _per_stage(ffn_cfg, self.num_stages, 'ffn_cfg')
        dpr = self.drop_path_rates(drop_path_rate, arch['depths'])
        size = self.img_size
        self.stages = ModuleList()
        prev_dims = in_channels
        for i, dims in enumerate(self.embed_dims):
            patch = self._patch_embed_cfg(
                patch_cfgs[i][0], arch['patch_sizes'][i], arch['strides'][i],
                _with_eps(norm_cfg, 1e-5))
            patch.update(in_channels=prev_dims, embed_dims=dims)
            kernel = patch.get('kernel_size', arch['patch_sizes'][i])
            stride = patch.get('stride', arch['strides'][i])
            padding = patch.get('padding')
            padding = kernel // 2 if padding is None else padding
            size = tuple(
                conv_out_size(s, kernel, stride, padding) for s in size)

            attn = set_defaults(
                merge_cfg(arch['attn_cfgs'][i], attn_cfgs[i][0]),
                num_heads=arch['num_heads'][i], attn_drop=attn_drop_rate,
                proj_drop=drop_rate, norm_cfg=conv_norm_cfg,
                input_size=size)
            ratio = arch['ffn_ratios'][i]
            ffn = set_defaults(
                merge_cfg(dict(type='LeFFN', ffn_ratio=ratio),
                          ffn_cfgs[i][0]),
                ffn_ratio=ratio, ffn_drop=drop_rate, norm_cfg=conv_norm_cfg,
                feedforward_channels=int(dims * ratio))

            blocks = [
                dict(type='LeCTBlock', embed_dims=dims,
                     attn_cfg=copy.deepcopy(attn),
                     ffn_cfg=copy.deepcopy(ffn), norm_cfg=block_norm,
                     drop_path_rate=dpr[i][j], with_cp=self.with_cp)
                for j in range(arch['depths'][i])
            ]
            stage = LeCTStage(patch, blocks, dims, block_norm)
            self._check_blocks(stage, attn_cfgs[i][1], ffn_cfgs[i][1])
            self.stages.append(stage)
            prev_dims = dims

        self._fixed_grid = any(
            isinstance(m, SVConvTransposeUpsampler) for m in self.modules())
        self._warned_size = False
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
                         stride: int, norm_cfg: dict) -> dict:
        """A stage's patch embedding config: ``patch_cfg`` merged onto
        ``ConvPatchEmbed`` with the arch's kernel and stride, every key
        checked against what the type accepts (``in_channels`` and
        ``embed_dims`` follow from the arch's widths)."""
        patch = merge_cfg(
            dict(type='ConvPatchEmbed', kernel_size=kernel_size,
                 stride=stride, norm_cfg=norm_cfg), patch_cfg)
        allowed = accepted_args(patch['type']) - {'in_channels', 'embed_dims'}
        refused = sorted(set(patch) - allowed - {'type'})
        if refused:
            raise ValueError(
                f'patch_cfg sets {refused}, which {patch["type"]!r} does not '
                'take or LeCT derives from the arch (in_channels, '
                f"embed_dims: arch['embed_dims']); accepted keys: "
                f'{sorted(allowed)}.')
        return patch

    @staticmethod
    def _check_blocks(stage: LeCTStage, attn_path: str, ffn_path: str):
        """Refuse sub-blocks that cannot serve in a LeCT block (config
        paths in the errors)."""
        if not stage.blocks:
            return
        block = stage.blocks[0]
        forward = inspect.signature(block.attn.forward)
        if 'hw_shape' not in forward.parameters:
            raise TypeError(
                f'{attn_path}: {type(block.attn).__name__}.forward{forward} '
                'takes no hw_shape, so it cannot serve as the attention of a '
                'LeCT block, which calls attn(x, hw_shape) on (B, H*W, C) '
                'tokens; choose a token block such as LeMSA, LeMSAv2 or '
                'MultiheadSelfAttention.')
        for path, module in ((attn_path, block.attn), (ffn_path, block.ffn)):
            extra = getattr(module, 'num_extra_tokens', 0)
            if extra:
                raise ValueError(
                    f'{path}: {type(module).__name__} expects '
                    f'num_extra_tokens={extra} (class) tokens before the '
                    'H*W patch tokens, which a LeCT block does not have; '
                    'set num_extra_tokens=0.')

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Return the normalised ``(B, C, H, W)`` maps of ``out_indices``."""
        self.check_input(x)
        size = tuple(x.shape[-2:])
        if (self.training and self._fixed_grid and size != self.img_size
                and not self._warned_size):
            self._warned_size = True
            warnings.warn(
                f'LeCT is built for img_size={self.img_size} but trains on '
                f'{size[0]}x{size[1]} inputs: its SVConvTransposeUpsampler '
                'kernels belong to the pooled grids of img_size and are '
                'resampled at every step. Set the backbone\'s img_size to '
                'the training size (warned once).')
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.out_indices:
                # A stage's map is a channels_last view of its tokens; an
                # exported graph hands a neck a plain one, which mmpretrain's
                # necks view without the index gather that torch.export
                # makes of a view of a strided tensor.
                outs.append(x.contiguous() if is_exporting() else x)
        return tuple(outs)

    def stem_and_stages(self):
        return ['stages.0.patch_embed'], [[f'stages.{i}']
                                          for i in range(self.num_stages)]

    @classmethod
    def cfg_at_size(cls, cfg, img_size):
        """``cfg`` for ``img_size`` inputs, with each LeMSA stage's pooled
        grid set as the project's configs set it at that size
        (``configs/fashion_mnist``): the grid the arch pools to at 224 (v1,
        v3: 4x4, 4x4, 7x7), capped at the stage's map, with
        ``sr_ratio = ceil(n / grid)`` for a stage map of side ``n`` (the
        shorter side; ceil-mode pooling). 64: sr_ratio 4, 2, 1; 112: 7, 4,
        1; 224: the arch's. A stage whose ``attn_cfg`` sets ``sr_ratio``,
        ``pool_size`` or ``type`` keeps it."""
        cfg = super().cfg_at_size(cfg, img_size)
        arch = cls._parse_arch(cfg.get('arch', 'v1'))
        num_stages = len(arch['embed_dims'])
        overrides = cfg.get('attn_cfg') or {}
        overrides = [dict(o or {}) for o in (
            [overrides] * num_stages if isinstance(overrides, dict)
            else overrides)]
        at_224 = cls._stage_sizes(arch, (224, 224))
        here = cls._stage_sizes(arch, to_pair(img_size, 'img_size'))
        changed = False
        for i, attn in enumerate(arch['attn_cfgs']):
            sr = attn.get('sr_ratio')
            if sr is None or {'sr_ratio', 'pool_size', 'type'} & set(
                    overrides[i]):
                continue
            grid = -(-min(at_224[i]) // sr)
            side = min(here[i])
            new_sr = -(-side // min(grid, side))
            if new_sr != sr:
                overrides[i]['sr_ratio'] = new_sr
                changed = True
        if changed:
            cfg['attn_cfg'] = overrides
        return cfg

    @staticmethod
    def _stage_sizes(arch: dict, size: Tuple[int, int]) -> list:
        """The ``(H, W)`` map of each stage for a ``size`` input (the
        arch's patch embeddings, padding ``kernel // 2``)."""
        sizes = []
        for kernel, stride in zip(arch['patch_sizes'], arch['strides']):
            size = tuple(
                conv_out_size(s, kernel, stride, kernel // 2) for s in size)
            sizes.append(size)
        return sizes

    @classmethod
    def convert_foreign(cls, state_dict):
        """The LeCT author's reference layout (``patch_embed1.*``,
        ``blocks1.0.leatt.*``, ...), by
        :func:`~lect_mm.models.convert.convert_lect_ref`."""
        if not any(k.startswith('patch_embed1.') for k in state_dict):
            return None
        return dict(convert_lect_ref(state_dict))

    def stage_taps(self):
        """The stages' normalised maps."""
        reductions = cumulative_strides(self.arch_settings['strides'])
        return [
            StageTap(f'stages.{i}', map_output, c, r)
            for i, (c, r) in enumerate(zip(self.embed_dims, reductions))
        ]

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
