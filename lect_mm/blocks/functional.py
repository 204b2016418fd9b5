"""Stateless functions shared by the blocks: softmax attention, the
token/map layout changes and the ``torch.compile`` and export checks."""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

#: The attention implementations every attention block offers.
IMPLS = ('fused', 'literal')


def batch_size(x: torch.Tensor, times: int = 1):
    """``x.shape[0] * times``, the leading size of a reshape of ``x``: -1
    under export, where a symbolic (dynamic) batch would put shape
    arithmetic into every reshape of the graph; the size itself otherwise,
    since an empty batch leaves -1 nothing to infer from."""
    return -1 if is_exporting() else x.shape[0] * times


def static_sizes(*sizes) -> bool:
    """Whether every size is a plain int: always in eager mode, and under
    ``torch.export`` for the dimensions it keeps fixed (all of a fixed-size
    export, height and width of a dynamic-batch one), but not for symbolic
    sizes nor for sizes traced as tensors (the TorchScript exporter)."""
    return all(type(s) is int for s in sizes)


def tokens_to_map(x: torch.Tensor,
                  hw_shape: Sequence[int]) -> torch.Tensor:
    """Tokens ``(B, H*W, C)`` -> map ``(B, C, H, W)``, a view.

    The two layout changes every block makes are these torch ops, the ones
    einops runs for ``'b (h w) c -> b c h w'`` and ``'b c h w -> b (h w) c'``
    (same values, same memory layout): ``torch.compile`` would trace
    einops' parsing of the pattern at every call, most of the time it takes
    to compile a LeCT.
    """
    h, w = hw_shape
    return x.reshape(batch_size(x), h, w, x.shape[-1]).permute(0, 3, 1, 2)


def map_to_tokens(x: torch.Tensor) -> torch.Tensor:
    """Map ``(B, C, H, W)`` -> tokens ``(B, H*W, C)`` (a copy, but for a
    ``channels_last`` map, whose tokens are a view)."""
    return x.permute(0, 2, 3, 1).reshape(batch_size(x),
                                         x.shape[2] * x.shape[3], x.shape[1])


def is_compiling() -> bool:
    """Whether ``torch.compile`` is tracing the caller.

    Paths that dynamo cannot trace (in-place RNG, module-level caches) take
    their plain-torch branch then.
    """
    compiler = getattr(torch, 'compiler', None)
    if hasattr(compiler, 'is_compiling'):
        return compiler.is_compiling()
    return torch._dynamo.is_compiling()  # torch < 2.3


def is_exporting() -> bool:
    """Whether an exporter traces the caller: ``torch.export`` (and the
    ONNX exporter built on it, ``torch.onnx.export(..., dynamo=True)``) or
    torch.onnx's TorchScript exporter.

    Choices that depend on the input's size (a fast path for small grids,
    a shortcut when two sizes are equal) then take their size-independent
    branch, so that one exported graph serves every input size: under
    ``torch.export`` such a choice would become a guard on the size, and
    the TorchScript exporter would record the branch taken at the example
    size.
    """
    compiler = getattr(torch, 'compiler', None)
    exporting = getattr(compiler, 'is_exporting', None)
    return bool(exporting is not None
                and exporting()) or torch.onnx.is_in_onnx_export()


def softmax_attention(q: torch.Tensor,
                      k: torch.Tensor,
                      v: torch.Tensor,
                      scale: float,
                      dropout_p: float = 0.,
                      impl: str = 'fused',
                      bias: Optional[torch.Tensor] = None,
                      need_map: bool = False
                      ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Softmax attention over the last two axes, shared by the blocks.

    ``softmax(q kᵀ · scale + bias) v`` with dropout ``dropout_p`` on the
    weights (pass 0 in eval mode). ``impl='fused'`` runs
    :func:`torch.nn.functional.scaled_dot_product_attention`;
    ``impl='literal'`` writes the softmax out.

    Args:
        q, k, v (torch.Tensor): ``(..., Nq, d)``, ``(..., Nk, d)``,
            ``(..., Nk, dv)``.
        scale (float): Logit scale.
        dropout_p (float): Attention dropout. Defaults to 0.
        impl (str): ``'fused'`` or ``'literal'``. Defaults to 'fused'.
        bias (torch.Tensor, optional): Additive logit bias (e.g. relative
            positions), broadcast to ``(..., Nq, Nk)``.
        need_map (bool): Also return the softmaxed map (before dropout,
            detached); the fused path computes it separately, only then.

    Returns:
        tuple: The output ``(..., Nq, dv)`` and the map or None.
    """

    def weights() -> torch.Tensor:
        logits = (q @ k.transpose(-2, -1)) * scale
        return (logits if bias is None else logits + bias).softmax(dim=-1)

    if impl == 'literal':
        attn = weights()
        attn_map = attn.detach() if need_map else None
        return F.dropout(attn, dropout_p) @ v, attn_map
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
    if not need_map:
        return out, None
    with torch.no_grad():
        return out, weights()
