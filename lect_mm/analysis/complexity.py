"""Parameters and FLOPs of a model, attention included.

Counting rules (mmengine.analysis ``FlopAnalyzer``, fvcore convention): one
multiply-add is one FLOP; batch 1; the whole classifier
(``backbone -> neck -> head``). Tracers cannot look inside
``torch.nn.functional.scaled_dot_product_attention``, so every module with an
``impl`` switch (LeMSA, LeMSAv2, MultiheadSelfAttention) runs on its
``'literal'`` path while counting: the attention matmuls appear as ``matmul``
ops and the key-axis resize of LeMSA's logit map as ``upsample_*`` ops. A
handle for ``scaled_dot_product_attention`` itself
(``B·m·Nq·Nk·(d_qk + d_v)``) catches attention modules without that switch.
Handles are also added for ops mmengine does not count (bicubic resize,
avg/max pooling). Elementwise ops (GELU, softmax, additions) are not counted,
as in mmengine/fvcore.
"""
import argparse
import contextlib
import logging
from math import prod
from typing import Dict, Iterator, Sequence

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import elementwise_flop_counter, get_shape
from mmengine.config import Config

from lect_mm.blocks.pooled_attention import \
    LEMSA_IMPLS as IMPL_CHOICES  # ⊇ IMPLS


def sdpa_flop_jit(inputs, outputs) -> int:
    """FLOPs of ``scaled_dot_product_attention``: q·kᵀ plus attn·v."""
    q_shape, k_shape, v_shape = (get_shape(v) for v in inputs[:3])
    *batch, num_q, dim_qk = q_shape
    num_k, dim_v = k_shape[-2], v_shape[-1]
    return prod(batch) * num_q * num_k * (dim_qk + dim_v)


EXTRA_HANDLES = {
    'aten::scaled_dot_product_attention': sdpa_flop_jit,
    'aten::upsample_bicubic2d': elementwise_flop_counter(0, 16),
    'aten::avg_pool2d': elementwise_flop_counter(1, 0),
    'aten::max_pool2d': elementwise_flop_counter(1, 0),
    'aten::adaptive_max_pool2d': elementwise_flop_counter(1, 0),
}


@contextlib.contextmanager
def literal_attention(model: nn.Module) -> Iterator[int]:
    """Run every attention module with an ``impl`` switch on ``'literal'``.

    Yields the number of modules switched; restores their ``impl`` on exit.
    """
    saved = {
        m: m.impl
        for m in model.modules()
        if getattr(m, 'impl', None) in IMPL_CHOICES
    }
    for m in saved:
        m.impl = 'literal'
    try:
        yield len(saved)
    finally:
        for m, impl in saved.items():
            m.impl = impl


def analyze(model: nn.Module, input_shape: Sequence[int]) -> Dict:
    """Count FLOPs of ``model`` on one random input of ``input_shape``.

    Args:
        model (nn.Module): The model; called as ``model(x)``.
        input_shape (Sequence[int]): ``(C, H, W)`` of one image.

    Returns:
        dict: ``flops`` (int), ``by_operator`` (dict), ``uncounted`` (dict of
        op -> calls), ``literal_modules`` (int), ``params`` (int),
        ``analyzer`` (the FlopAnalyzer).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    inputs = (torch.randn(1, *input_shape, device=device), )
    try:
        with literal_attention(model) as switched, torch.no_grad():
            analyzer = FlopAnalyzer(model, inputs)
            analyzer.set_op_handle(**EXTRA_HANDLES)
            analyzer.unsupported_ops_warnings(False)
            analyzer.uncalled_modules_warnings(False)
            analyzer.tracer_warnings('none')
            flops = analyzer.total()
            by_op = dict(analyzer.by_operator())
            uncounted = dict(analyzer.unsupported_ops())
    finally:
        model.train(was_training)
    return dict(flops=flops, by_operator=by_op, uncounted=uncounted,
                literal_modules=switched, params=parameter_count(model)[''],
                analyzer=analyzer)


def count_flops(model: nn.Module, input_shape: Sequence[int]) -> int:
    """FLOPs of one ``(C, H, W)`` image, attention on the literal path."""
    return analyze(model, input_shape)['flops']


def build_model(config: str, cfg_options=None) -> nn.Module:
    """Build a config's model (registries of lect_mm via custom_imports)."""
    from mmpretrain.apis import get_model
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return get_model(cfg)


def init_weights_quietly(model: nn.Module) -> nn.Module:
    """``model.init_weights()`` without its INFO line per parameter (the
    current MMLogger at WARNING meanwhile); returns the model."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    return model


def count_params(model: nn.Module) -> int:
    """All parameters of the model, frozen ones included."""
    return sum(p.numel() for p in model.parameters())


def add_shape_argument(parser: argparse.ArgumentParser) -> None:
    """Add the tools' ``--shape H W`` (or one side of a square; default
    224 224) to ``parser``; the parsed value is ``[H, W]``."""

    class ShapeAction(argparse.Action):

        def __call__(self, parser, namespace, values, option_string=None):
            if len(values) not in (1, 2):
                parser.error(f'{option_string} takes H W or one side, got '
                             f'{values}')
            setattr(namespace, self.dest, list(values) * (3 - len(values)))

    parser.add_argument(
        '--shape', type=int, nargs='+', default=[224, 224],
        action=ShapeAction, help='input size: H W, or one value for a square')
