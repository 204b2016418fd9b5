"""Config and argument helpers of the blocks and backbones.

A block that builds a swappable sub-block (``attn_cfg=dict(type=...)``) has
block-level arguments such as ``num_heads`` or ``attn_drop_rate``; they are
offered to the sub-block's config only where the config leaves them unset
and the target type's ``__init__`` names them (or, through ``**kwargs``, the
``__init__`` of a base class it passes them to), so any registered type can
be named without passing it arguments it does not know.
"""
import copy
import inspect
import numbers
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import FFN
from mmengine.utils import to_2tuple
from mmpretrain.registry import MODELS

from lect_mm.utils import init_arguments


def accepted_args(type_) -> set:
    """Names accepted by the ``__init__`` of a registered type
    (:func:`lect_mm.utils.init_arguments`).

    Args:
        type_ (str | type): A registered name or the class itself.

    Returns:
        set: The argument names.
    """
    cls = MODELS.get(type_) if isinstance(type_, str) else type_
    if cls is None:
        raise KeyError(f'{type_!r} is not in the mmpretrain::model registry; '
                       'did you import lect_mm (custom_imports)?')
    return set(init_arguments(cls))


def set_defaults(cfg: dict, **defaults) -> dict:
    """Fill ``defaults`` into a copy of ``cfg`` where accepted and unset.

    Entries already in ``cfg`` win; a default reaches the config only if
    ``cfg['type']`` accepts it by name (:func:`accepted_args`).

    Args:
        cfg (dict): A config with a ``type`` (not modified).
        **defaults: Candidate arguments.

    Returns:
        dict: A new config.
    """
    if 'type' not in cfg:
        raise KeyError(f'The config {cfg} names no "type".')
    cfg = copy.deepcopy(dict(cfg))
    accepted = accepted_args(cfg['type'])
    for key, value in defaults.items():
        if key in accepted:
            cfg.setdefault(key, value)
    return cfg


def build_attention(attn_cfg: dict, embed_dims: int, num_heads: int,
                    qkv_bias: bool, attn_drop: float, proj_drop: float,
                    impl: str) -> nn.Module:
    """Build a token block's attention from ``attn_cfg`` via the registry.

    The block's own arguments fill the config where it leaves them unset and
    the attention type accepts them (see :func:`set_defaults`).

    Args:
        attn_cfg (dict): Attention config, e.g.
            ``dict(type='MultiheadSelfAttention')`` or
            ``dict(type='LeMSA', sr_ratio=2)``.
        embed_dims (int): Token channels.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias of the q/k/v projections.
        attn_drop (float): Dropout of the attention weights.
        proj_drop (float): Dropout after the output projection.
        impl (str): ``'fused'`` or ``'literal'`` where the type has both.

    Returns:
        nn.Module: The built attention.
    """
    cfg = set_defaults(
        attn_cfg,
        num_heads=num_heads,
        qkv_bias=qkv_bias,
        attn_drop=attn_drop,
        proj_drop=proj_drop,
        impl=impl)
    return MODELS.build(cfg, default_args=dict(embed_dims=embed_dims))


def build_mlp(embed_dims: int,
              hidden_dims: int,
              act_cfg: dict,
              drop_rate: float,
              drop_path_rate: Optional[float] = None) -> nn.Module:
    """The transformer MLP of the CCT, CeiT (LCA) and ViTAE blocks: mmcv's
    ``FFN``, ``Linear(C -> hidden) -> act -> Dropout -> Linear(hidden -> C)
    -> Dropout``, returned with the identity added.

    Args:
        embed_dims (int): Token channels C.
        hidden_dims (int): Hidden width.
        act_cfg (dict): Activation config.
        drop_rate (float): Dropout after the activation and the output.
        drop_path_rate (float, optional): Stochastic depth of the MLP
            branch (before the identity is added); None for none.
            Defaults to None.

    Returns:
        nn.Module: The ``FFN``; ``forward(x, identity=None)``.
    """
    return FFN(
        embed_dims=embed_dims,
        feedforward_channels=hidden_dims,
        act_cfg=act_cfg,
        ffn_drop=drop_rate,
        dropout_layer=None if drop_path_rate is None else dict(
            type='DropPath', drop_prob=drop_path_rate))


