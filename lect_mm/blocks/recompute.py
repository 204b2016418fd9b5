"""Recomputation of cheap layer chains in backward: how LeCT's blocks
implement ``with_cp`` (activation memory).

The blocks run chains of norms, activations, dropouts, pools, resizes and
depthwise convolutions whose every intermediate autograd would keep for
backward. :func:`recompute` keeps only the chain's inputs and runs it again
in backward (:class:`_Recompute`), with the same random state and without
a second update of the module's BatchNorm running statistics: values,
gradients and buffers are bit for bit those of the plain chain.
"""
import contextlib
import warnings
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable
from torch.nn.modules.batchnorm import _BatchNorm

from .functional import is_compiling


def recompute_active(module: nn.Module) -> bool:
    """Whether ``module`` (a block whose ``with_cp`` is implemented by
    :func:`recompute`) recomputes now: ``with_cp`` on, in training, with
    autograd recording, and not under ``torch.compile`` (Inductor decides
    what to keep itself)."""
    if not (getattr(module, 'with_cp', False) and module.training
            and torch.is_grad_enabled() and not is_compiling()):
        return False
    # Only plain BatchNorm2d: SyncBatchNorm would communicate again in
    # backward, and other stateful norms would update their state twice.
    others = sorted({
        type(m).__name__
        for m in module.modules()
        if isinstance(m, _BatchNorm) and type(m) is not nn.BatchNorm2d
    })
    if others:
        warnings.warn(
            f'with_cp=True: {type(module).__name__} keeps its intermediates '
            f'for backward: its {", ".join(others)} cannot be rerun in '
            'backward (it would communicate or update its statistics a '
            'second time), so it saves no memory.', stacklevel=2)
    return not others


@contextlib.contextmanager
def _running_stats_untouched(norms):
    """Training BatchNorms normalise with the batch statistics, as always,
    but neither update their running statistics nor count the batch: the
    rerun for backward leaves what the first run left (the module switch
    ``track_running_stats``; no tensor op)."""
    for bn in norms:
        bn.track_running_stats = False
    try:
        yield
    finally:
        for bn in norms:
            bn.track_running_stats = True


class _Recompute(torch.autograd.Function):
    """Runs ``fn`` without recording it; backward runs it again, recording,
    and differentiates that run.

    The parameters ``fn`` reads are inputs of the node, so their gradients
    flow out of it as any other (``torch.autograd.grad``, DDP's hooks and
    frozen parameters work as without recomputation). Unlike torch's
    non-reentrant checkpoint, the forward installs no saved-tensor hooks,
    which would make autograd dispatch a ``detach`` for each tensor saved
    inside.
    """

    @staticmethod
    def forward(ctx, fn, norms, num_inputs, *args):
        ctx.fn, ctx.norms, ctx.num_inputs = fn, norms, num_inputs
        ctx.rng_state = torch.get_rng_state()
        devices = sorted({
            a.device.index for a in args[:num_inputs]
            if a.device.type == 'cuda'
        })
        ctx.cuda_states = [(d, torch.cuda.get_rng_state(d)) for d in devices]
        ctx.autocast = {
            device: (torch.is_autocast_enabled(device),
                     torch.get_autocast_dtype(device))
            for device in {a.device.type for a in args[:num_inputs]}
        }
        ctx.save_for_backward(*args)
        out = fn(*args[:num_inputs])
        ctx.is_tuple = isinstance(out, tuple)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        args = ctx.saved_tensors
        num_inputs = ctx.num_inputs
        inputs = [
            a.detach().requires_grad_(a.requires_grad)
            for a in args[:num_inputs]
        ]
        with torch.random.fork_rng(
                devices=[d for d, _ in ctx.cuda_states]):
            torch.set_rng_state(ctx.rng_state)
            for device, state in ctx.cuda_states:
                torch.cuda.set_rng_state(state, device)
            with torch.enable_grad(), contextlib.ExitStack() as stack:
                for device, (enabled, dtype) in ctx.autocast.items():
                    stack.enter_context(
                        torch.autocast(device, dtype, enabled=enabled))
                stack.enter_context(_running_stats_untouched(ctx.norms))
                outs = ctx.fn(*inputs)
        outs = outs if ctx.is_tuple else (outs, )
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if g is not None and o is not None and o.requires_grad]
        wrt = [(i, a) for i, a in enumerate(inputs + list(args[num_inputs:]))
               if a.requires_grad]
        result = [None] * len(args)
        if pairs and wrt:
            found = torch.autograd.grad([o for o, _ in pairs],
                                        [a for _, a in wrt],
                                        [g for _, g in pairs],
                                        allow_unused=True)
            for (i, _), g in zip(wrt, found):
                result[i] = g
        return (None, None, None, *result)


def recompute(fn: Callable[..., Any], *inputs: torch.Tensor,
              module: nn.Module) -> Any:
    """``fn(*inputs)`` whose intermediates are not kept for backward.

    Only ``inputs`` are kept; backward runs ``fn(*inputs)`` again (with the
    random and autocast state of the first call, so dropout masks repeat)
    and differentiates it. ``module`` is the module ``fn`` computes with:
    the gradients of its parameters come out of this step, and its
    BatchNorms do not update their running statistics in the second run.
    ``fn`` returns a tensor or a tuple of tensors (None allowed). Double
    backward is not supported (it raises).
    """
    params = [p for p in module.parameters() if p.requires_grad]
    norms = [
        m for m in module.modules() if isinstance(m, _BatchNorm)
        and m.training and m.track_running_stats
    ]
    return _Recompute.apply(fn, norms, len(inputs), *inputs, *params)
