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
# Below this many elements the mask's few extra kernel calls cost more than
# the cheaper draws save (fwd+bwd on the 2-core CPU: break-even near 2**15).
_MIN_NUMEL = 1 << 15


@MODELS.register_module()
class FastDropout(nn.Dropout):
    """``nn.Dropout`` whose CPU mask is drawn from 15-bit integers.

    An element is kept when a uniform draw from ``[0, 2**15)`` is at least
    ``t = round(p * 2**15)``, and kept elements are scaled by
    ``2**15 / (2**15 - t)``. The drop probability is ``t / 2**15``, within
    ``1.6e-5`` of ``p`` (0.100006 for 0.1), and the output's expectation is
    the input exactly, as with ``nn.Dropout``. The draws are int16's
    ``random_`` (one generator word an element, no float transform): the
    mask costs about half of ``bernoulli_``'s, in four kernels (draw,
    compare, two products).
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
        # One 15-bit draw per element (int16's random_ range), in x's memory
        # layout (empty_like keeps it), so the products read both densely.
        bits = torch.empty_like(x, dtype=torch.int16).random_()
        # A bool mask: autograd keeps 1 byte an element for backward (the
        # float mask of nn.Dropout's CPU path takes x's element size), and
        # kept elements are x * scale, bit for bit as with a float mask.
        keep = torch.ge(bits, threshold)
        return x.mul(_LEVELS / (_LEVELS - threshold)).mul(keep)
