"""A zoo classifier with timm's model API.

:class:`ZooTimmModel` builds the model an mmpretrain config describes,
``ImageClassifier(backbone, neck, head)``, from the same parts: the zoo's
backbone class (built from the config's ``backbone`` dict through
mmpretrain's registry), the ``GlobalAveragePooling`` neck as a pooling step
and the head's layers (``LinearClsHead``: ``head.fc``; ``LeViTClsHead``
without distillation: mmpretrain's ``BatchNormLinear`` at ``head.head``). The
parameter names are the mmpretrain model's, so a checkpoint of either loads
into the other unchanged, and with the same seed both draw the same initial
weights (the layers are built and initialised in the same order).
"""
import copy
import logging
import re
from contextlib import contextmanager, nullcontext
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MMLogger
from mmengine.model.weight_init import initialize
from mmpretrain.models.heads.levit_head import BatchNormLinear
from mmpretrain.registry import MODELS
from timm.models._features import feature_take_indices

from .taps import head_pool, run_tapped, stage_taps

#: Backbone arguments that fix the classifier's structure.
_FIXED_ARGS = ('type', 'arch', 'in_channels', 'out_indices', 'out_type')
#: Backbones whose constructor takes ``img_size``.
_TAKES_IMG_SIZE = ('LeCT', 'CeiT', 'CCT', 'FlexibleLeViT')
#: ... of which these take an int (square inputs) only.
_SQUARE_IMG_SIZE = ('CCT', 'FlexibleLeViT')
_GAP = 'GlobalAveragePooling'
_HEADS = ('LinearClsHead', 'LeViTClsHead')


@contextmanager
def _quiet_init():
    """Keep mmengine's per-parameter init report (INFO lines through the
    current logger) out of the output; warnings still show."""
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _img_size_arg(img_size, backbone_type: str):
    if isinstance(img_size, (list, tuple)):
        img_size = tuple(int(s) for s in img_size)
        if backbone_type in _SQUARE_IMG_SIZE:
            if len(img_size) != 2 or img_size[0] != img_size[1]:
                raise ValueError(f'{backbone_type} takes square inputs only: '
                                 f'img_size must be an int, got {img_size}.')
            return img_size[0]
    return img_size


