"""LeMSA: locally-enhanced multi-head self-attention (LeCT report §3.3).

Two registered blocks, both ``forward(x, hw_shape)`` on tokens ``(B, N, C)``:

* :class:`LeMSA` — LeCT v1/v3 attention (SPEC §2), including the Table-3
  ablation switches ``conv_skip`` and ``qkv_mode``.
* :class:`LeMSAv2` — LeCT v2 frequency-ramp split attention (SPEC §6).

Both attend with pooled queries and pooled keys whose logit map is resized
along the key axis to the full ``H x W`` grid. The resize is linear in the
keys, so ``Up(q kᵀ) = q Up(k)ᵀ``: ``impl='fused'`` resizes the pooled keys and
runs :func:`torch.nn.functional.scaled_dot_product_attention` without ever
materialising the ``Nq x N`` map; ``impl='literal'`` is the report's
readable path (pooled logits → key-axis resize → scale → softmax), with the
resize as one matmul. ``impl='auto'`` (the default) picks the faster of the
two on the CPU from the dtype, the shapes and whether autograd records the
call (see :func:`resolve_impl`), and the fused path on other devices.
"""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule

from mmpretrain.registry import MODELS
from .dropout import FastDropout
from .upsample import (MATMUL_RESIZE_MAX_CELLS, SVConvTransposeUpsampler,
                       check_resize_mode, resize, resize_grid_axis)
from .functional import IMPLS, attend
from .utils import check_choice

QKV_MODES = ('sequential', 'parallel')
#: LeMSA's attention paths: :data:`~lect_mm.blocks.functional.IMPLS` and
#: ``'auto'``, which picks one per call (see :func:`resolve_impl`).
LEMSA_IMPLS = ('auto', ) + IMPLS


def resolve_impl(impl: str, q: torch.Tensor, k_map: torch.Tensor) -> str:
    """The attention path ``impl='auto'`` takes for these inputs.

    On the CPU, ``'literal'``:

    * in bf16/fp16, for pooled grids of up to
      :data:`~lect_mm.blocks.upsample.MATMUL_RESIZE_MAX_CELLS` cells (its
      resize is then one matmul; on larger grids its ``Nq x N`` logit map
      per head outgrows the upsampled keys);
    * in fp32 when training (autograd records the call), where the logit
      map is under half the size of the upsampled keys
      (``2 * h' * w' < d_qk``: LeCT v2's stages 2 and 3).

    ``'fused'`` otherwise, and on other devices, where SDPA's kernels were
    the faster path on an H100. An explicit ``'fused'`` or ``'literal'`` is
    returned unchanged.

    Why, measured on the 2-core CPU (``benchmarks/lemsa.py --scopes core``
    at batch 64 and LeCT v1's stages: 16, 16 and 49 pooled cells, 32
    channels per head; literal time / fused time):

    * bf16 forward+backward: 0.34-0.35x at all three stages (forward only
      0.43-0.80x): torch's CPU flash attention is slow in bf16. Whole bf16
      training steps at batch 8 were 1.03x (v1), 1.22x (v2) and 1.07x (v3)
      faster with the literal path.
    * fp32 forward+backward: 0.73-0.79x, 0.87-0.98x, 1.55-1.64x for the
      core, but whole LeCT v1 steps were no faster with the literal path at
      stages 1-2 (batch 64: 3-8 % slower in three of four runs), so fp32
      keeps SDPA there. Where the logit map is much smaller than the keys,
      the literal path wins the whole step: LeCT v2 at batch 64 took 4,488
      ms with it at stages 2-3 (16 cells, 64 channels; 4 cells, 48)
      against 4,778 ms fused.
    * fp32 forward only: 0.94x, 0.77x, 1.76x, and the fused path needs half
      the memory (49 against 98 MiB at stage 1), so inference stays fused.
    """
    if impl != 'auto':
        return impl
    if q.device.type != 'cpu':
        return 'fused'
    cells = k_map.shape[-2] * k_map.shape[-1]
    if q.dtype in (torch.bfloat16, torch.float16):
        return 'literal' if cells <= MATMUL_RESIZE_MAX_CELLS else 'fused'
    training = torch.is_grad_enabled() and (q.requires_grad
                                            or k_map.requires_grad)
    if training and 2 * cells < q.shape[-1]:
        return 'literal'
    return 'fused'
    if q.dtype in (torch.bfloat16, torch.float16):
        return 'literal'
    training = torch.is_grad_enabled() and (q.requires_grad
                                            or k_map.requires_grad)
    if training and k_map.shape[-2] * k_map.shape[-1] <= q.shape[-1]:
        return 'literal'
    return 'fused'


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


