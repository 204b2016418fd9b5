"""A zoo classifier with timm's model API.

:class:`ZooTimmModel` builds the model an mmpretrain config describes,
``ImageClassifier(backbone, neck, head)``, from the same parts: the zoo's
backbone class (built from the config's ``backbone`` dict through
mmpretrain's registry), the ``GlobalAveragePooling`` neck as a pooling step
and the head's layers (``LinearClsHead``: ``head.fc``; ``LeViTClsHead``:
mmpretrain's ``BatchNormLinear`` at ``head.head``, and ``head.head_dist``
with distillation). The parameter names are the mmpretrain model's, so a
checkpoint of either loads into the other unchanged, and with the same seed
both draw the same initial weights (the layers are built and initialised in
the same order). :func:`resolve_model_cfg` gives the mmpretrain config a
model with given timm arguments equals (``ZooTimmModel.model_cfg``).
"""
import copy
import logging
import re
from contextlib import contextmanager, nullcontext
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.model.weight_init import initialize
from mmpretrain.models.heads.levit_head import BatchNormLinear
from mmpretrain.registry import MODELS
from timm.layers import SelectAdaptivePool2d
from timm.models._features import feature_take_indices
from timm.models._input import update_model_input_size

from lect_mm.models.backbones import ZooBackbone
from .taps import run_tapped

#: Backbone arguments that fix the classifier's structure.
_FIXED_ARGS = ('type', 'arch', 'in_channels', 'out_indices', 'out_type')
_GAP = 'GlobalAveragePooling'
_HEADS = ('LinearClsHead', 'LeViTClsHead')
#: timm's pooling types (``SelectAdaptivePool2d``), for a backbone that
#: returns maps; ``'avg'`` is the ``GlobalAveragePooling`` neck.
POOL_TYPES = ('avg', 'max', 'avgmax', 'catavgmax')


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


def backbone_class(backbone_cfg: dict) -> type:
    """The zoo backbone class a config's ``backbone`` dict names."""
    btype = backbone_cfg['type']
    cls = btype if isinstance(btype, type) else MODELS.get(btype)
    if cls is None or not issubclass(cls, ZooBackbone):
        raise ValueError(f'cfg.backbone.type={btype!r} is not a lect_mm zoo '
                         'backbone (a ZooBackbone registered in mmpretrain\'s '
                         'MODELS).')
    return cls


def resolve_model_cfg(cfg: dict,
                      num_classes: int = 10,
                      in_chans: int = 3,
                      img_size=None,
                      drop_path_rate: Optional[float] = None,
                      proj_drop_rate: Optional[float] = None,
                      attn_drop_rate: Optional[float] = None,
                      **backbone_args) -> dict:
    """The mmpretrain model config that a :class:`ZooTimmModel` of ``cfg``
    with these timm arguments equals (its ``model_cfg``).

    Args:
        cfg (dict): An ``ImageClassifier`` config of a zoo backbone (see
            :class:`ZooTimmModel`).
        num_classes, in_chans, img_size, drop_path_rate, proj_drop_rate,
        attn_drop_rate, **backbone_args: As :class:`ZooTimmModel`'s.

    Returns:
        dict: ``cfg`` with the arguments applied: the backbone's
        ``in_channels``, drop rates and further arguments, then its config
        for ``img_size``
        (:meth:`~lect_mm.models.backbones.ZooBackbone.cfg_at_size`: LeCT
        sets its pooled grids as the project's configs do at that size),
        and the head's ``num_classes``.
    """
    cfg = copy.deepcopy(dict(cfg))
    if cfg.get('type') != 'ImageClassifier':
        raise ValueError("cfg must be an ImageClassifier model config, "
                         f"got type={cfg.get('type')!r}.")
    if cfg.get('init_cfg') or cfg.get('data_preprocessor'):
        raise ValueError('cfg: a model-level init_cfg or '
                         'data_preprocessor has no timm counterpart.')
    neck, head = cfg.get('neck'), dict(cfg.get('head') or {})
    if neck is not None and neck.get('type') != _GAP:
        raise ValueError(f'cfg.neck must be None or {_GAP}, got '
                         f"{neck.get('type')!r}.")
    if head.get('type') not in _HEADS:
        raise ValueError(f'cfg.head must be one of {list(_HEADS)}, got '
                         f"{head.get('type')!r}.")
    if head['type'] == 'LeViTClsHead':
        # mmpretrain's default is a distillation head
        head.setdefault('distillation', True)
    backbone = dict(cfg['backbone'])
    btype = backbone['type']
    cls = backbone_class(backbone)
    refused = sorted(set(backbone_args) & set(_FIXED_ARGS))
    if refused:
        raise ValueError(
            f'{refused} fix the classifier of this config and cannot be '
            'changed (in_channels: use in_chans; for feature maps use '
            'features_only=True, out_indices=... or '
            'forward_intermediates).')
    if cls.fixed_in_channels is not None:
        if in_chans != cls.fixed_in_channels:
            raise ValueError(
                f'{btype} takes {cls.fixed_in_channels}-channel inputs '
                f'only: in_chans must be {cls.fixed_in_channels}, got '
                f'{in_chans}.')
    else:
        backbone['in_channels'] = in_chans
    for name, value in (('drop_path_rate', drop_path_rate),
                        ('drop_rate', proj_drop_rate),
                        ('attn_drop_rate', attn_drop_rate)):
        if value is not None:
            backbone[name] = value
    backbone.update(backbone_args)
    if img_size is not None:
        backbone = cls.cfg_at_size(backbone, img_size)
    head['num_classes'] = num_classes
    cfg.update(backbone=backbone, head=head)
    return cfg


