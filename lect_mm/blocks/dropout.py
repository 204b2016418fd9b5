"""Dropout with a cheaper mask on the CPU.

LeCT's recipe drops 10 % of the LeMSA and LeFFN outputs at full resolution
(LeCT report, Appendix: ``drop_rate`` 0.1). On the CPU, ``nn.Dropout`` draws
its mask with ``bernoulli_``, one single-threaded float draw per element; in a
LeCT v1 training step at batch 8 that was about a fifth of the step.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.registry import MODELS

from .functional import is_compiling

_LEVELS = 1 << 15  # the mask's draws are uniform on [0, 2**15 - 1]
_LOW_15_BITS_OF_EACH_QUARTER = 0x7FFF7FFF7FFF7FFF
# Below this many elements the mask's few extra kernel calls cost more than
# the cheaper draws save (fwd+bwd on the 2-core CPU: break-even near 2**15).
_MIN_NUMEL = 1 << 15


def _draw_15_bits(x: torch.Tensor) -> torch.Tensor:
    """One uniform draw from ``[0, 2**15)`` per element of ``x``, as an
    int16 tensor of ``x``'s shape, in ``x``'s memory layout.

    For a contiguous or channels-last ``x`` whose innermost dimension in
    memory divides by 4, each int64 draw (63 random bits) gives four draws:
    its int16 quarters, masked to 15 bits (torch's int16 ``random_`` costs
    about 3.5x as much per element). Otherwise int16 ``random_``.
    """
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(
            memory_format=torch.channels_last):
        n, c, h, w = x.shape
        if c % 4 == 0:
            return _quarters((n, h, w, c)).permute(0, 3, 1, 2)
    elif x.is_contiguous() and x.dim() > 0 and x.shape[-1] % 4 == 0:
        return _quarters(x.shape)
    return torch.empty_like(x, dtype=torch.int16).random_()


def _quarters(shape) -> torch.Tensor:
    """Contiguous 15-bit draws of ``shape`` (last size divisible by 4)."""
    words = torch.empty(
        tuple(shape[:-1]) + (shape[-1] // 4, ), dtype=torch.int64).random_()
    return words.bitwise_and_(_LOW_15_BITS_OF_EACH_QUARTER).view(torch.int16)


@MODELS.register_module()
class FastDropout(nn.Dropout):
    """``nn.Dropout`` whose CPU mask is drawn from 15-bit integers.

    An element is kept when a uniform draw from ``[0, 2**15)`` is at least
    ``t = round(p * 2**15)``, and kept elements are scaled by
    ``2**15 / (2**15 - t)``. The drop probability is ``t / 2**15``, within
    ``1.6e-5`` of ``p`` (0.100006 for 0.1), and the output's expectation is
    the input exactly, as with ``nn.Dropout``. The draws are the 15-bit
    quarters of int64 ``random_`` draws (:func:`_draw_15_bits`; no float
    transform), compared and selected with ``where``: a few kernels that cost a
    fraction of ``bernoulli_``'s one.
    For backward it keeps the mask as a bool tensor (1 byte an element;
    ``nn.Dropout``'s CPU path keeps a scaled mask in ``x``'s dtype).
    LeCT's blocks (LeMSA, LeMSAv2, LeFFN), MultiheadSelfAttention, ViTAE's
    attention and AlterNet's attention use it (the report's drop rate 0.1
    on the LeMSA and LeFFN outputs, LeCT report §3.4 and Appendix); the
    MLPs built on mmcv's ``FFN`` (CCT, CeiT, ViTAE) keep ``nn.Dropout``.

    Off the CPU, in eval mode, for ``p == 0``, for inputs of fewer than
    2**15 elements and under ``torch.compile`` it is ``F.dropout`` itself
    (CUDA's kernel draws its mask in place, and Inductor fuses the draw into
    the generated kernel). It is a subclass of ``nn.Dropout``, with the same
    arguments (``p``, ``inplace``) and no state, so checkpoints and
    ``isinstance`` checks are unaffected. The mask comes from torch's
    default CPU generator, so seeded runs repeat.

    Args:
        p (float): Drop probability in ``[0, 1]``. Defaults to 0.5.
        inplace (bool): Accepted for ``nn.Dropout`` compatibility; on the
            CPU path the output is always a new tensor. Defaults to False.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (not self.training or self.p == 0. or x.device.type != 'cpu'
                or x.numel() < _MIN_NUMEL or is_compiling()):
            return F.dropout(x, self.p, self.training, self.inplace)
        threshold = round(self.p * _LEVELS)
        if threshold >= _LEVELS:
            return x * 0.
        bits = _draw_15_bits(x)
        # A bool mask: autograd keeps 1 byte an element for backward (the
        # float mask of nn.Dropout's CPU path takes x's element size), and
        # kept elements are x * scale, bit for bit as with a float mask.
        # where() selects with it directly (a product with a bool tensor
        # converts it to x's dtype first, in forward and in backward).
        keep = torch.ge(bits, threshold)
        return torch.where(keep, x * (_LEVELS / (_LEVELS - threshold)), 0.)