def check_hw_shape(x: torch.Tensor,
                   hw_shape: Sequence[int]) -> Tuple[int, int]:
    """Return ``(H, W)`` after checking ``H * W`` equals the token count."""
    H, W = hw_shape
    if H * W != x.shape[1]:
        raise ValueError(f'hw_shape {tuple(hw_shape)} does not match the '
                         f'{x.shape[1]} tokens of x {tuple(x.shape)}.')
    return H, W


def _pool(x: torch.Tensor, sr_ratio: Optional[int],
          pool_size: Optional[Tuple[int, int]], op: str) -> torch.Tensor:
    """Average/max pool a map to the query/key grid.

    ``sr_ratio`` K: kernel = stride = K with ``ceil_mode`` so the grid is
    ``(ceil(H/K), ceil(W/K))``; a partial border window averages only its
    valid pixels. ``pool_size``: adaptive pooling to that grid.
    """
    if pool_size is not None:
        fn = F.adaptive_avg_pool2d if op == 'avg' else F.adaptive_max_pool2d
        return fn(x, pool_size)
    fn = F.avg_pool2d if op == 'avg' else F.max_pool2d
    return fn(x, sr_ratio, sr_ratio, ceil_mode=True)


def _build_query_upsampler(cfg: dict, channels: int, sr_ratio, pool_size):
    cfg = dict(cfg)
    layer_type = cfg.get('type')
    cls = layer_type if isinstance(layer_type, type) else MODELS.get(
        layer_type)
    if cls is not None and issubclass(cls, SVConvTransposeUpsampler):
        if sr_ratio is not None:
            cfg.setdefault('scale_factor', sr_ratio)
        if pool_size is not None:
            cfg.setdefault('in_size', pool_size)
    return MODELS.build(cfg, default_args=dict(channels=channels))


def upsampled_key_attention(q: torch.Tensor,
                            k_map: torch.Tensor,
                            v: torch.Tensor,
                            hw_shape: Tuple[int, int],
                            mode: str,
                            scale: float,
                            dropout: nn.Dropout,
                            impl: str,
                            need_map: bool = False):
    """Attention with pooled queries and key-axis-upsampled logits.

    Args:
        q (torch.Tensor): Pooled queries ``(B, m, Nq, dq)``.
        k_map (torch.Tensor): Pooled keys as a head-major map
            ``(B, m * dq, h', w')`` (channel ``c`` is head ``c // dq``).
        v (torch.Tensor): Full-resolution values ``(B, m, N, dv)``.
        hw_shape (tuple[int, int]): ``(H, W)`` with ``N = H * W``.
        mode (str): Key-axis interpolation mode.
        scale (float): Logit scale (``C ** -0.5`` in LeCT).
        dropout (nn.Dropout): Attention dropout.
        impl (str): ``'auto'``, ``'fused'`` or ``'literal'``.
        need_map (bool): Also return the softmaxed ``(B, m, Nq, N)`` map
            (before dropout, detached). Defaults to False.

    Returns:
        tuple: ``out (B, m, Nq, dv)`` and the map or None.
    """
    num_heads = q.shape[1]
    attn_map = None
    impl = resolve_impl(impl, q, k_map)
    if impl == 'literal':
        h, w = k_map.shape[-2:]
        k = rearrange(k_map, 'b (m d) h w -> b m (h w) d', m=num_heads)
        # The resize is linear, so scaling q first equals scaling the
        # resized logits (and costs Nq x d instead of Nq x N products).
        logits = resize_grid_axis((q * scale) @ k.transpose(-2, -1), (h, w),
                                  hw_shape, mode)
        attn = logits.softmax(dim=-1)
        if need_map:
            attn_map = attn.detach()
        return dropout(attn) @ v, attn_map
    k_up = rearrange(
        resize(k_map, hw_shape, mode), 'b (m d) h w -> b m (h w) d',
        m=num_heads)
    return attend(q, k_up, v, scale,
                  dropout.p if dropout.training else 0., 'fused',
                  need_map=need_map)


