"""Pooled-key attention, the core of LeMSA (LeCT report §3.3).

The key-axis resize of the logits is linear, ``Up(q kᵀ) = q Up(k)ᵀ``, so
``impl='fused'`` resizes the pooled keys and runs SDPA without building the
``Nq x N`` map; ``impl='literal'`` is the report's path (pooled logits →
key-axis resize → softmax); ``impl='auto'`` picks one (:func:`resolve_impl`).
"""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from mmpretrain.registry import MODELS
from .deploy import FuseConvBNMixin
from .dropout import FastDropout
from .functional import (IMPLS, batch_size, is_exporting, map_to_tokens,
                         softmax_attention, static_sizes, tokens_to_map)
from .recompute import recompute, recompute_active
from .upsample import (MATMUL_RESIZE_MAX_CELLS, ResizeDWConvUpsampler,
                       ResizeUpsampler, SVConvTransposeUpsampler,
                       check_resize_mode, interpolation_matrix, resize,
                       resize_grid_axis)
from .utils import check_choice, check_grid

#: The attention paths of pooled-key attention: :data:`IMPLS` and ``'auto'``.
LEMSA_IMPLS = ('auto', ) + IMPLS


def resolve_impl(impl: str, q: torch.Tensor, k_map: torch.Tensor) -> str:
    """The path ``impl`` takes for these inputs.

    ``'fused'`` and ``'literal'`` are returned unchanged. ``'auto'`` gives
    ``'literal'`` on the CPU

    * in bf16/fp16 for pooled grids of at most
      :data:`~lect_mm.blocks.upsample.MATMUL_RESIZE_MAX_CELLS` cells, where
      torch's CPU SDPA kernels are slow and the literal resize is one
      matmul;
    * in fp32 when autograd records the call and the logit map is under
      half the size of the upsampled keys (``2 * h' * w' < d_qk``);

    and ``'fused'`` otherwise and on other devices. Under ``torch.jit``
    tracing the grad mode is ignored, so that a trace and its check (run
    under ``no_grad``) take the same path. Under export
    (:func:`~lect_mm.blocks.functional.is_exporting`) ``'auto'`` is
    ``'literal'`` on a fixed grid of at most
    :data:`~lect_mm.blocks.upsample.MATMUL_RESIZE_MAX_CELLS` cells (the
    key-axis resize is then one matmul with a constant matrix, docs/export.md)
    and ``'fused'`` on a symbolic one, so that no size condition enters the
    exported graph. docs/lemsa.md gives the measurements behind the rule.

    Args:
        impl (str): ``'auto'``, ``'fused'`` or ``'literal'``.
        q (torch.Tensor): Pooled queries ``(B, m, Nq, d_qk)``.
        k_map (torch.Tensor): Pooled keys ``(B, m * d_qk, h', w')``.

    Returns:
        str: ``'fused'`` or ``'literal'``.
    """
    recording = q.requires_grad or k_map.requires_grad
    return resolve_impl_for(impl, q.device, q.dtype, recording, q.shape[-1],
                            k_map.shape[-2] * k_map.shape[-1])


def resolve_impl_for(impl: str, device: torch.device, dtype: torch.dtype,
                     requires_grad: bool, d_qk: int, cells: int) -> str:
    """:func:`resolve_impl` from the queries' device, dtype and width
    ``d_qk``, the pooled grid's ``cells`` and whether the inputs require
    gradients (before the pooled maps exist, to pick their layout)."""
    if impl != 'auto':
        return impl
    if is_exporting():
        return ('literal' if static_sizes(cells)
                and cells <= MATMUL_RESIZE_MAX_CELLS else 'fused')
    if device.type != 'cpu':
        return 'fused'
    if dtype in (torch.bfloat16, torch.float16):
        return 'literal' if cells <= MATMUL_RESIZE_MAX_CELLS else 'fused'
    recording = (not torch.jit.is_tracing() and torch.is_grad_enabled()
                 and requires_grad)
    return 'literal' if recording and 2 * cells < d_qk else 'fused'


