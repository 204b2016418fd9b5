"""Resizes and the query-axis upsamplers of LeMSA (LeCT report §3.3,
Appendix "LeCTv3").

A query upsampler brings LeMSA's ``(B, C, h', w')`` attention output back
to the ``(B, C, H, W)`` token grid; all are registered, built with
``channels=C`` and called as ``forward(x, out_size)``. Their keys in the
reference checkpoint (``blocksI.J.leatt.v_upsample.*``):

=========================  ===========================  ===================
upsampler                  library key                  reference key
=========================  ===========================  ===================
ResizeDWConvUpsampler      ``conv.weight``              ``v_upsample.1.weight``
                           ``norm.*``                   ``v_upsample.2.*``
SVConvTransposeUpsampler   ``reduce.weight``            ``v_upsample.0.weight``
                           ``deconv.{weight,bias}``     ``v_upsample.2.*``
                           ``expand.weight``            ``v_upsample.4.weight``
=========================  ===========================  ===================

LeCT v2's inline ``leatt.v_conv`` / ``leatt.v_bn`` map to ``conv`` / ``norm``
of a :class:`ResizeDWConvUpsampler`.
"""
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from torch.fx.experimental.symbolic_shapes import statically_known_true

from mmpretrain.registry import MODELS

from .deploy import FuseConvBNMixin
from .functional import (is_compiling, is_exporting, map_to_tokens,
                         static_sizes, tokens_to_map)
from .utils import check_grid, to_pair

RESIZE_MODES = ('nearest', 'bilinear', 'bicubic')

#: Modes that :func:`resize` runs as a matmul on small grids (torch's CPU
#: bicubic kernels are slow; docs/lemsa.md).
MATMUL_RESIZE_MODES = ('bicubic', )
#: Largest source grid ``h * w`` resized by a matmul (the matrix has
#: ``h * w * H * W`` entries; LeMSA's pooled grids have 16 to 49 cells).
MATMUL_RESIZE_MAX_CELLS = 64

_MATRICES: 'OrderedDict[tuple, torch.Tensor]' = OrderedDict()
_MAX_CACHED_MATRICES = 32


def check_resize_mode(mode: str, arg_name: str = 'mode') -> str:
    """Return ``mode`` if it is one of :data:`RESIZE_MODES`, else a
    ValueError naming ``arg_name`` and the choices."""
    if mode not in RESIZE_MODES:
        raise ValueError(f'Unsupported {arg_name} {mode!r}; choose from '
                         f'{list(RESIZE_MODES)}.')
    return mode


def _interpolate(x: torch.Tensor, size: Tuple[int, int],
                 mode: str) -> torch.Tensor:
    align_corners = None if mode == 'nearest' else False
    return F.interpolate(
        x, size=tuple(size), mode=mode, align_corners=align_corners)


def _resize_by_matrix(in_size: Tuple[int, int], out_size: Tuple[int, int],
                      mode: str) -> bool:
    """Whether a resize runs as a matmul with :func:`interpolation_matrix`.

    Small grids do in :data:`MATMUL_RESIZE_MODES`; under export, in every
    mode when both sizes are fixed (the matrix is then a constant of the
    graph, cheaper in ONNX Runtime than its Resize), but not when they are
    symbolic; under ``torch.jit`` tracing never, where FLOP counters must
    see the resize op the architecture specifies."""
    cells = in_size[0] * in_size[1]
    if torch.jit.is_tracing():
        return False
    if is_exporting():
        return (static_sizes(*in_size, *out_size)
                and cells <= MATMUL_RESIZE_MAX_CELLS)
    return mode in MATMUL_RESIZE_MODES and cells <= MATMUL_RESIZE_MAX_CELLS