def heads_to_map(x: torch.Tensor, h: int) -> torch.Tensor:
    """Re-assemble heads ``(B, m, h*w, d)`` into a ``(B, m*d, h, w)`` map.

    Head-major channels (channel ``c`` is head ``c // d``). The map is a
    view of ``(B, h*w, m*d)`` tokens, i.e. ``channels_last`` strides, the
    layout of every other map in the layer: the resize and depthwise conv
    that follow then keep it (a channels-first map here sends the query
    upsampler, its norm and the skip addition through slow layout
    conversions; about 3x slower on CPU at stage 1).
    """
    tokens = rearrange(x, 'b m n d -> b n (m d)')
    return rearrange(tokens, 'b (h w) c -> b c h w', h=h)


def attend_and_upsample(layer: nn.Module, q_map: torch.Tensor,
                        k_map: torch.Tensor, v: torch.Tensor,
                        hw_shape: Tuple[int, int]) -> torch.Tensor:
    """The attention and query upsampling shared by LeMSA and LeMSAv2.

    Splits the pooled query map and the value tokens into ``layer``'s
    heads, runs :func:`upsampled_key_attention` with the layer's settings
    (storing the map in ``layer.attn_map`` when ``layer.return_attn_map``)
    and brings the result back to ``hw_shape`` with
    ``layer.query_upsampler``.

    Args:
        layer (nn.Module): A LeMSA/LeMSAv2 (``num_heads``,
            ``key_upsample``, ``scale``, ``attn_drop``, ``impl``,
            ``return_attn_map``, ``query_upsampler``).
        q_map (torch.Tensor): Pooled queries ``(B, m * dq, h', w')``.
        k_map (torch.Tensor): Pooled keys ``(B, m * dq, h', w')``.
        v (torch.Tensor): Value tokens ``(B, N, m * dv)``.
        hw_shape (tuple[int, int]): ``(H, W)`` with ``N = H * W``.

    Returns:
        torch.Tensor: The upsampled attention output ``(B, m * dv, H, W)``,
        a channels_last view of tokens.
    """
    q = rearrange(q_map, 'b (m d) h w -> b m (h w) d', m=layer.num_heads)
    v = rearrange(v, 'b n (m d) -> b m n d', m=layer.num_heads)
    out, attn_map = upsampled_key_attention(
        q, k_map, v, hw_shape, layer.key_upsample, layer.scale,
        layer.attn_drop, layer.impl, layer.return_attn_map)
    if layer.return_attn_map:
        layer.attn_map = attn_map
    return layer.query_upsampler(
        heads_to_map(out, q_map.shape[-2]), hw_shape)


def _conv_bn(channels: int, kernel_size: int, bias: bool,
             norm_cfg: dict) -> nn.Sequential:
    """Depthwise conv + norm, keys ``0.*`` / ``1.*`` as in the reference."""
    return nn.Sequential(
        nn.Conv2d(
            channels,
            channels,
            kernel_size,
            padding=kernel_size // 2,
            groups=channels,
            bias=bias),
        build_norm_layer(norm_cfg, channels)[1])


