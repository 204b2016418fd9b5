"""The contract every backbone of the zoo shares, written once.

:class:`ZooBackbone` extends mmpretrain's ``BaseBackbone`` with what LeCT,
CeiT, ViTAE, CCT, AlterNet, NarrowResNet and FlexibleLeViT have in common:
the constructor tail (``out_indices``, ``frozen_stages``, ``norm_eval``,
``with_cp``, ``init_cfg``), freezing, ``get_layer_depth`` for mmpretrain's
``LearningRateDecayOptimWrapperConstructor``, the stochastic-depth schedule,
gradient checkpointing of blocks and the token -> map layout of outputs.
A subclass names its stem and stages once (:meth:`stem_and_stages`); both
``frozen_stages`` and the layer-wise learning-rate decay read them.

A backbone also states the facts that front doors other than mmpretrain's
read (``lect_mm.timm``): where each stage's output is read
(:meth:`ZooBackbone.stage_taps`), how a backbone that pools itself splits
into features and pooling (:meth:`ZooBackbone.head_pool`), whether it is
built for one input size (``takes_img_size``) and which convolutions read
the image (:meth:`ZooBackbone.first_conv`). Adding a backbone touches only
its own file.
"""
from dataclasses import dataclass
from functools import reduce
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmpretrain.models.backbones.base_backbone import BaseBackbone
from torch.nn.modules.batchnorm import _BatchNorm

from lect_mm.blocks.functional import tokens_to_map
from lect_mm.blocks.utils import run_checkpointed
from lect_mm.models.utils import (check_frozen_stages, freeze,
                                  parse_out_indices, parse_pooled_out)


@dataclass
class StageTap:
    """Where the output of one stage is read.

    The backbones return only the outputs of their ``out_indices``; a
    feature API that asks for any stage of the same model reads the stage
    outputs with a forward hook on the module that ends each stage, during
    the backbone's own forward.

    Attributes:
        module (str): Path of the module that ends the stage, inside the
            backbone.
        to_map (callable): ``(args, output) -> (B, C, H, W)`` from the
            arguments that module was called with and what it returned.
        num_chs (int): Channels of the map.
        reduction (int): Stride of the map from the input.
    """
    module: str
    to_map: Callable
    num_chs: int
    reduction: int


@dataclass
class HeadPool:
    """The pooling of a backbone that pools itself from its last map (CeiT
    with GAP, CCT), split as timm's ``forward_features`` / ``forward_head``.

    Attributes:
        name (str): Its ``global_pool`` name.
        features (callable): ``map -> (B, C, H, W)``: the map the pooling
            reads, from the last stage's tap.
        pool (callable): ``map -> (B, C)``: the backbone's pooling on it.
    """
    name: str
    features: Callable
    pool: Callable


def map_output(args, out: torch.Tensor) -> torch.Tensor:
    """A :class:`StageTap` ``to_map`` for a module that returns a map."""
    return out


def token_output(args, out: torch.Tensor, extra: int = 0) -> torch.Tensor:
    """A :class:`StageTap` ``to_map`` for a block called as
    ``block(x, hw_shape)`` on ``(B, extra + H * W, C)`` tokens."""
    return tokens_to_map(out[:, extra:], args[1])


def cumulative_strides(strides: Sequence[int], first: int = 1) -> List[int]:
    """The stride from the input after each of ``strides``."""
    out, total = [], first
    for s in strides:
        total *= s
        out.append(total)
    return out