def interpolation_matrix(in_size: Tuple[int, int],
                         out_size: Tuple[int, int],
                         mode: str,
                         device: Optional[torch.device] = None,
                         dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The ``(h*w, H*W)`` matrix ``M`` of a resize: ``out = x @ M``.

    Built by resizing the identity basis with ``F.interpolate``, so it holds
    exactly ``F.interpolate``'s weights (bicubic's border clamping
    included). The last 32 are cached per sizes, mode, device and dtype.

    Args:
        in_size (tuple[int, int]): Source grid ``(h, w)``.
        out_size (tuple[int, int]): Output size ``(H, W)``.
        mode (str): Interpolation mode.
        device (torch.device, optional): Device of the matrix.
        dtype (torch.dtype, optional): Dtype of the matrix (default
            float32); the weights are computed in float64 first.

    Returns:
        torch.Tensor: The matrix, without autograd history.
    """
    in_size, out_size = tuple(in_size), tuple(out_size)
    dtype = dtype or torch.float32
    key = (in_size, out_size, mode, torch.device(device or 'cpu'), dtype)
    compiling = is_compiling()
    if not compiling and key in _MATRICES:
        _MATRICES.move_to_end(key)
        return _MATRICES[key]
    cells = in_size[0] * in_size[1]
    # Outside inference mode: a cached inference tensor could not be saved
    # for backward by a later training forward. In float64, but in an
    # exported graph (where it is a constant subgraph, folded by the
    # exporter's or the runtime's optimiser), in ``dtype``: ONNX Runtime
    # has no float64 Resize.
    with torch.inference_mode(False), torch.no_grad():
        eye = torch.eye(cells, device=device, dtype=dtype if is_exporting()
                        else torch.float64)
        matrix = _interpolate(eye.view(cells, 1, *in_size), out_size, mode)
        matrix = matrix.reshape(cells, -1).to(dtype)
    if not compiling:
        _MATRICES[key] = matrix
        if len(_MATRICES) > _MAX_CACHED_MATRICES:
            _MATRICES.popitem(last=False)
    return matrix


def resize(x: torch.Tensor, size: Tuple[int, int], mode: str) -> torch.Tensor:
    """Resize a ``(B, C, h, w)`` map to exactly ``size``.

    ``align_corners=False`` as the reference's ``nn.Upsample(scale_factor=K)``,
    which it equals for integer multiples. Modes in
    :data:`MATMUL_RESIZE_MODES` on grids of at most
    :data:`MATMUL_RESIZE_MAX_CELLS` cells run as one matmul with
    :func:`interpolation_matrix` (same weights) and return a
    ``channels_last`` map; the rest runs ``F.interpolate``.

    Args:
        x (torch.Tensor): Input map ``(B, C, h, w)``.
        size (tuple[int, int]): Output size ``(H, W)``.
        mode (str): One of ``'nearest'``, ``'bilinear'``, ``'bicubic'``.

    Returns:
        torch.Tensor: The resized map ``(B, C, H, W)``.
    """
    size = tuple(size)
    h, w = x.shape[-2:]
    if static_sizes(h, w, *size) and (h, w) == size:
        return x  # F.interpolate's result: the same values
    if _resize_by_matrix((h, w), size, mode):
        matrix = interpolation_matrix((h, w), size, mode, x.device, x.dtype)
        tokens = map_to_tokens(x)
        if is_exporting():  # one MatMul, broadcast over any batch
            out = torch.matmul(matrix.t(), tokens)
        else:
            # One bmm with the matrix broadcast over the batch (fewer ops
            # than a broadcasting matmul).
            out = torch.bmm(matrix.t().expand(x.shape[0], -1, -1),
                            tokens)  # (B, H*W, C)
        return tokens_to_map(out, size)
    return _interpolate(x, size, mode)


def resize_grid_axis(x: torch.Tensor, in_size: Tuple[int, int],
                     out_size: Tuple[int, int], mode: str) -> torch.Tensor:
    """Resize the last axis of ``x``, a flattened ``h x w`` grid.

    ``x`` has shape ``(..., h*w)`` and the result ``(..., H*W)``: each row
    is resized as an ``h x w`` map with :func:`resize`'s weights (LeMSA's
    literal path resizes its logit map along the key axis this way). On
    grids of at most :data:`MATMUL_RESIZE_MAX_CELLS` cells, in every mode,
    it is one matmul with :func:`interpolation_matrix`, so forward and
    backward are plain GEMMs on contiguous rows.

    Args:
        x (torch.Tensor): Rows over the flattened grid ``(..., h*w)``.
        in_size (tuple[int, int]): The grid ``(h, w)``.
        out_size (tuple[int, int]): The output grid ``(H, W)``.
        mode (str): One of ``'nearest'``, ``'bilinear'``, ``'bicubic'``.

    Returns:
        torch.Tensor: ``(..., H*W)``.
    """
    in_size, out_size = tuple(in_size), tuple(out_size)
    h, w = in_size
    if x.shape[-1] != h * w:
        raise ValueError(f'the last axis of x {tuple(x.shape)} must hold '
                         f'the {h}x{w} grid ({h * w} cells).')
    if in_size == out_size and not is_exporting():
        return x
    if _resize_by_matrix(in_size, out_size, mode):
        return x @ interpolation_matrix(in_size, out_size, mode, x.device,
                                        x.dtype)
    lead = x.shape[:-1]
    channels = x.shape[-2] if x.dim() > 1 else 1  # the rows as channels
    out = _interpolate(x.reshape(-1, channels, h, w), out_size, mode)
    return out.reshape(*lead, out_size[0] * out_size[1])


def _known_true(condition) -> bool:
    """A size condition's value where it is known without a guard: under
    ``torch.export`` only if it follows from the symbolic sizes, under the
    TorchScript exporter (sizes traced as tensors) at the example size."""
    if isinstance(condition, torch.SymBool):
        return statically_known_true(condition)
    return bool(condition)


@MODELS.register_module()
class ResizeUpsampler(BaseModule):
    """Plain resize of the attention output (report §3.3).

    Args:
        channels (int): Number of channels (kept for a uniform interface; the
            resize has no parameters).
        mode (str): Interpolation mode, one of ``'nearest'``, ``'bilinear'``,
            ``'bicubic'``. Defaults to 'bilinear'.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self, channels: int, mode: str = 'bilinear', init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.channels = channels
        self.mode = check_resize_mode(mode)

    def forward(self, x: torch.Tensor,
                out_size: Tuple[int, int]) -> torch.Tensor:
        """Resize ``x`` (B, C, h', w') to ``out_size`` (H, W)."""
        return resize(x, check_grid(out_size, 'out_size'), self.mode)

    def extra_repr(self) -> str:
        return f'channels={self.channels}, mode={self.mode!r}'