@MODELS.register_module()
class LeMSA(BaseModule):
    """Locally-enhanced multi-head self-attention (report §3.3, SPEC §2).

    With tokens laid out as a ``(B, C, H, W)`` map::

        v    = Linear(C -> C, bias=qkv_bias)(x)
        a    = BN(DWConv_k(v))                  # conv1
        q    = AvgPool_K(a)                     # (B, C, h', w')
        b    = BN(DWConv_k(GELU(a)))            # conv2
        k    = AvgPool_K(b)
        skip = GELU(b)
        per head: A = softmax(Up_key(q kᵀ) * C^-0.5) ; o = A v_head
        out  = QueryUpsampler(o, (H, W)) + skip
        y    = Dropout(Linear(C -> C)(out))

    ``Up_key`` resizes each query row of the ``Nq x Nq`` logit map to
    ``(H, W)``; the scale uses the FULL ``C`` (not the head dim), as the
    reference does. Heads are re-assembled head-major (channel ``c`` belongs
    to head ``c // d``).

    Resolution: with ``sr_ratio`` K the pooled grid is ``(ceil(H/K),
    ceil(W/K))`` (ceil-mode average pooling, border windows average their
    valid pixels); with ``pool_size`` it is fixed (adaptive average pooling)
    so the cost is linear in ``N``. Keys and queries are resized to exactly
    ``(H, W)``; for divisible sizes this equals the reference's ``×K``
    resize bit for bit.

    Table-3 ablation: ``conv_skip=False`` drops the ``skip`` term;
    ``qkv_mode='parallel'`` computes the query and key features
    independently from ``v`` instead of chaining them:
    ``a = BN(DWConv_q(v))`` (conv1) and ``b = BN(DWConv_k(v))`` (conv2), with
    ``q = AvgPool_K(a)``, ``k = AvgPool_K(b)``, ``skip = GELU(b)``; the
    default ``'sequential'`` is the reference chain ``a -> GELU -> b``.

    Submodules (reference key under ``blocksI.J.leatt.``, SPEC §7):
    ``proj_v`` (``proj_v``), ``conv1.0`` DW conv / ``conv1.1`` norm
    (``conv1.0`` / ``conv1.1``), ``conv2.0`` / ``conv2.1`` (same),
    ``query_upsampler`` (``v_upsample``, see :mod:`lect_mm.blocks.upsample`),
    ``proj`` (``proj``). ``act``, ``attn_drop`` and ``proj_drop`` hold no
    parameters.

    Attention maps for visualisation: set ``module.return_attn_map = True``
    and each forward stores the softmaxed, key-upsampled ``(B, m, Nq, N)``
    map (before attention dropout, detached) in ``module.attn_map``. Off by
    default, and then no map is computed (the fused path never builds it).

    Args:
        embed_dims (int): Number of channels ``C``.
        num_heads (int): Number of heads ``m``; must divide ``embed_dims``.
        sr_ratio (int, optional): Spatial-reduction ratio ``K`` (pooling
            kernel and stride). Exactly one of ``sr_ratio`` and
            ``pool_size`` must be given. Defaults to None.
        pool_size (int | tuple[int, int], optional): Fixed pooled grid
            ``(h', w')`` (adaptive average pooling). Defaults to None.
        kernel_size (int): Depthwise kernel size of conv1/conv2.
            Defaults to 3.
        qkv_bias (bool): Bias of ``proj_v`` and of the depthwise convs.
            Defaults to False.
        attn_drop (float): Attention-weight dropout. Defaults to 0.
        proj_drop (float): Output dropout. Defaults to 0.
        key_upsample (str): Key-axis resize mode, one of ``'nearest'``,
            ``'bilinear'``, ``'bicubic'``. Defaults to 'bilinear'.
        query_upsampler (dict): Config of the query-axis upsampler, built
            with ``channels=C``; for ``SVConvTransposeUpsampler``
            ``scale_factor`` defaults to ``sr_ratio`` and ``in_size`` to
            ``pool_size``. Defaults to
            ``dict(type='ResizeDWConvUpsampler')``.
        conv_skip (bool): Add the convolutional skip ``GELU(b)``.
            Defaults to True.
        qkv_mode (str): ``'sequential'`` or ``'parallel'`` (see above).
            Defaults to 'sequential'.
        impl (str): ``'fused'`` (SDPA on resized keys), ``'literal'``
            (logit map resized along the key axis) or ``'auto'`` (the
            faster of the two for the input's device and shapes, see
            :func:`resolve_impl`). All three compute the same function.
            Defaults to 'auto'.
        norm_cfg (dict): Norm config of the convs. Defaults to
            ``dict(type='BN')``.
        act_cfg (dict): Activation config. Defaults to
            ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: Optional[int] = None,
                 pool_size: Optional[Union[int, Sequence[int]]] = None,
                 kernel_size: int = 3,
                 qkv_bias: bool = False,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 key_upsample: str = 'bilinear',
                 query_upsampler: dict = dict(type='ResizeDWConvUpsampler'),
                 conv_skip: bool = True,
                 qkv_mode: str = 'sequential',
                 impl: str = 'auto',
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible '
                             f'by num_heads ({num_heads}).')
        self.sr_ratio, self.pool_size = _check_pooling(sr_ratio, pool_size)
        self.key_upsample = check_resize_mode(key_upsample, 'key_upsample')
        self.impl = check_choice(impl, LEMSA_IMPLS, 'impl')
        self.qkv_mode = check_choice(qkv_mode, QKV_MODES, 'qkv_mode')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.conv_skip = conv_skip
        self.scale = embed_dims**-0.5

        self.proj_v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.conv1 = _conv_bn(embed_dims, kernel_size, qkv_bias, norm_cfg)
        self.conv2 = _conv_bn(embed_dims, kernel_size, qkv_bias, norm_cfg)
        self.act = build_activation_layer(act_cfg)
        self.attn_drop = FastDropout(attn_drop)
        self.query_upsampler = _build_query_upsampler(
            query_upsampler, embed_dims, self.sr_ratio, self.pool_size)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = FastDropout(proj_drop)
        self.return_attn_map = False
        self.attn_map = None

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Forward tokens ``x`` (B, N, C) on the grid ``hw_shape`` = (H, W).

        Returns:
            torch.Tensor: Tokens (B, N, C).
        """
        H, W = check_hw_shape(x, hw_shape)
        v = self.proj_v(x)
        v_map = rearrange(v, 'b (h w) c -> b c h w', h=H, w=W)
        a = self.conv1(v_map)
        if self.qkv_mode == 'sequential':
            b = self.conv2(self.act(a))
        else:
            b = self.conv2(v_map)

        out = attend_and_upsample(
            self, _pool(a, self.sr_ratio, self.pool_size, 'avg'),
            _pool(b, self.sr_ratio, self.pool_size, 'avg'), v, (H, W))
        if self.conv_skip:
            out = out + self.act(b)
        out = rearrange(out, 'b c h w -> b (h w) c')
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        grid = (f'sr_ratio={self.sr_ratio}' if self.pool_size is None else
                f'pool_size={self.pool_size}')
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'{grid}, key_upsample={self.key_upsample!r}, '
                f'conv_skip={self.conv_skip}, qkv_mode={self.qkv_mode!r}, '
                f'impl={self.impl!r}')