def takes_hw_shape(module: nn.Module, cfg_name: str) -> bool:
    """Whether ``module.forward`` takes the token grid ``hw_shape``.

    A block calls it once at build time and then passes ``hw_shape`` only to
    a sub-block whose ``forward`` names it (LeFFN, LeMSA); a token-wise one
    such as mmcv's ``FFN`` (``forward(x, identity=None)``) gets ``x`` alone.

    Args:
        module (nn.Module): The built sub-block.
        cfg_name (str): The config argument it came from, for the error.

    Returns:
        bool: True if ``forward`` has a parameter named ``hw_shape``.

    Raises:
        TypeError: If ``forward`` needs more than the tokens and takes no
            ``hw_shape``: the block could not call it.
    """
    params = inspect.signature(module.forward).parameters.values()
    if any(p.name == 'hw_shape' for p in params):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY,
                  inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [
        p.name for p in params
        if p.kind in positional and p.default is inspect.Parameter.empty
    ]
    if len(required) > 1:
        raise TypeError(
            f'{cfg_name}: {type(module).__name__}.forward requires '
            f'{required}; a sub-block must take forward(x) or '
            'forward(x, hw_shape).')
    return False


def conv_out_size(size: int, kernel: int, stride: int = 1,
                  padding: int = 0) -> int:
    """Output side of a convolution or pooling window (floor mode)."""
    return (size + 2 * padding - kernel) // stride + 1


def check_choice(value, choices, name: str):
    """Return ``value`` if it is one of ``choices``, else a ValueError that
    names the argument and the valid choices."""
    if value not in choices:
        raise ValueError(
            f'Unsupported {name} {value!r}; choose from {list(choices)}.')
    return value


def to_pair(value: Union[int, Sequence[int]], name: str) -> Tuple[int, int]:
    """A size argument as a ``(height, width)`` pair of positive ints.

    An int ``n`` gives ``(n, n)`` (:func:`mmengine.utils.to_2tuple`); a
    sequence must hold two positive ints.

    Args:
        value (int | Sequence[int]): The size: an int for a square or
            ``(height, width)``.
        name (str): The argument's name, for the error messages.

    Returns:
        tuple[int, int]: ``(height, width)``.

    Raises:
        TypeError: If ``value`` is neither an int nor a sequence (a bool or
            a str is neither).
        ValueError: If it is not a positive int or a pair of them.
    """
    is_size = isinstance(value, (int, Sequence))
    if not is_size or isinstance(value, (bool, str)):
        raise TypeError(f'{name} must be an int or a (height, width) pair, '
                        f'got {type(value).__name__}.')
    pair = tuple(to_2tuple(value))
    if len(pair) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0
            for v in pair):
        raise ValueError(f'{name} must be a positive int or a pair of '
                         f'positive ints (height, width), got {value!r}.')
    return pair


def _is_grid_side(side) -> bool:
    """Whether ``side`` is an integer grid size: an int (not a bool), an
    integer ``numbers.Integral`` such as a numpy int, a ``torch.SymInt``
    (``torch.export`` / ``torch.compile`` with dynamic sizes) or a 0-d
    integer tensor (a size as ``torch.jit.trace`` and the TorchScript ONNX
    exporter trace it)."""
    if isinstance(side, torch.Tensor):
        return (side.dim() == 0 and not side.is_floating_point()
                and not side.is_complex() and side.dtype != torch.bool)
    return (isinstance(side, (numbers.Integral, torch.SymInt))
            and not isinstance(side, bool))


def check_grid(hw_shape: Sequence[int],
               name: str = 'hw_shape') -> Tuple[int, int]:
    """Return ``(H, W)`` after checking ``hw_shape`` is two positive ints.

    Every block that takes a token grid (``hw_shape``, an upsampler's
    ``out_size``) checks it here before it reshapes anything: a float
    ``8.0`` equals and hashes as ``8``, so a call with it would leave an
    entry in einops' (or another size-keyed) cache that later fails every
    valid ``(8, 8)`` call in the process. Symbolic and traced sizes
    (:func:`_is_grid_side`) pass unchecked in value: they are a tensor's
    sizes, and comparing them would add a guard or a trace warning. Plain
    ints take one type test each.

    Args:
        hw_shape (Sequence[int]): The grid ``(H, W)``.
        name (str): The argument's name, for the error. Defaults to
            ``'hw_shape'``.

    Returns:
        tuple[int, int]: ``(H, W)``.

    Raises:
        TypeError: If ``hw_shape`` is not a pair of integers.
        ValueError: If a plain integer in it is not positive.
    """
    try:
        H, W = hw_shape
    except (TypeError, ValueError):
        raise TypeError(f'{name} must be a pair (H, W) of positive ints, '
                        f'got {hw_shape!r}.') from None
    if type(H) is int and type(W) is int and H > 0 and W > 0:
        return H, W
    for side in (H, W):
        if not _is_grid_side(side):
            hint = (': use // for an integer division'
                    if isinstance(side, float) else '')
            raise TypeError(
                f'{name} must be a pair (H, W) of positive ints, got '
                f'{hw_shape!r} (a {type(side).__name__}{hint}).')
        if (isinstance(side, (int, numbers.Integral))
                and not isinstance(side, torch.SymInt) and side <= 0):
            raise ValueError(f'{name} must be a pair (H, W) of positive '
                             f'ints, got {hw_shape!r}.')
    return H, W