def pool_map(x: torch.Tensor, sr_ratio: Optional[int],
             pool_size: Optional[Tuple[int, int]], op: str) -> torch.Tensor:
    """Average (``op='avg'``) or max pool a map to the query/key grid.

    ``sr_ratio`` K: kernel = stride = K in ceil mode, so the grid is
    ``(ceil(H/K), ceil(W/K))`` and a partial border window averages only its
    valid pixels. ``pool_size``: adaptive pooling to that grid.
    """
    if (sr_ratio is not None and is_exporting()
            and not static_sizes(*x.shape[-2:])):
        return _pool_ceil_traceable(x, sr_ratio, op)
    if pool_size is not None:
        fn = F.adaptive_avg_pool2d if op == 'avg' else F.adaptive_max_pool2d
        return fn(x, pool_size)
    fn = F.avg_pool2d if op == 'avg' else F.max_pool2d
    return fn(x, sr_ratio, sr_ratio, ceil_mode=True)


def _pool_ceil_traceable(x: torch.Tensor, k: int, op: str) -> torch.Tensor:
    """:func:`pool_map`'s ceil-mode pooling with kernel = stride ``k``,
    written without ceil mode: under ``torch.export`` ceil mode's check
    that the last window starts inside the map is a guard on the size that
    cannot be proven. Padding ``k - 1`` zeros (``-inf`` for max) at the
    bottom and right gives the same ``ceil(H/k)`` floor-mode windows; each
    average is then divided by its share of valid pixels, as ceil mode
    averages over them only."""
    pad = (0, k - 1, 0, k - 1)
    if op == 'max':
        return F.max_pool2d(F.pad(x, pad, value=float('-inf')), k, k)
    valid = F.avg_pool2d(F.pad(torch.ones_like(x[:1, :1]), pad), k, k)
    return F.avg_pool2d(F.pad(x, pad), k, k) / valid