@MODELS.register_module()
class LeMSAv2(BaseModule):
    """Frequency-ramp split LeMSA of LeCT v2 (report Appendix, SPEC §6).

    ``C`` splits into ``h_dim = int(C * h_ratio)`` high-frequency and
    ``l_dim = C - h_dim`` low-frequency (attention) channels::

        src  = x[..., :h_dim]            (default, as the reference)
               x[..., h_dim:]            (low_from_input=True)
        v    = Linear(len(src) -> l_dim, bias=qkv_bias)(src)
        a    = BN(DWConv_k(v))                              # conv1
        b    = BN(DWConv_k(GELU(a)))                        # conv2
        high = GELU(BN(Conv1x1(l_dim -> h_dim, bias)(b)))   # conv3
        per head (l_dim / m channels each):
            q = concat_feat(AvgPool_K(a)_head, MaxPool_K(a)_head)   # 2 l_dim/m
            k = concat_feat(AvgPool_K(b)_head, MaxPool_K(b)_head)
            o = softmax(Up_key(q kᵀ) * C^-0.5) v_head
        low  = QueryUpsampler(o, (H, W))                    # l_dim channels
        y    = Dropout(Linear(C -> C)(concat[high, low]))

    The head split follows the reference: the avg- and max-pooled maps
    ``(B, l_dim, h', w')`` are each split into ``m`` heads of ``l_dim/m``
    channels and concatenated per head (avg first). The scale uses the
    full ``C``. There is no convolutional skip.

    ``low_from_input``: the reference uses only the first ``h_dim`` input
    channels (the last ``l_dim`` are ignored). With ``low_from_input=True``
    the last ``l_dim`` channels (the low split) feed the attention branch
    instead, as the report's prose (Inception-Transformer style) describes:
    ``proj_v`` becomes ``Linear(l_dim -> l_dim)`` and the rest of the layer
    is unchanged, so the high branch is computed from ``b`` of that split
    and the first ``h_dim`` channels reach the output only through the
    block's residual.

    Submodules (reference key under ``blocksI.J.leatt.``): ``proj_v``,
    ``conv1.{0,1}``, ``conv2.{0,1}``, ``conv3.0`` (1x1 conv with bias) /
    ``conv3.1`` (norm), ``query_upsampler.conv`` (``v_conv``) /
    ``query_upsampler.norm`` (``v_bn``), ``proj``.

    ``return_attn_map`` / ``attn_map`` work as in :class:`LeMSA`.

    Args:
        embed_dims (int): Number of channels ``C``.
        num_heads (int): Number of heads; must divide ``l_dim``.
        sr_ratio (int, optional): Spatial-reduction ratio ``K``. Exactly one
            of ``sr_ratio`` and ``pool_size`` must be given.
        h_ratio (float): High-frequency share of the channels, in (0, 1).
        kernel_size (int): Depthwise kernel size of conv1/conv2.
            Defaults to 3.
        qkv_bias (bool): Bias of ``proj_v`` and the depthwise convs.
            Defaults to False.
        attn_drop (float): Attention-weight dropout. Defaults to 0.
        proj_drop (float): Output dropout. Defaults to 0.
        key_upsample (str): Key-axis resize mode. Defaults to 'bicubic'.
        query_upsampler (dict): Query upsampler config, built with
            ``channels=l_dim``. Defaults to
            ``dict(type='ResizeDWConvUpsampler', mode='bicubic')``.
        low_from_input (bool): Feed the low split of the input to the
            attention branch (see above). Defaults to False.
        impl (str): ``'auto'``, ``'fused'`` or ``'literal'``, as in
            :class:`LeMSA`. Defaults to 'auto'.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation config. Defaults to
            ``dict(type='GELU')``.
        pool_size (int | tuple[int, int], optional): Fixed pooled grid
            (adaptive avg/max pooling) instead of ``sr_ratio``.
            Defaults to None.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: Optional[int],
                 h_ratio: float,
                 kernel_size: int = 3,
                 qkv_bias: bool = False,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 key_upsample: str = 'bicubic',
                 query_upsampler: dict = dict(
                     type='ResizeDWConvUpsampler', mode='bicubic'),
                 low_from_input: bool = False,
                 impl: str = 'auto',
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 pool_size: Optional[Union[int, Sequence[int]]] = None,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.sr_ratio, self.pool_size = _check_pooling(sr_ratio, pool_size)
        self.key_upsample = check_resize_mode(key_upsample, 'key_upsample')
        self.impl = check_choice(impl, LEMSA_IMPLS, 'impl')
        self.h_dim = int(embed_dims * h_ratio)
        self.l_dim = embed_dims - self.h_dim
        if not 0 < self.h_dim < embed_dims:
            raise ValueError(
                f'h_ratio ({h_ratio}) must leave both splits non-empty: '
                f'h_dim = int({embed_dims} * {h_ratio}) = {self.h_dim}.')
        if self.l_dim % num_heads != 0:
            raise ValueError(
                f'l_dim = embed_dims - int(embed_dims * h_ratio) = '
                f'{self.l_dim} (embed_dims {embed_dims}, h_ratio {h_ratio}) '
                f'must be divisible by num_heads ({num_heads}).')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.low_from_input = low_from_input
        self.scale = embed_dims**-0.5

        in_dims = self.l_dim if low_from_input else self.h_dim
        self.proj_v = nn.Linear(in_dims, self.l_dim, bias=qkv_bias)
        self.conv1 = _conv_bn(self.l_dim, kernel_size, qkv_bias, norm_cfg)
        self.conv2 = _conv_bn(self.l_dim, kernel_size, qkv_bias, norm_cfg)
        self.conv3 = nn.Sequential(
            nn.Conv2d(self.l_dim, self.h_dim, 1, bias=True),
            build_norm_layer(norm_cfg, self.h_dim)[1])
        self.act = build_activation_layer(act_cfg)
        self.attn_drop = FastDropout(attn_drop)
        self.query_upsampler = _build_query_upsampler(
            query_upsampler, self.l_dim, self.sr_ratio, self.pool_size)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = FastDropout(proj_drop)
        self.return_attn_map = False
        self.attn_map = None

    def _pooled_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, l, H, W) -> per-head [avg, max] map (B, m * 2l/m, h', w').

        The small pooled map is returned channels_last, as the maps of
        :class:`LeMSA`, so that the key resize writes channels_last too and
        the per-head split of the resized keys is a view (a channels-first
        map here costs a copy of the full-resolution keys and a slower
        resize backward).
        """
        avg = _pool(x, self.sr_ratio, self.pool_size, 'avg')
        mx = _pool(x, self.sr_ratio, self.pool_size, 'max')
        avg = rearrange(avg, 'b (m d) h w -> b m d h w', m=self.num_heads)
        mx = rearrange(mx, 'b (m d) h w -> b m d h w', m=self.num_heads)
        return rearrange(
            torch.cat([avg, mx], dim=2),
            'b m d h w -> b (m d) h w').contiguous(
                memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Forward tokens ``x`` (B, N, C) on the grid ``hw_shape`` = (H, W).

        Returns:
            torch.Tensor: Tokens (B, N, C).
        """
        H, W = check_hw_shape(x, hw_shape)
        src = x[..., self.h_dim:] if self.low_from_input else \
            x[..., :self.h_dim]
        v = self.proj_v(src)
        v_map = rearrange(v, 'b (h w) c -> b c h w', h=H, w=W)
        a = self.conv1(v_map)
        b = self.conv2(self.act(a))
        high = self.act(self.conv3(b))

        low = attend_and_upsample(self, self._pooled_heads(a),
                                  self._pooled_heads(b), v, (H, W))
        # proj(concat[high, low]) as two products on the weight's column
        # blocks: no concatenated map, no sliced gradients to copy back.
        weight = self.proj.weight
        out = F.linear(
            rearrange(high, 'b c h w -> b (h w) c'), weight[:, :self.h_dim])
        out = out + F.linear(
            rearrange(low, 'b c h w -> b (h w) c'), weight[:, self.h_dim:],
            self.proj.bias)
        return self.proj_drop(out)

    def extra_repr(self) -> str:
        grid = (f'sr_ratio={self.sr_ratio}' if self.pool_size is None else
                f'pool_size={self.pool_size}')
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'h_dim={self.h_dim}, l_dim={self.l_dim}, {grid}, '
                f'key_upsample={self.key_upsample!r}, '
                f'low_from_input={self.low_from_input}, impl={self.impl!r}')