class ZooTimmModel(nn.Module):
    """An mmpretrain ``ImageClassifier`` config of the zoo as a timm model.

    Args:
        cfg (dict): The config's ``model`` dict: ``type='ImageClassifier'``,
            a zoo ``backbone``, an optional ``GlobalAveragePooling`` neck and
            a ``LinearClsHead`` or ``LeViTClsHead(distillation=False)``.
        num_classes (int): Classes of the head; 0 builds none
            (``forward`` returns the pooled features). Defaults to 10.
        in_chans (int): Input channels (the backbone's ``in_channels``).
            Defaults to 3.
        img_size (int | tuple, optional): The backbone's ``img_size`` (LeCT,
            CeiT, CCT, LeViT): the size it is built for. Defaults to None,
            the config's.
        drop_rate (float): Dropout before the classifier (timm's meaning;
            the config's heads have none). Defaults to 0.
        drop_path_rate (float, optional): The backbone's stochastic depth.
        proj_drop_rate (float, optional): The backbone's ``drop_rate``
            (attention projection and FFN dropout).
        attn_drop_rate (float, optional): The backbone's
            ``attn_drop_rate``.
        output_stride (int, optional): The largest stride the features may
            have (timm's dense-prediction argument). The zoo's backbones do
            not dilate, so it must be at least the last stage's stride
            (LeCT 16): a no-op then, a ValueError below. Defaults to None.
        global_pool (str, optional): The config's pooling or ``''`` (none:
            ``forward`` returns the map): ``'avg'``, the
            ``GlobalAveragePooling`` neck; for a backbone that pools itself,
            its pooling (CeiT with GAP: ``'avg'``, mean + the backbone's
            norm; CCT: ``'seq'``, the backbone's norm + SeqPool; CeiT with
            LCA returns pooled features and takes only ``''``). Defaults to
            the config's.
        device, dtype: Where and in which dtype to build the parameters
            (``'meta'`` builds them without memory and skips the init).
        **backbone_args: Further arguments of the backbone (e.g.
            ``with_cp``, ``frozen_stages``); those that fix the classifier's
            structure (``arch``, ``out_indices``, ...) are refused.
    """

    def __init__(self,
                 cfg: dict,
                 num_classes: int = 10,
                 in_chans: int = 3,
                 img_size=None,
                 drop_rate: float = 0.,
                 drop_path_rate: Optional[float] = None,
                 proj_drop_rate: Optional[float] = None,
                 attn_drop_rate: Optional[float] = None,
                 global_pool: Optional[str] = None,
                 output_stride: Optional[int] = None,
                 device=None,
                 dtype=None,
                 **backbone_args):
        super().__init__()
        cfg = copy.deepcopy(dict(cfg))
        backbone = self._backbone_cfg(cfg, in_chans, img_size,
                                      drop_path_rate, proj_drop_rate,
                                      attn_drop_rate, backbone_args)
        head = dict(cfg['head'])
        neck = cfg.get('neck')
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.num_features = self.head_hidden_size = int(head['in_channels'])
        self.drop_rate = drop_rate
        self._norm_head = head['type'] == 'LeViTClsHead'
        self._head_init_cfg = head.get('init_cfg')
        self.grad_checkpointing = bool(backbone.get('with_cp', False))

        with torch.device(device) if device is not None else nullcontext():
            # the order of ImageClassifier: backbone, then head layers
            self.backbone = MODELS.build(backbone)
            self._head_pool = None if neck is not None else head_pool(
                self.backbone)
            self._native_pool = 'avg' if neck is not None else (
                self._head_pool.name if self._head_pool else '')
            self.head = nn.Module()
            self._build_head(num_classes, global_pool)
        # a few buffers are made on the CPU whatever the default device
        # (mmpretrain's LeViT attention-bias indices)
        self.to(device=torch.device(device) if device is not None else
                torch.get_default_device())
        self._taps = stage_taps(self.backbone)
        self.feature_info = [
            dict(num_chs=t.num_chs, reduction=t.reduction,
                 module=f'backbone.{t.module}') for t in self._taps
        ]
        stride = max(t.reduction for t in self._taps)
        if output_stride is not None and output_stride < stride:
            raise ValueError(
                f'output_stride={output_stride}: {backbone["type"]} does not '
                f'dilate its stages, whose largest stride is {stride}; '
                f'output_stride must be >= {stride}.')
        self.init_weights()
        if dtype is not None:
            self.to(dtype=dtype)

    @staticmethod
    def _backbone_cfg(cfg, in_chans, img_size, drop_path_rate,
                      proj_drop_rate, attn_drop_rate, backbone_args) -> dict:
        if cfg.get('type') != 'ImageClassifier':
            raise ValueError("cfg must be an ImageClassifier model config, "
                             f"got type={cfg.get('type')!r}.")
        if cfg.get('init_cfg') or cfg.get('data_preprocessor'):
            raise ValueError('cfg: a model-level init_cfg or '
                             'data_preprocessor has no timm counterpart.')
        neck, head = cfg.get('neck'), cfg.get('head') or {}
        if neck is not None and neck.get('type') != _GAP:
            raise ValueError(f'cfg.neck must be None or {_GAP}, got '
                             f"{neck.get('type')!r}.")
        if head.get('type') not in _HEADS or head.get('distillation'):
            raise ValueError(f'cfg.head must be one of {list(_HEADS)} '
                             "(LeViTClsHead with distillation=False), got "
                             f"{head.get('type')!r}.")
        backbone = dict(cfg['backbone'])
        btype = backbone['type']
        refused = sorted(set(backbone_args) & set(_FIXED_ARGS))
        if refused:
            raise ValueError(
                f'{refused} fix the classifier of this config and cannot be '
                'changed (in_channels: use in_chans; for feature maps use '
                'features_only=True, out_indices=... or '
                'forward_intermediates).')
        if btype == 'FlexibleLeViT':
            if in_chans != 3:
                raise ValueError('LeViT takes RGB inputs only (its '
                                 f'patch embedding has 3 channels): in_chans '
                                 f'must be 3, got {in_chans}.')
        else:
            backbone['in_channels'] = in_chans
        if img_size is not None:
            if btype not in _TAKES_IMG_SIZE:
                raise ValueError(
                    f'{btype} takes any input size and has no img_size; '
                    f'img_size is for {list(_TAKES_IMG_SIZE)}.')
            backbone['img_size'] = _img_size_arg(img_size, btype)
        for name, value in (('drop_path_rate', drop_path_rate),
                            ('drop_rate', proj_drop_rate),
                            ('attn_drop_rate', attn_drop_rate)):
            if value is not None:
                backbone[name] = value
        backbone.update(backbone_args)
        return backbone

    def _build_head(self, num_classes: int, global_pool: Optional[str]):
        if global_pool is None:
            global_pool = self._native_pool
        if global_pool not in (self._native_pool, ''):
            raise ValueError(
                f"global_pool must be '{self._native_pool}' or '' for this "
                f'model, got {global_pool!r}.')
        self.head.global_pool = global_pool
        self.head.drop = nn.Dropout(self.drop_rate)
        if self._norm_head:
            self.head.head = BatchNormLinear(
                self.num_features,
                num_classes) if num_classes > 0 else nn.Identity()
        else:
            self.head.fc = nn.Linear(
                self.num_features,
                num_classes) if num_classes > 0 else nn.Identity()

    def init_weights(self):
        """The mmpretrain model's init: the backbone's ``init_weights`` then
        the head's ``init_cfg`` (skipped for parameters on the meta
        device)."""
        if any(p.is_meta for p in self.parameters()):
            return
        with _quiet_init():
            self.backbone.init_weights()
            if self._head_init_cfg and self.num_classes > 0:
                initialize(self.head, self._head_init_cfg)

    # --- classifier -----------------------------------------------------
    def get_classifier(self) -> nn.Module:
        return self.head.head if self._norm_head else self.head.fc

    def reset_classifier(self,
                         num_classes: int,
                         global_pool: Optional[str] = None):
        """A new classifier for ``num_classes`` (0: none), initialised as
        the config's head."""
        param = next(iter(self.backbone.parameters()))
        if global_pool is None:
            global_pool = self.head.global_pool
        with torch.device(param.device):
            self._build_head(num_classes, global_pool)
        self.head.to(dtype=param.dtype)
        self.head.train(self.training)
        self.num_classes = num_classes
        if self._head_init_cfg and num_classes > 0 and not param.is_meta:
            with _quiet_init():
                initialize(self.head, self._head_init_cfg)

    # --- forward --------------------------------------------------------
    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The ``(B, C, H, W)`` map the head pools: the backbone's output,
        or, for a backbone that pools itself from its last map (CeiT with
        GAP, CCT), that map; the pooled ``(B, C)`` of CeiT with LCA."""
        if self._head_pool is None:
            return self.backbone(x)[-1]
        last = len(self._taps) - 1
        _, maps = run_tapped(self.backbone, x, self._taps, [last])
        return self._head_pool.features(self.backbone, maps[0])

    def forward_head(self,
                     x: torch.Tensor,
                     pre_logits: bool = False) -> torch.Tensor:
        if self.head.global_pool and self._head_pool is not None:
            x = self._head_pool.pool(self.backbone, x)
        elif self.head.global_pool == 'avg':
            # mmpretrain's GlobalAveragePooling
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        x = self.head.drop(x)
        return x if pre_logits else self.get_classifier()(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._head_pool is not None and self.head.global_pool:
            # the backbone's own pooling, as the mmpretrain model
            x = self.head.drop(self.backbone(x)[-1])
            return self.get_classifier()(x)
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: Optional[Union[int, Sequence[int]]] = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = 'NCHW',
        intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """The stage maps of ``indices`` (timm's meaning: None all, an int
        the last n, else the listed stages), read during one forward of the
        backbone (``stop_early`` and ``norm`` change nothing: the forward
        runs to the end, and the maps are the stages' own outputs).

        Returns:
            The maps, or ``(forward_features(x), maps)``.
        """
        if output_fmt not in ('NCHW', 'NHWC'):
            raise ValueError(
                f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}.")
        take, _ = feature_take_indices(len(self._taps), indices)
        last = [len(self._taps) - 1] if self._head_pool else []
        outs, maps = run_tapped(self.backbone, x, self._taps, take + last)
        final = self._head_pool.features(
            self.backbone, maps.pop()) if last else outs[-1]
        if output_fmt == 'NHWC':
            maps = [m.permute(0, 2, 3, 1) for m in maps]
        return maps if intermediates_only else (final, maps)

    def prune_intermediate_layers(self,
                                  indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        """Drop the classifier (``prune_head``); the stages stay (the
        backbone's forward runs them all)."""
        take, _ = feature_take_indices(len(self._taps), indices)
        if prune_head:
            self.reset_classifier(0, '')
        return take

    # --- training helpers -----------------------------------------------
    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True):
        """The backbone's ``with_cp``: set on the backbone and on every block
        that implements it, as building with ``with_cp=enable`` does."""
        for m in self.backbone.modules():
            if isinstance(getattr(m, 'with_cp', None), bool):
                m.with_cp = enable
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict:
        """Parameter groups for timm's layer-wise lr decay: the stem, one
        group per stage, then the head (the backbone's
        ``stem_and_stages``, as its ``get_layer_depth`` for mmpretrain's
        ``LearningRateDecayOptimWrapperConstructor``)."""
        stem, stages = self.backbone.stem_and_stages()

        def pattern(names):
            alt = '|'.join(re.escape(n) for n in names)
            return rf'^backbone\.(?:{alt})(?:\.|$)'

        return dict(
            stem=pattern(stem),
            blocks=[(pattern(names), (i, ))
                    for i, names in enumerate(stages)])

    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        """Position embeddings and class tokens, as timm's transformers."""
        names = ('pos_embed', 'cls_token', 'pos_layer_embed')
        return {
            f'backbone.{n}'
            for n in names if getattr(self.backbone, n, None) is not None
        }