def pooling_matrix(hw_shape: Tuple[int, int], sr_ratio: Optional[int],
                   pool_size: Optional[Tuple[int, int]],
                   device: Optional[torch.device] = None,
                   dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The ``(h'*w', H*W)`` matrix ``P`` of :func:`pool_map`'s average
    pooling of an ``hw_shape`` map: ``pooled tokens = P @ tokens``.

    Average pooling over rectangular windows is separable, so ``P`` is the
    outer product of the 1-D poolings of the rows and the columns (each the
    pooling of an identity basis, so it holds exactly the pooling's weights,
    ceil mode's partial windows included).
    """
    def axis(size: int, cells: Optional[int]) -> torch.Tensor:
        eye = torch.eye(size, device=device, dtype=dtype).unsqueeze(1)
        if cells is None:
            pooled = F.avg_pool1d(eye, sr_ratio, sr_ratio, ceil_mode=True)
        else:
            pooled = F.adaptive_avg_pool1d(eye, cells)
        return pooled.squeeze(1).t()  # (cells, size)

    H, W = hw_shape
    h, w = (None, None) if pool_size is None else pool_size
    rows, cols = axis(H, h), axis(W, w)
    return (rows[:, None, :, None] * cols[None, :, None, :]).reshape(
        rows.shape[0] * cols.shape[0], H * W)


def map_to_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split a head-major ``(B, m*d, h, w)`` map into heads ``(B, m, h*w, d)``
    (channel ``c`` is head ``c // d``): two views for the channels_last and
    the contiguous maps of the layer."""
    _, C, h, w = x.shape
    return x.reshape(batch_size(x), num_heads, C // num_heads,
                     h * w).transpose(-2, -1)


def heads_to_map(x: torch.Tensor, h: int) -> torch.Tensor:
    """Re-assemble heads ``(B, m, h*w, d)`` into a ``(B, m*d, h, w)`` map.

    Channel ``c`` is head ``c // d``. The map is a ``channels_last`` view of
    ``(B, h*w, m*d)`` tokens, the layout of every other map in the layer, so
    the query upsampler, its norm and the skip addition need no layout
    conversion. Heads laid out as such tokens (SDPA's output) take two
    views, others one copy.
    """
    _, m, n, d = x.shape
    B = batch_size(x)
    if x.stride()[1:] == (d, m * d, 1):  # (B, n, m, d) tokens
        return x.transpose(-2, -1).reshape(B, m * d, h, n // h)
    tokens = x.transpose(1, 2).reshape(B, h, n // h, m * d)
    return tokens.permute(0, 3, 1, 2)


def pooled_key_attention(q: torch.Tensor,
                         k_map: torch.Tensor,
                         v: torch.Tensor,
                         hw_shape: Tuple[int, int],
                         mode: str,
                         scale: float,
                         dropout: nn.Dropout,
                         impl: str,
                         need_map: bool = False):
    """Attention of pooled queries over key-axis-upsampled logits.

    Args:
        q (torch.Tensor): Pooled queries ``(B, m, Nq, dq)``.
        k_map (torch.Tensor): Pooled keys as a head-major map
            ``(B, m * dq, h', w')`` (channel ``c`` is head ``c // dq``).
        v (torch.Tensor): Full-resolution values ``(B, m, N, dv)``.
        hw_shape (tuple[int, int]): ``(H, W)`` with ``N = H * W``.
        mode (str): Key-axis interpolation mode.
        scale (float): Logit scale (``C ** -0.5`` in LeCT).
        dropout (nn.Dropout): Attention dropout.
        impl (str): ``'fused'`` or ``'literal'`` (``'auto'`` is resolved
            here, :func:`resolve_impl`).
        need_map (bool): Also return the softmaxed ``(B, m, Nq, N)`` map
            (before dropout, detached). Defaults to False.

    Returns:
        tuple: ``out (B, m, Nq, dv)`` and the map or None.
    """
    num_heads = q.shape[1]
    if impl == 'auto':
        impl = resolve_impl(impl, q, k_map)
    if impl == 'literal':
        Nq, dq = q.shape[-2:]
        h, w = k_map.shape[-2:]
        if torch.jit.is_tracing():
            # FLOP counters see the architecture's two head matmuls.
            k = map_to_heads(k_map, num_heads)
            logits = resize_grid_axis((q * scale) @ k.transpose(-2, -1),
                                      (h, w), hw_shape, mode)
            attn = logits.softmax(dim=-1)
            return dropout(attn) @ v, attn.detach() if need_map else None
        # Heads folded into the batch of 3-D matmuls: the pooled maps are
        # contiguous on this path, so q and k fold without copies.
        # Scaling q before the (linear) resize costs Nq x d, not Nq x N.
        Bm = batch_size(q, num_heads)
        logits = torch.bmm((q * scale).reshape(Bm, Nq, dq),
                           k_map.reshape(Bm, dq, h * w))
        logits = resize_grid_axis(logits, (h, w), hw_shape, mode)
        attn = logits.softmax(dim=-1)
        # Sizes spelled out (no -1): an empty batch has no size to infer.
        N, dv = v.shape[-2:]
        out = torch.bmm(dropout(attn), v.reshape(Bm, N, dv))
        B = batch_size(q)
        attn_map = None
        if need_map:
            attn_map = attn.detach().view(B, num_heads, Nq, N)
        return out.view(B, num_heads, Nq, dv), attn_map
    k_up = map_to_heads(resize(k_map, hw_shape, mode), num_heads)
    return softmax_attention(q, k_up, v, scale,
                             dropout.p if dropout.training else 0., 'fused',
                             need_map=need_map)


def _check_pooling(sr_ratio, pool_size):
    """Exactly one of ``sr_ratio`` / ``pool_size``; normalise both."""
    if (sr_ratio is None) == (pool_size is None):
        raise ValueError(
            'Give exactly one of sr_ratio (pooling kernel = stride K) and '
            'pool_size (fixed pooled grid (h\', w\')); got '
            f'sr_ratio={sr_ratio!r}, pool_size={pool_size!r}.')
    if sr_ratio is not None:
        if not isinstance(sr_ratio, int) or sr_ratio < 1:
            raise ValueError(
                f'sr_ratio must be a positive int, got {sr_ratio!r}.')
        return sr_ratio, None
    if isinstance(pool_size, int):
        pool_size = (pool_size, pool_size)
    pool_size = tuple(pool_size)
    if len(pool_size) != 2 or not all(
            isinstance(p, int) and p > 0 for p in pool_size):
        raise ValueError('pool_size must be a positive int or a pair of '
                         f'them, got {pool_size!r}.')
    return None, pool_size


class PooledKeyAttention(FuseConvBNMixin, BaseModule):
    """Base of the attention blocks with pooled queries and keys.

    Queries and keys are pooled to an ``h' x w'`` grid, each query's
    logits are resized along the key axis to ``H x W`` before the softmax
    over all ``N`` values, and a query upsampler brings the ``h' x w'``
    output back to ``H x W``. The base owns the pooling, the key-axis
    resize, the ``impl`` switch, both dropouts, the query upsampler, the
    output projection and the attention-map switch. A subclass builds its
    value/query/key layers, then calls :meth:`_build_output` (last, so that
    parameters keep the reference checkpoint's order, by which saved
    optimizer states index them), and in ``forward`` combines
    :meth:`pool`, :meth:`attend` and ``proj_drop(proj(...))``.

    With ``return_attn_map = True`` each forward stores the softmaxed
    ``(B, m, Nq, N)`` map (before dropout, detached) in ``attn_map``, for
    visualisation; off by default, and then no map is computed.

    ``switch_to_deploy()`` folds the subclass's ``conv_bn_pairs`` and the
    query upsampler's for inference
    (:class:`~lect_mm.blocks.deploy.FuseConvBNMixin`).

    Args:
        embed_dims (int): Number of channels ``C``; the logit scale is
            ``C ** -0.5`` (the full ``C``, as the reference).
        num_heads (int): Number of heads ``m``.
        sr_ratio (int, optional): Spatial-reduction ratio ``K`` (pooling
            kernel and stride, ceil mode). Exactly one of ``sr_ratio`` and
            ``pool_size`` must be given.
        pool_size (int | tuple[int, int], optional): Fixed pooled grid
            ``(h', w')`` (adaptive pooling).
        key_upsample (str): Key-axis resize mode, one of ``'nearest'``,
            ``'bilinear'``, ``'bicubic'``.
        attn_drop (float): Attention-weight dropout.
        proj_drop (float): Output dropout.
        impl (str): ``'fused'`` (SDPA on resized keys), ``'literal'``
            (logit map resized along the key axis) or ``'auto'``
            (:func:`resolve_impl`). All three compute the same function.
        with_cp (bool): Gradient checkpointing of the cheap layers: in
            training, :meth:`attend` keeps only its pooled queries and keys
            and the values for backward and recomputes the resized keys, the
            attention and the query upsampler there (same values and
            gradients); a subclass recomputes its own cheap layers likewise.
            False keeps every intermediate (more memory, fewer ops).
            Defaults to False.
        input_size (tuple[int, int], optional): The ``(H, W)`` token grid
            the attention is built for (a backbone's stage at its
            ``img_size``). Only a query upsampler built for one pooled grid
            (:class:`~lect_mm.blocks.SVConvTransposeUpsampler`) needs it.
            Defaults to None.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: Optional[int],
                 pool_size: Optional[Union[int, Sequence[int]]],
                 key_upsample: str,
                 attn_drop: float,
                 proj_drop: float,
                 impl: str,
                 with_cp: bool = False,
                 input_size: Optional[Sequence[int]] = None,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.sr_ratio, self.pool_size = _check_pooling(sr_ratio, pool_size)
        self.key_upsample = check_resize_mode(key_upsample, 'key_upsample')
        self.impl = check_choice(impl, LEMSA_IMPLS, 'impl')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.scale = embed_dims**-0.5
        self.attn_drop = FastDropout(attn_drop)
        self.proj_drop = FastDropout(proj_drop)
        self.return_attn_map = False
        self.attn_map = None
        self.onnx_attention = False
        self.with_cp = with_cp
        self.input_size = None if input_size is None else tuple(input_size)

    def _build_output(self,
                      query_upsampler: dict,
                      channels: int,
                      norm_cfg: Optional[dict] = None):
        """Build the query upsampler (on the attention's ``channels``) and
        the ``C -> C`` output projection.

        The attention owns its upsampler's geometry: a
        :class:`~lect_mm.blocks.SVConvTransposeUpsampler` gets
        ``scale_factor=sr_ratio`` and, as ``in_size``, the pooled grid of
        ``input_size`` (or ``pool_size``) unless its config sets them. A
        :class:`~lect_mm.blocks.ResizeDWConvUpsampler` gets ``norm_cfg``
        (the attention's) unless its config sets one.
        """
        cfg = dict(query_upsampler)
        layer_type = cfg.get('type')
        cls = layer_type if isinstance(layer_type, type) else MODELS.get(
            layer_type)
        if cls is not None and issubclass(cls, SVConvTransposeUpsampler):
            if self.sr_ratio is not None:
                cfg.setdefault('scale_factor', self.sr_ratio)
            if self.pool_size is not None or self.input_size is not None:
                cfg.setdefault('in_size', self.pooled_grid(self.input_size))
            if 'in_size' not in cfg:
                raise ValueError(
                    f'query_upsampler: {cls.__name__} has a kernel per '
                    'pooled cell, so it is built for one pooled grid: give '
                    'the attention input_size (the (H, W) token grid it is '
                    'built for) or pool_size, or the upsampler in_size.')
        if (norm_cfg is not None and cls is not None
                and issubclass(cls, ResizeDWConvUpsampler)):
            cfg.setdefault('norm_cfg', norm_cfg)
        self.query_upsampler = MODELS.build(
            cfg, default_args=dict(channels=channels))
        self.proj = nn.Linear(self.embed_dims, self.embed_dims)

    def pooled_grid(self, hw_shape: Tuple[int, int]) -> Tuple[int, int]:
        """The pooled grid ``(h', w')`` of an ``hw_shape`` map."""
        if self.pool_size is not None:
            return self.pool_size
        K = self.sr_ratio
        return -(-hw_shape[0] // K), -(-hw_shape[1] // K)

    def pooled_cells(self, hw_shape: Tuple[int, int]) -> int:
        """Cells of the pooled grid of an ``hw_shape`` map."""
        h, w = self.pooled_grid(hw_shape)
        return h * w

    def pool(self, x: torch.Tensor, op: str = 'avg') -> torch.Tensor:
        """Pool a ``(B, c, H, W)`` map to the query/key grid
        (:func:`pool_map`)."""
        return pool_map(x, self.sr_ratio, self.pool_size, op)

    def attend(self,
               q_map: torch.Tensor,
               k_map: torch.Tensor,
               v: torch.Tensor,
               hw_shape: Tuple[int, int],
               recompute_now: Optional[bool] = None,
               impl: Optional[str] = None) -> torch.Tensor:
        """Attend and bring the result back to ``hw_shape``.

        Args:
            q_map (torch.Tensor): Pooled queries ``(B, m * dq, h', w')``.
            k_map (torch.Tensor): Pooled keys ``(B, m * dq, h', w')``.
            v (torch.Tensor): Value tokens ``(B, N, m * dv)``.
            hw_shape (tuple[int, int]): ``(H, W)`` with ``N = H * W``.
            recompute_now (bool, optional): Whether to recompute in
                backward; None asks :func:`recompute_active` (a caller that
                has asked already passes its answer).
            impl (str, optional): The path, ``'fused'`` or ``'literal'``;
                None resolves ``self.impl`` (:func:`resolve_impl`; a caller
                that has resolved it already passes its answer).

        Returns:
            torch.Tensor: The query-upsampled output ``(B, m * dv, H, W)``,
            a channels_last view of tokens.
        """
        hw_shape = check_grid(hw_shape)
        q = map_to_heads(q_map, self.num_heads)
        v = v.unflatten(-1, (self.num_heads, v.shape[-1] // self.num_heads))
        v = v.transpose(1, 2)
        # Resolved before recomputing: that run records autograd only in
        # backward.
        if impl is None:
            impl = resolve_impl(self.impl, q, k_map)
        h = q_map.shape[-2]
        if recompute_now is None:
            recompute_now = recompute_active(self)
        if recompute_now and not self.return_attn_map:
            return recompute(
                lambda q, k, val: self._attend(q, k, val, h, hw_shape, impl),
                q, k_map, v, module=self)
        return self._attend(q, k_map, v, h, hw_shape, impl)

    def exports_static(self, x: torch.Tensor,
                       hw_shape: Tuple[int, int]) -> bool:
        """Whether an exporter traces the layer on fixed sizes (a fixed-size
        export, or a dynamic batch of fixed-size images) in eval mode, where
        a subclass builds its graph from :meth:`pool_tokens` and
        :meth:`attend_tokens`."""
        return (is_exporting() and not self.training
                and not self.return_attn_map
                and static_sizes(*x.shape[1:], *hw_shape))

    def pool_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`pool` of a fixed-size ``(B, c, H, W)`` map as pooled tokens
        ``(B, h'*w', c)``: one matmul with :func:`pooling_matrix`, the
        tokens' own layout (no transposes around an ONNX AveragePool)."""
        pool = pooling_matrix(x.shape[-2:], self.sr_ratio, self.pool_size,
                              x.device, x.dtype)
        return torch.matmul(pool, map_to_tokens(x))

    def attend_tokens(self, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, grid: Tuple[int, int],
                      hw_shape: Tuple[int, int]) -> torch.Tensor:
        """:meth:`attend` on fixed sizes, from tokens, as few graph nodes.

        The pooled keys ``k`` (B, h'*w', m*dq) are resized as tokens by one
        constant matrix (the key-axis resize is linear, so this is the
        ``'fused'`` path), and all heads attend in one op on token tensors:
        the ONNX ``Attention`` op (:func:`torch.onnx.ops.attention`) where
        ``onnx_attention`` is set (opset 23), else the products written out
        for all heads at once (``A_h V`` against all value channels, each
        head keeping its own: no per-head transposes, and ``m`` times the
        products of the layer's cheapest matmul). A resizing query upsampler
        gets the output resized the same way, as tokens. Returns the
        upsampled ``(B, m*dv, H, W)`` map; the same function as
        :meth:`attend` (tested against it).

        Args:
            q (torch.Tensor): Pooled query tokens ``(B, h'*w', m*dq)``.
            k (torch.Tensor): Pooled key tokens ``(B, h'*w', m*dq)``.
            v (torch.Tensor): Value tokens ``(B, H*W, m*dv)``.
            grid (tuple[int, int]): The pooled grid ``(h', w')``.
            hw_shape (tuple[int, int]): ``(H, W)``.
        """
        k = torch.matmul(
            interpolation_matrix(grid, hw_shape, self.key_upsample, k.device,
                                 k.dtype).t(), k)  # (B, H*W, m*dq)
        m = self.num_heads
        if self.onnx_attention:
            out = torch.onnx.ops.attention(q, k, v, q_num_heads=m,
                                           kv_num_heads=m,
                                           scale=self.scale)[0]
        else:
            B, channels = batch_size(q), q.shape[-1]
            logits = torch.matmul(
                q.reshape(B, q.shape[1], m, channels // m).transpose(1, 2),
                k.reshape(B, k.shape[1], m, channels // m).permute(0, 2, 3, 1))
            attn = (logits * self.scale).softmax(dim=-1)  # (B, m, Nq, N)
            heads = torch.matmul(attn, v.unsqueeze(1))  # (B, m, Nq, m*dv)
            dv = v.shape[-1] // m
            own = (torch.arange(v.shape[-1], device=v.device) // dv ==
                   torch.arange(m, device=v.device)[:, None])
            out = (heads * own[:, None].to(heads.dtype)).sum(1)
        upsampler = self.query_upsampler
        if isinstance(upsampler, (ResizeUpsampler, ResizeDWConvUpsampler)):
            out = torch.matmul(
                interpolation_matrix(grid, hw_shape, upsampler.mode,
                                     out.device, out.dtype).t(), out)
            grid = hw_shape
        return upsampler(tokens_to_map(out, grid), hw_shape)

    def _attend(self, q: torch.Tensor, k_map: torch.Tensor, v: torch.Tensor,
                h: int, hw_shape: Tuple[int, int], impl: str) -> torch.Tensor:
        out, attn_map = pooled_key_attention(
            q, k_map, v, hw_shape, self.key_upsample, self.scale,
            self.attn_drop, impl, self.return_attn_map)
        if self.return_attn_map:
            self.attn_map = attn_map
        return self.query_upsampler(heads_to_map(out, h), hw_shape)

    def extra_repr(self) -> str:
        grid = (f'sr_ratio={self.sr_ratio}' if self.pool_size is None else
                f'pool_size={self.pool_size}')
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'{grid}, key_upsample={self.key_upsample!r}, '
                f'impl={self.impl!r}')