class ZooBackbone(BaseBackbone):
    """Base of the zoo's backbones: the arguments and behaviour they share.

    A backbone is a stem and ``num_stages`` stages (blocks or groups of
    blocks, named by :meth:`stem_and_stages`), and returns one output per
    entry of ``out_indices``. ``frozen_stages`` freezes the stem and the
    first stages; :meth:`get_layer_depth` gives the stem depth 0, stage
    ``i`` depth ``i + 1`` and what follows the backbone (the neck and head)
    the last depth, ``num_stages + 1``, as mmpretrain's ViT and Swin do, so
    that ``LearningRateDecayOptimWrapperConstructor`` lowers the learning
    rate from the head down to the stem.

    A subclass parses its arch first, calls ``super().__init__`` with its
    number of stages and the keyword arguments it was given, builds its
    layers, then calls ``self._freeze_stages()``.

    Args:
        num_stages (int): Number of stages (for ``out_indices`` and
            ``frozen_stages``).
        out_indices (int | Sequence[int]): Stages whose outputs ``forward``
            returns, in stage order; negative indices count from the end.
            Defaults to -1, the last stage.
        out_type (str, optional): What a backbone with a pooled output
            (CeiT, CCT: ``OUT_TYPES``) returns: ``'pooled'``, the feature
            the classifier reads (after the last stage only), or
            ``'featmap'``, ``(B, C, H, W)`` maps. Must be None for the
            others, whose outputs are maps. Defaults to None.
        frozen_stages (int): -1 freezes nothing; k >= 0 freezes the stem and
            stages 0..k-1, each with its output norm (no gradients, eval
            mode), so k = num_stages freezes the whole backbone.
            Defaults to -1.
        norm_eval (bool): Keep every BatchNorm in eval mode while training
            (frozen running statistics). Defaults to False.
        with_cp (bool): Gradient checkpointing: blocks keep fewer
            activations for backward and compute them again there (less
            memory, a slower step), as mmpretrain's ``with_cp``. A block
            that implements ``with_cp`` itself (LeCT's blocks recompute
            only their cheap layers) is built with it; any other block runs
            under ``torch.utils.checkpoint``. Never both. Defaults to False.
        init_cfg (dict | list[dict], optional): Initialization config.
            Defaults to None.
        **kwargs: Arguments of the next base class (mmpretrain's ``LeViT``
            for :class:`FlexibleLeViT`).
    """

    #: What the stages are called in error messages.
    stage_name = 'stages'
    #: The ``out_type`` choices of a backbone with a pooled output.
    OUT_TYPES: Tuple[str, ...] = ()
    #: Whether ``__init__`` takes ``img_size``, the input size the backbone
    #: is built for (False: it takes any size and has no such argument).
    takes_img_size = False
    #: Whether that ``img_size`` is one int (square inputs only).
    square_img_size = False
    #: The input channels of a backbone without an ``in_channels`` argument
    #: (None: it has one).
    fixed_in_channels: Optional[int] = None
    #: Path of the convolution that reads the image (see :meth:`first_conv`).
    FIRST_CONV = ''
    #: Arguments that change no parameter and no eval-mode output (drop
    #: rates, checkpointing, freezing, init, which outputs are returned): a
    #: checkpoint's recorded config may differ from a model's in these.
    TRAINING_ARGS: Tuple[str, ...] = ('drop_rate', 'attn_drop_rate',
                                      'drop_path_rate', 'with_cp',
                                      'frozen_stages', 'norm_eval',
                                      'init_cfg', 'out_indices')
    #: The other checkpoint layout :meth:`convert_foreign` takes (the
    #: authors' code), for messages; None: none.
    FOREIGN_LAYOUT: Optional[str] = None

    def __init__(self,
                 num_stages: int,
                 out_indices: Union[int, Sequence[int]] = -1,
                 out_type: Optional[str] = None,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 init_cfg=None,
                 **kwargs):
        if self.OUT_TYPES:
            out_indices = parse_pooled_out(out_type, self.OUT_TYPES,
                                           out_indices, num_stages,
                                           self.stage_name)
        elif out_type is not None:
            raise TypeError(f'{type(self).__name__} takes no out_type: its '
                            'outputs are (B, C, H, W) maps.')
        out_indices = tuple(
            parse_out_indices(out_indices, num_stages, self.stage_name))
        frozen_stages = check_frozen_stages(frozen_stages, num_stages)
        super().__init__(init_cfg=init_cfg, **kwargs)
        self.num_stages = num_stages
        self.out_indices = out_indices
        self.out_type = out_type
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    def stem_and_stages(self) -> Tuple[List[str], List[List[str]]]:
        """Names (module or parameter paths) of the stem and of each stage,
        its output side (norms, pooling) included; a name the backbone did
        not build (None) is skipped."""
        raise NotImplementedError(
            f'{type(self).__name__} must name its stem and stages.')

    @classmethod
    def first_conv(cls, arch=None) -> Union[str, Tuple[str, ...]]:
        """The convolutions that read the image, as paths inside the
        backbone (timm's ``first_conv``, by which a checkpoint's stem is
        adapted to other input channels), for ``arch`` (a key of
        ``arch_zoo`` or a dict)."""
        return cls.FIRST_CONV

    @classmethod
    def cfg_at_size(cls, cfg: dict, img_size) -> dict:
        """The config of this backbone for ``img_size`` inputs: the model
        the project's configs use at that size (timm's ``img_size``). Here
        ``cfg`` with ``img_size`` set (an int where the backbone takes only
        square inputs); LeCT also sets its pooled grids.

        Args:
            cfg (dict): A config of this backbone.
            img_size (int | Sequence[int]): The input size.
        """
        if not cls.takes_img_size:
            raise ValueError(f'{cls.__name__} takes any input size and has '
                             'no img_size.')
        if isinstance(img_size, (list, tuple)):
            img_size = tuple(int(s) for s in img_size)
            if cls.square_img_size:
                if len(img_size) != 2 or img_size[0] != img_size[1]:
                    raise ValueError(
                        f'{cls.__name__} takes square inputs only: '
                        f'img_size must be an int, got {img_size}.')
                img_size = img_size[0]
        return dict(cfg, img_size=img_size)

    def resized_state_dict(self, state_dict: dict, source: nn.Module) -> dict:
        """``state_dict`` of ``source``, the same backbone built for another
        ``img_size``, for this one. Here every tensor must keep its shape
        (a ValueError names those that do not); CeiT and CCT resample their
        position embeddings."""
        own = self.state_dict()
        changed = sorted(k for k, v in state_dict.items()
                         if k in own and own[k].shape != v.shape)
        if changed:
            raise ValueError(
                f'{type(self).__name__} keeps no rule to carry {changed} to '
                'another img_size: build the model with that img_size '
                'instead.')
        return state_dict

    @classmethod
    def convert_foreign(cls, state_dict: dict) -> Optional[dict]:
        """A classifier's state dict in :attr:`FOREIGN_LAYOUT` -> the state
        dict of an mmpretrain ``ImageClassifier`` with this backbone
        (``backbone.*``, ``head.*``); None when ``state_dict`` is not in
        that layout."""
        return None

    @staticmethod
    def zoo_classes() -> List[type]:
        """Every zoo backbone class (the subclasses, recursively)."""
        found, todo = [], list(ZooBackbone.__subclasses__())
        while todo:
            found.append(todo.pop(0))
            todo.extend(found[-1].__subclasses__())
        return found

    @staticmethod
    def foreign_layout_of(state_dict: dict) -> Optional[type]:
        """The zoo backbone whose authors' layout ``state_dict`` is in
        (its :meth:`convert_foreign` takes it); None if none."""
        for cls in ZooBackbone.zoo_classes():
            if cls.convert_foreign(state_dict) is not None:
                return cls
        return None

    def stage_taps(self) -> List[StageTap]:
        """One :class:`StageTap` per stage, in order."""
        raise NotImplementedError(
            f'{type(self).__name__} must name where its stages end.')

    def head_pool(self) -> Optional[HeadPool]:
        """The :class:`HeadPool` of a backbone that pools itself from its
        last map; None for one that returns maps, or that pools from more
        than one map (CeiT's LCA over every block's class token)."""
        return None

    def reset_parameters(self) -> None:
        """Give every parameter and buffer the value the constructors give
        it, for a backbone built on the meta device and materialised with
        ``to_empty()`` (before :meth:`init_weights`): each submodule's
        ``reset_parameters`` and ``init_non_persistent_buffers`` (torch's
        and timm's names; the zoo's blocks with tensors of their own have
        them). A subclass with parameters of its own resets them too."""
        for m in self.modules():
            if m is self:
                continue
            for method in ('reset_parameters', 'init_non_persistent_buffers'):
                if hasattr(m, method):
                    getattr(m, method)()

    def _part(self, name: str):
        return reduce(lambda obj, attr: getattr(obj, attr, None),
                      name.split('.'), self)

    def _freeze_stages(self):
        """Freeze the stem and stages ``0..frozen_stages-1``."""
        if self.frozen_stages < 0:
            return
        stem, stages = self.stem_and_stages()
        for name in stem + sum(stages[:self.frozen_stages], []):
            freeze(self._part(name))

    def train(self, mode: bool = True):
        """``train(mode)``, then the frozen stages back to eval mode and,
        with ``norm_eval``, every BatchNorm too."""
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    def get_layer_depth(self, param_name: str,
                        prefix: str = '') -> Tuple[int, int]:
        """The layer-wise depth of a parameter and the number of depths.

        Args:
            param_name (str): The parameter's name in the model.
            prefix (str): The backbone's prefix in the model
                (``'backbone.'`` in a classifier). Defaults to ''.

        Returns:
            tuple[int, int]: The depth (0 for the stem, ``i + 1`` for stage
            ``i``, ``num_stages + 1`` for anything after the backbone) and
            the number of depths, ``num_stages + 2``.
        """
        num_layers = self.num_stages + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        name = param_name[len(prefix):]
        stem, stages = self.stem_and_stages()
        for depth, names in enumerate([stem] + stages):
            if any(name == n or name.startswith(n + '.') for n in names):
                return depth, num_layers
        return num_layers - 1, num_layers

    @staticmethod
    def drop_path_rates(drop_path_rate: float,
                        depths: Sequence[int]) -> List[List[float]]:
        """Stochastic depth rising linearly from 0 to ``drop_path_rate``
        over all blocks, split into one list per stage of ``depths``
        blocks."""
        # on the CPU whatever the default device (a model built on 'meta')
        rates = torch.linspace(
            0, drop_path_rate, sum(depths), device='cpu').tolist()
        return [
            rates[sum(depths[:i]):sum(depths[:i + 1])]
            for i in range(len(depths))
        ]

    def check_input(self, x: torch.Tensor) -> None:
        """Refuse anything but a ``(B, C, H, W)`` batch of images, before
        a layer fails on it with an error that does not name the input
        (torch's convolutions take an unbatched ``(C, H, W)`` image, the
        token blocks after them do not)."""
        if x.dim() != 4:
            hint = (' (one image without its batch dimension: add it with '
                    'x.unsqueeze(0))' if x.dim() == 3 else '')
            raise ValueError(
                f'{type(self).__name__} expected a 4-D (B, C, H, W) input, '
                f'got a {x.dim()}-D input of shape {tuple(x.shape)}{hint}.')

    def run_block(self, block: nn.Module, x: torch.Tensor, *args):
        """``block(x, *args)`` under the backbone's ``with_cp``
        (:func:`~lect_mm.blocks.utils.run_checkpointed`)."""
        return run_checkpointed(block, x, *args, with_cp=self.with_cp)