@MODELS.register_module()
class ResizeDWConvUpsampler(FuseConvBNMixin, BaseModule):
    """Resize → depthwise ``k x k`` conv (no bias) → norm: the LeCT v1/v2
    query upsampler (report §3.3).

    ``switch_to_deploy()`` folds ``norm`` into ``conv``
    (:class:`~lect_mm.blocks.deploy.FuseConvBNMixin`).

    Args:
        channels (int): Number of channels ``C``.
        mode (str): Interpolation mode, one of ``'nearest'``, ``'bilinear'``,
            ``'bicubic'``. Defaults to 'bilinear'.
        kernel_size (int): Depthwise kernel size (odd). Defaults to 3.
        norm_cfg (dict): Norm layer config. Defaults to ``dict(type='BN')``.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    conv_bn_pairs = (('conv', 'norm'), )

    def __init__(self,
                 channels: int,
                 mode: str = 'bilinear',
                 kernel_size: int = 3,
                 norm_cfg: dict = dict(type='BN'),
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.mode = check_resize_mode(mode)
        self.conv = nn.Conv2d(
            channels,
            channels,
            kernel_size,
            padding=kernel_size // 2,
            groups=channels,
            bias=False)
        self.norm = build_norm_layer(norm_cfg, channels)[1]

    def forward(self, x: torch.Tensor,
                out_size: Tuple[int, int]) -> torch.Tensor:
        """Upsample ``x`` (B, C, h', w') to (B, C, *out_size)."""
        out_size = check_grid(out_size, 'out_size')
        return self.norm(self.conv(resize(x, out_size, self.mode)))


@MODELS.register_module()
class SVConvTransposeUpsampler(BaseModule):
    """Spatially-varying transposed-conv upsampler of LeCT v3.

    Report Appendix "LeCTv3". Every pooled position owns a private
    ``K x K`` kernel per reduced channel::

        Conv1x1(C -> c', no bias), c' = int(C * cr_ratio)
        -> reshape (B, c'*h'*w', 1, 1), channel order (c', h', w')
        -> ConvTranspose2d(c'h'w', c'h'w', K, stride=K, groups=c'h'w', bias)
        -> each K x K patch to its own position: (B, c', h'K, w'K)
        -> Conv1x1(c' -> C, no bias)

    The kernels are trained on the grid ``in_size``. On any other grid
    ``(h'', w'')`` they are resampled as a field over the image, like a
    ViT's position embeddings: the ``(c', h', w', K, K)`` kernel bank and
    the ``(c', h', w')`` biases are resized over the grid axes with
    ``mode`` (``align_corners=False``: both grids tile the same image), so
    each new cell gets the kernel of its relative position; ``K`` is kept,
    since the pooling stride is. The assembled ``(h''K, w''K)`` map is
    then cropped to ``out_size`` when it is within one cell of it (the grid
    of ceil-mode pooling with stride ``K``: each patch stays on the pixels
    its cell pooled) and resized to ``out_size`` otherwise (adaptive
    pooling). On ``in_size`` at ``(h'K, w'K)`` nothing is resampled.

    Args:
        channels (int): Number of channels ``C``.
        in_size (int | tuple[int, int]): The pooled grid ``(h', w')`` the
            kernels are trained on.
        scale_factor (int): Upsampling factor ``K`` (the ``sr_ratio``).
        cr_ratio (float): Channel-reduction ratio. Defaults to 0.1.
        mode (str): Interpolation mode of the kernel resampling and of the
            output resize. Defaults to 'bilinear'.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 channels: int,
                 in_size: Union[int, Sequence[int]],
                 scale_factor: int,
                 cr_ratio: float = 0.1,
                 mode: str = 'bilinear',
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.in_size = to_pair(in_size, 'in_size')
        if not isinstance(scale_factor, int) or scale_factor < 1:
            raise ValueError('scale_factor must be a positive int, got '
                             f'{scale_factor!r}.')
        self.scale_factor = scale_factor
        self.mode = check_resize_mode(mode)
        self.reduced_channels = int(channels * cr_ratio)
        if self.reduced_channels < 1:
            raise ValueError(
                f'int(channels * cr_ratio) = int({channels} * {cr_ratio}) '
                'must be at least 1.')
        h, w = self.in_size
        groups = self.reduced_channels * h * w
        self.reduce = nn.Conv2d(
            channels, self.reduced_channels, 1, bias=False)
        # the report's layer, holding its parameters (and checkpoint keys);
        # forward computes its output without calling it
        self.deconv = nn.ConvTranspose2d(
            groups,
            groups,
            scale_factor,
            stride=scale_factor,
            groups=groups,
            bias=True)
        self.expand = nn.Conv2d(
            self.reduced_channels, channels, 1, bias=False)

    def kernels(self, grid: Tuple[int, int]
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The ConvTranspose weight ``(c'h''w'', 1, K, K)`` and bias
        ``(c'h''w'',)`` for the pooled grid ``(h'', w'')``."""
        if tuple(grid) == self.in_size:
            return self.deconv.weight, self.deconv.bias
        return self._resampled(grid)

    def _resampled(self, grid: Tuple[int, int]
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
        """:meth:`kernels` resized from ``in_size`` to ``grid`` (on
        ``in_size`` an identity): each ``(c', u, v)`` slice of the bank and
        each ``c'`` of the bias as a field over the grid."""
        c, k = self.reduced_channels, self.scale_factor
        h, w = self.in_size
        # (c h w) 1 u v -> 1 (c u v) h w, and back at the new grid
        weight = self.deconv.weight.reshape(c, h, w, k, k).permute(
            0, 3, 4, 1, 2).reshape(1, c * k * k, h, w)
        weight = resize(weight, grid, self.mode)
        gh, gw = weight.shape[-2:]
        weight = weight.reshape(c, k, k, gh, gw).permute(
            0, 3, 4, 1, 2).reshape(c * gh * gw, 1, k, k)
        bias = resize(self.deconv.bias.reshape(1, c, h, w), grid, self.mode)
        return weight, bias.flatten()

    def _assemble(self, y: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor) -> torch.Tensor:
        """The reduced map ``y`` (B, c', h'', w'') through the transposed
        convolution with ``weight``, ``bias`` (:meth:`kernels`):
        (B, c', h''K, w''K), a ``channels_last`` view.

        With kernel = stride = ``K`` on (B, c'h''w'', 1, 1) inputs, one
        group per (c', cell), each output is one product plus the bias: one
        broadcast multiply-add, not the grouped ConvTranspose2d, which
        cuDNN runs one kernel per group in fp32 (931 launches per call at
        LeCT v3's stage 3). Torch ops, not einops (see tokens_to_map).
        """
        b, c, h, w = y.shape
        k = self.scale_factor
        y = torch.addcmul(bias.reshape(1, c, h, w, 1, 1), y[..., None, None],
                          weight.reshape(1, c, h, w, k, k))
        # Tokens first, b c h w u v -> b (h u) (w v) c, then a
        # channels_last view of them: the 1x1 expand conv keeps that layout,
        # the one LeMSA's skip and proj use.
        y = y.permute(0, 2, 4, 3, 5, 1).reshape(b, h * k, w * k, c)
        return y.permute(0, 3, 1, 2)

    def forward(self, x: torch.Tensor,
                out_size: Tuple[int, int]) -> torch.Tensor:
        """Upsample ``x`` (B, C, h'', w'') to (B, C, *out_size)."""
        out_size = check_grid(out_size, 'out_size')
        if is_exporting() and not static_sizes(*x.shape[-2:], *out_size):
            return self._forward_traceable(x, out_size)
        grid = tuple(x.shape[-2:])
        y = self._assemble(self.reduce(x), *self.kernels(grid))
        return self.expand(self._fit(y, grid, out_size))

    def _fit(self, y: torch.Tensor, grid: Tuple[int, int],
             out_size: Tuple[int, int]) -> torch.Tensor:
        """Crop or resize the assembled ``(h''K, w''K)`` map to
        ``out_size`` (see the class docstring)."""
        out_size = tuple(out_size)
        full = (grid[0] * self.scale_factor, grid[1] * self.scale_factor)
        if full == out_size:
            return y
        if all(o <= f < o + self.scale_factor
               for o, f in zip(out_size, full)):
            return y[..., :out_size[0], :out_size[1]]
        return resize(y, out_size, self.mode)

    def _forward_traceable(self, x: torch.Tensor,
                           out_size: Tuple[int, int]) -> torch.Tensor:
        """:meth:`forward` as an exporter traces it for any input size.

        The kernels are resampled to the grid always (on ``in_size`` an
        exact identity), so that nothing guards on the grid's size. On the
        ceil-mode grid of ``out_size`` (LeMSA's ``sr_ratio`` pooling) the map
        is cropped without a size condition; on another grid (``pool_size``)
        the crop-or-resize choice of :meth:`forward` is made at the traced
        size.
        """
        k = self.scale_factor
        grid = tuple(x.shape[-2:])
        y = self._assemble(self.reduce(x), *self._resampled(grid))
        if all(_known_true(g == (o - 1) // k + 1)
               for g, o in zip(grid, out_size)):
            # index_select, not a slice: slicing would guard on the
            # slice's end being inside the map.
            rows, cols = (torch.arange(o, device=y.device) for o in out_size)
            return self.expand(y.index_select(-2, rows).index_select(-1, cols))
        return self.expand(self._fit(y, grid, out_size))

    def extra_repr(self) -> str:
        return (f'in_size={self.in_size}, scale_factor={self.scale_factor}, '
                f'reduced_channels={self.reduced_channels}, '
                f'mode={self.mode!r}')