class ZooTimmModel(nn.Module):
    """An mmpretrain ``ImageClassifier`` config of the zoo as a timm model.

    Args:
        cfg (dict): The config's ``model`` dict: ``type='ImageClassifier'``,
            a zoo ``backbone``, an optional ``GlobalAveragePooling`` neck and
            a ``LinearClsHead`` or ``LeViTClsHead`` (with distillation, the
            eval-mode output of both: the mean of its two classifiers, in
            training too, as timm's distilled LeViT).
        num_classes (int): Classes of the head; 0 builds none
            (``forward`` returns the pooled features). Defaults to 10.
        in_chans (int): Input channels (the backbone's ``in_channels``).
            Defaults to 3.
        img_size (int | tuple, optional): The input size the backbone is
            built for (LeCT, CeiT, CCT, LeViT): the backbone's ``img_size``
            and, for LeCT, the pooled grids the project's configs use at
            that size (:meth:`~lect_mm.models.backbones.LeCT.cfg_at_size`).
            Defaults to None, the config's.
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
        global_pool (str, optional): The pooling before the classifier, or
            ``''`` (none: ``forward`` returns the map). For a backbone that
            returns maps, one of timm's types (:data:`POOL_TYPES`;
            ``'avg'`` is the config's ``GlobalAveragePooling`` neck,
            ``'catavgmax'`` doubles the classifier's input); for a backbone
            that pools itself, its pooling (CeiT with GAP: ``'avg'``, mean +
            the backbone's norm; CCT: ``'seq'``, the backbone's norm +
            SeqPool; CeiT with LCA returns pooled features and takes only
            ``''``). Defaults to the config's.
        device, dtype: Where and in which dtype to build the parameters
            (``'meta'`` builds them without memory and skips the init;
            ``to_empty()`` then :meth:`init_weights` give every parameter
            and buffer the values of a build on a real device).
        **backbone_args: Further arguments of the backbone (e.g.
            ``with_cp``, ``frozen_stages``); those that fix the classifier's
            structure (``arch``, ``out_indices``, ...) are refused.

    Attributes:
        model_cfg (dict): The mmpretrain model config this model equals
            (:func:`resolve_model_cfg`).
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
        # what model_cfg is resolved from, for set_input_size
        self._cfg_args = dict(
            backbone_args, cfg=cfg, in_chans=in_chans,
            drop_path_rate=drop_path_rate, proj_drop_rate=proj_drop_rate,
            attn_drop_rate=attn_drop_rate)
        self.model_cfg = resolve_model_cfg(
            num_classes=num_classes, img_size=img_size, **self._cfg_args)
        backbone = self.model_cfg['backbone']
        head = self.model_cfg['head']
        neck = self.model_cfg.get('neck')
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.num_features = self.head_hidden_size = int(head['in_channels'])
        self.drop_rate = drop_rate
        self._norm_head = head['type'] == 'LeViTClsHead'
        self._distilled = self._norm_head and bool(head['distillation'])
        self._pools_maps = neck is not None
        self._head_init_cfg = head.get('init_cfg')
        self.grad_checkpointing = bool(backbone.get('with_cp', False))

        with torch.device(device) if device is not None else nullcontext():
            # the order of ImageClassifier: backbone, then head layers
            self.backbone = MODELS.build(backbone)
            self._head_pool = None if neck is not None else \
                self.backbone.head_pool()
            self._native_pool = 'avg' if neck is not None else (
                self._head_pool.name if self._head_pool else '')
            self.head = nn.Module()
            self._build_head(num_classes, global_pool)
        # a few buffers are made on the CPU whatever the default device
        # (mmpretrain's LeViT attention-bias indices)
        self.to(device=torch.device(device) if device is not None else
                torch.get_default_device())
        self._read_taps()
        stride = max(t.reduction for t in self._taps)
        if output_stride is not None and output_stride < stride:
            raise ValueError(
                f'output_stride={output_stride}: {backbone["type"]} does not '
                f'dilate its stages, whose largest stride is {stride}; '
                f'output_stride must be >= {stride}.')
        # a model built on 'meta' gets its constructors' values in
        # init_weights, once materialised
        self._materialise = self._on_meta()
        self.init_weights()
        if dtype is not None:
            self.to(dtype=dtype)

    def _read_taps(self):
        self._taps = self.backbone.stage_taps()
        self.feature_info = [
            dict(num_chs=t.num_chs, reduction=t.reduction,
                 module=f'backbone.{t.module}') for t in self._taps
        ]

    @torch.jit.ignore
    def set_input_size(self, img_size=None, patch_size=None) -> None:
        """timm's ``set_input_size``: the model for ``img_size`` inputs,
        as ``create_model(..., img_size=img_size)`` builds it, with this
        model's weights (CeiT's and CCT's position embeddings resampled as
        their forward resamples them; a backbone whose parameters change
        shape otherwise, such as LeCT v3's upsampler kernels or LeViT's
        attention biases, refuses). The patch embeddings are fixed.
        """
        if patch_size is not None:
            raise ValueError('patch_size: the zoo\'s patch embeddings are '
                             'part of the architecture; it must be None.')
        if img_size is None:
            return
        cfg = resolve_model_cfg(
            num_classes=self.num_classes, img_size=img_size,
            **self._cfg_args)
        old = self.backbone
        ref = next(iter(old.parameters()))
        with torch.device('meta'):
            new = MODELS.build(cfg['backbone'])
        new.to_empty(device=ref.device)
        for m in new.modules():
            if hasattr(m, 'init_non_persistent_buffers'):
                m.init_non_persistent_buffers()
        new.load_state_dict(new.resized_state_dict(old.state_dict(), old))
        new.to(dtype=ref.dtype).train(old.training)
        new.is_init = True  # its weights are loaded, not to be drawn
        self.backbone, self.model_cfg = new, cfg
        self._read_taps()
        if self._head_pool is not None:
            self._head_pool = new.head_pool()
        update_model_input_size(self, img_size)

    def _on_meta(self) -> bool:
        return any(t.is_meta
                   for t in (*self.parameters(), *self.buffers()))

    def _pool_choices(self) -> Tuple[str, ...]:
        if self._pools_maps:
            return POOL_TYPES + ('', )
        return (self._native_pool, '') if self._native_pool else ('', )

    def _build_head(self, num_classes: int, global_pool: Optional[str]):
        if global_pool is None:
            global_pool = self._native_pool
        choices = self._pool_choices()
        if global_pool not in choices:
            raise ValueError(f'global_pool must be one of {list(choices)} '
                             f'for this model, got {global_pool!r}.')
        self.head.global_pool = global_pool
        features = self.num_features
        if self._pools_maps:
            self.head.pool = SelectAdaptivePool2d(
                pool_type=global_pool, flatten=bool(global_pool))
            features *= self.head.pool.feat_mult()
        self.head_hidden_size = features
        self.head.drop = nn.Dropout(self.drop_rate)
        layer = BatchNormLinear if self._norm_head else nn.Linear
        names = ('head', 'head_dist') if self._distilled else (
            'head', ) if self._norm_head else ('fc', )
        for name in names:
            setattr(
                self.head, name,
                layer(features, num_classes)
                if num_classes > 0 else nn.Identity())

    def init_weights(self):
        """The mmpretrain model's init: the backbone's ``init_weights`` then
        the head's ``init_cfg``. Skipped while parameters are on the meta
        device; a model built there and materialised with ``to_empty()``
        first gets the values its constructors give (the backbone's
        :meth:`~lect_mm.models.backbones.ZooBackbone.reset_parameters` and
        the head layers'), as a build on a real device has them."""
        if self._on_meta():
            return
        with _quiet_init():
            if self._materialise:
                self.backbone.reset_parameters()
                for m in self.head.modules():
                    if hasattr(m, 'reset_parameters'):
                        m.reset_parameters()
                self._materialise = False
            self.backbone.init_weights()
            if self._head_init_cfg and self.num_classes > 0:
                initialize(self.head, self._head_init_cfg)

    # --- classifier -----------------------------------------------------
    def get_classifier(self) -> Union[nn.Module, Tuple[nn.Module, ...]]:
        """The classifier (with distillation: both, as timm's LeViT)."""
        if self._distilled:
            return self.head.head, self.head.head_dist
        return self.head.head if self._norm_head else self.head.fc

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        if self._distilled:
            # LeViTClsHead's eval-mode output
            return (self.head.head(x) + self.head.head_dist(x)) / 2
        return self.get_classifier()(x)

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
        return self._head_pool.features(maps[0])

    def forward_head(self,
                     x: torch.Tensor,
                     pre_logits: bool = False) -> torch.Tensor:
        if self._pools_maps:
            # 'avg': mmpretrain's GlobalAveragePooling
            x = self.head.pool(x)
        elif self.head.global_pool:
            x = self._head_pool.pool(x)
        x = self.head.drop(x)
        return x if pre_logits else self._classify(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._head_pool is not None and self.head.global_pool:
            # the backbone's own pooling, as the mmpretrain model
            x = self.head.drop(self.backbone(x)[-1])
            return self._classify(x)
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
        take = self._take_indices(indices)
        last = [len(self._taps) - 1] if self._head_pool else []
        outs, maps = run_tapped(self.backbone, x, self._taps, take + last)
        final = self._head_pool.features(maps.pop()) if last else outs[-1]
        if output_fmt == 'NHWC':
            maps = [m.permute(0, 2, 3, 1) for m in maps]
        return maps if intermediates_only else (final, maps)

    def _take_indices(self, indices) -> List[int]:
        """timm's ``feature_take_indices``, with an error that names the
        levels this model has (and, for a stride-4 model, the
        segmentation_models_pytorch ``encoder_depth`` that fits)."""
        n = len(self._taps)
        wanted = [indices] if isinstance(indices, int) else (
            [] if indices is None else list(indices))
        if isinstance(indices, int):
            bad = not 0 < indices <= n
        else:
            bad = any(not -n <= i < n for i in wanted)
        if bad:
            strides = [t.reduction for t in self._taps]
            hint = ''
            if strides == [2**(i + 2) for i in range(n)]:
                hint = (' segmentation_models_pytorch asks a timm encoder '
                        'whose first level has stride 4 for encoder_depth - '
                        f'1 levels: use encoder_depth <= {n + 1}.')
            raise ValueError(
                f'indices / out_indices {indices!r}: '
                f'{type(self.backbone).__name__} has {n} feature levels '
                f'(0 to {n - 1}, strides {strides}); an int takes the last '
                f'1 to {n}.{hint}')
        return feature_take_indices(n, indices)[0]

    def prune_intermediate_layers(self,
                                  indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        """Drop the classifier (``prune_head``); the stages stay (the
        backbone's forward runs them all)."""
        take = self._take_indices(indices)
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
