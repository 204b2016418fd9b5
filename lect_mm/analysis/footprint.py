"""Device-independent cost of a training step: saved bytes and ATen ops.

Two exact, repeatable figures explain why a network trains slower than its
FLOPs suggest, on any device:

- **bytes saved for backward**: the sizes of the distinct tensor storages
  autograd keeps from the forward for the backward (counted with
  :func:`torch.autograd.graph.saved_tensors_hooks`), i.e. the activation
  memory a step needs and the traffic it causes;
- **ATen ops dispatched** during forward and backward (counted with a
  :class:`~torch.utils._python_dispatch.TorchDispatchMode`), of which the
  views (ops returning an alias of an input: ``view``, ``permute``,
  ``transpose``, ``t``, autograd's ``detach`` of each parameter's gradient)
  launch no kernel; on a GPU every other op is at least one kernel launch.

The two are counted in two separate steps: installing a saved-tensors hook
makes autograd dispatch an extra ``detach`` for many of the tensors it saves,
ops that a real training step does not run (ResNet-18 at batch 1: 404 ops with
the hook, 339 without), so the ops are counted in a step without the hook.
"""
from collections import Counter
from typing import Dict, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


def _is_view(func) -> bool:
    """Whether an ATen op returns an alias of an input (no kernel runs).

    ``_unsafe_view`` is a view that its schema does not mark as one.
    """
    return func.is_view or func.overloadpacket is torch.ops.aten._unsafe_view


class _OpCounter(TorchDispatchMode):
    """Counts every ATen op dispatched while active, by name, and the
    views among them."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        self.views += _is_view(func)
        return func(*args, **(kwargs or {}))


def _classifier_loss(model: nn.Module, inputs: torch.Tensor,
                     labels: torch.Tensor) -> torch.Tensor:
    logits = model(inputs, mode='tensor') if _is_mm_classifier(
        model) else model(inputs)
    return F.cross_entropy(logits, labels)


def _is_mm_classifier(model: nn.Module) -> bool:
    return hasattr(model, 'extract_feat') and hasattr(model, 'head')


def training_footprint(model: nn.Module,
                       input_shape: Sequence[int],
                       batch_size: int = 8,
                       num_classes: int = 10,
                       seed: int = 0,
                       warmup: bool = True) -> Dict:
    """Saved bytes and ATen ops of one training forward + backward.

    The model runs in training mode on random input (cross-entropy on random
    labels); its parameters' gradients are cleared afterwards. The saved
    bytes come from the forward of one step run under a saved-tensors hook
    (its graph is then dropped: no backward is needed for them), the ops
    from another step run without it (the hook itself makes autograd
    dispatch extra ``detach`` ops).

    Args:
        model (nn.Module): An mmpretrain classifier (called with
            ``mode='tensor'``) or any module returning logits.
        input_shape (Sequence[int]): ``(C, H, W)`` of one image.
        batch_size (int): Images per step. Defaults to 8.
        num_classes (int): Range of the random labels. Defaults to 10.
        seed (int): Seed of the random input. Defaults to 0.
        warmup (bool): Run one uncounted step first, so that one-off work
            (cached interpolation matrices, lazy buffers) is not counted.
            Defaults to True.

    Returns:
        dict: ``saved_bytes`` (int, the whole batch),
        ``saved_bytes_per_image`` (float), ``ops`` (int, forward +
        backward), ``view_ops`` (int, the views among ``ops``),
        ``forward_ops`` (int) and ``ops_by_name`` (Counter).
    """
    g = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    inputs = torch.randn(batch_size, *input_shape, generator=g).to(device)
    labels = torch.randint(0, num_classes, (batch_size, ), generator=g)
    labels = labels.to(device)
    was_training = model.training
    model.train()
    storages = {}

    def pack(t):
        storage = t.untyped_storage()
        storages[(storage.data_ptr(), storage.device)] = storage.nbytes()
        return t

    try:
        if warmup:
            _classifier_loss(model, inputs, labels).backward()
            model.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = _classifier_loss(model, inputs, labels)
        # Everything saved for backward is packed by the end of the forward:
        # dropping the loss frees the graph and its saved tensors, and a
        # backward would only cost time.
        del loss
        model.zero_grad(set_to_none=True)
        counter = _OpCounter()
        with counter:
            loss = _classifier_loss(model, inputs, labels)
            forward_ops = sum(counter.ops.values())
            loss.backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    saved = sum(storages.values())
    return dict(
        saved_bytes=saved,
        saved_bytes_per_image=saved / batch_size,
        ops=sum(counter.ops.values()),
        view_ops=counter.views,
        forward_ops=forward_ops,
        ops_by_name=counter.ops)