def check_hw_shape(x: torch.Tensor,
                   hw_shape: Sequence[int]) -> Tuple[int, int]:
    """Return ``(H, W)`` after checking ``hw_shape`` (:func:`check_grid`)
    and that ``H * W`` equals the token count of ``x`` (B, N, C)."""
    H, W = check_grid(hw_shape)
    if H * W != x.shape[1]:
        raise ValueError(f'hw_shape {tuple(hw_shape)} does not match the '
                         f'{x.shape[1]} tokens of x {tuple(x.shape)}.')
    return H, W


def run_checkpointed(module: nn.Module, x: torch.Tensor, *args,
                     with_cp: bool) -> torch.Tensor:
    """``module(x, *args)``, under ``torch.utils.checkpoint`` when
    ``with_cp`` is on and ``x`` needs gradients, unless ``module``
    implements ``with_cp`` itself (has a ``with_cp`` attribute, set by its
    owner): the ``with_cp`` of mmpretrain, and nothing is recomputed twice.
    """
    if with_cp and x.requires_grad and not hasattr(module, 'with_cp'):
        return cp.checkpoint(module, x, *args, use_reentrant=False)
    return module(x, *args)


#: The tensors a norm of each layout normalises: ``'tokens'`` (B, N, C) over
#: the last axis (LayerNorm), ``'maps'`` (B, C, H, W) over the channel axis
#: (BatchNorm, SyncBN, GroupNorm). The other axes differ from C, so a norm
#: of the other layout fails on them.
_NORM_PROBES = {
    'tokens': lambda c: (2, c + 1, c),
    'maps': lambda c: (2, c, 1, c + 1),
}


def check_norm_cfg(norm_cfg: dict, layout: str, name: str, channels: int,
                   slots: str) -> None:
    """Raise if the norm of ``norm_cfg`` cannot normalise ``layout``
    tensors.

    One layer is built for ``channels`` and run (in eval mode, without
    gradients) on a zero tensor of the layout; a norm that raises or
    changes the shape cannot serve.

    Args:
        norm_cfg (dict): The norm config (mmcv's ``build_norm_layer``).
        layout (str): ``'tokens'`` or ``'maps'``.
        name (str): The argument that holds ``norm_cfg``, for the error.
        channels (int): Channels of the probe layer.
        slots (str): What the argument's norms are, for the error.

    Raises:
        ValueError: Naming ``name``, the layout and the norm's failure.
    """
    shape = _NORM_PROBES[check_choice(layout, _NORM_PROBES, 'layout')](
        channels)
    layer = build_norm_layer(norm_cfg, channels)[1]
    try:
        with torch.no_grad():
            out = layer.eval()(torch.zeros(shape))
        problem = None if out.shape == shape else (
            f'it turned a {shape} tensor into {tuple(out.shape)}')
    except (RuntimeError, ValueError) as error:
        problem = f'on a {shape} tensor it raised "{error}"'
    if problem is not None:
        what = ('(B, N, C) tokens over their last axis' if layout == 'tokens'
                else '(B, C, H, W) maps over their channel axis')
        raise ValueError(
            f"{name}: type={norm_cfg.get('type')!r} cannot serve as {slots},"
            f' which normalise {what}: {problem}.')


def channels_last_weights(module: nn.Module) -> None:
    """Give the 1x1 and depthwise convolutions of ``module`` the strides of
    the channels_last maps they run on.

    A weight of shape ``(C_out, C_in, 1, 1)`` or ``(C, 1, k, k)`` is laid out
    in memory the same way in both formats, but its strides on the size-1
    dimensions differ, and its gradient takes those of the input's format.
    DDP's reducer compares a gradient's strides with its parameter's and
    warns ("Grad strides do not match bucket view strides") when they
    differ. Values, memory order and the kernels chosen do not change.
    """
    for conv in module.modules():
        if not isinstance(conv, nn.Conv2d):
            continue
        weight = conv.weight
        target = torch.empty(weight.shape, dtype=weight.dtype,
                             device=weight.device,
                             memory_format=torch.channels_last)
        if (weight.is_contiguous(memory_format=torch.channels_last)
                and weight.stride() != target.stride()):
            target.copy_(weight.data)
            weight.data = target
