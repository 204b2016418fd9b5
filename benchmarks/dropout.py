"""Dropout in a LeCT training step: ``nn.Dropout`` vs ``FastDropout``.

LeCT's recipe drops 10 % of every LeMSA and LeFFN output (LeCT report,
Appendix). On the CPU, ``nn.Dropout`` draws its mask with ``bernoulli_``, one
single-threaded float draw per element; ``FastDropout`` draws 15-bit integers,
two per 32-bit draw (see its docstring). Off the CPU both are ``F.dropout``.

Two tables:

* every dropout call of one LeCT training forward (the shapes recorded from
  the model itself, in its memory layout), forward+backward of the dropout
  alone, ``nn.Dropout`` vs ``FastDropout``;
* the whole training step (``common.models.TrainStep``: forward, cross-entropy,
  mmengine optim wrapper) of the same model with its dropouts swapped
  between the two classes (same weights), timed in turns.

Examples::

    python benchmarks/dropout.py --device cpu --batch-size 8
    python benchmarks/dropout.py --models 'LeCT v2' --batch-size 64
    python benchmarks/dropout.py --quick
"""
import argparse
import copy
from typing import List, Tuple

import torch
import torch.nn as nn
from common.cli import add_model_args, new_parser, resolve_models, setup
from common.models import (TrainStep, build_classifier, num_classes_of,
                           synthetic_samples)
from common.report import Report, machine_header, markdown_table
from common.timing import measure_interleaved

from lect_mm.blocks import FastDropout


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    add_model_args(parser, default=('LeCT', ))
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.img_size = 2, 64
        args.warmup, args.repeats = 1, 1
    return args


def dropout_calls(model: nn.Module, inputs: torch.Tensor,
                  samples: list) -> List[Tuple[str, float, torch.Tensor]]:
    """(module name, p, an input like the recorded one) of every dropout
    call with ``p > 0`` in one training forward."""
    calls = []
    hooks = [
        m.register_forward_pre_hook(
            lambda mod, args, name=name: calls.append(
                (name, mod.p, torch.empty_like(args[0]).normal_())))
        for name, m in model.named_modules()
        if isinstance(m, nn.Dropout) and m.p > 0
    ]
    try:
        model(inputs, samples, mode='loss')
    finally:
        for h in hooks:
            h.remove()
    return calls


def with_torch_dropout(model: nn.Module) -> Tuple[nn.Module, int]:
    """A copy of ``model`` whose ``FastDropout`` modules are ``nn.Dropout``."""
    model = copy.deepcopy(model)
    swapped = 0
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, FastDropout):
                setattr(parent, name, nn.Dropout(child.p))
                swapped += 1
    return model, swapped


def fwd_bwd(module: nn.Module, x: torch.Tensor):
    x = x.detach().requires_grad_()
    y = module(x)
    y.backward(torch.ones_like(y))
    return x.grad


def layout(x: torch.Tensor) -> str:
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return 'channels_last'
    return 'contiguous' if x.is_contiguous() else 'strided'


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('dropout', args.out)
    report.add(machine_header(device, 'Dropout: nn.Dropout vs FastDropout'))
    report.add(f'- batch {args.batch_size}, {args.img_size}², fp32, warm-up '
               f'{args.warmup}, repeats {args.repeats}, timed in turns; '
               'medians [IQR] in ms'
               + (' (--quick: numbers meaningless)' if args.quick else ''))
    report.add('')
    models = resolve_models(args.models or ['LeCT'], args.quick)
    for name, config in models.items():
        model = build_classifier(config).to(device).train()
        samples = synthetic_samples(args.batch_size, num_classes_of(model),
                                    device)
        inputs = torch.randn(args.batch_size, 3, args.img_size,
                             args.img_size, device=device)
        torch_model, swapped = with_torch_dropout(model)

        calls = dropout_calls(model, inputs, samples)
        if not calls:
            report.add(f'### {name}: no dropout with p > 0, skipped')
            report.add('')
            continue
        rows, total = [], [0., 0.]
        for call, p, x in calls:
            stats = measure_interleaved(
                [lambda: fwd_bwd(nn.Dropout(p), x),
                 lambda: fwd_bwd(FastDropout(p), x)],
                device, args.warmup, args.repeats)
            total[0] += stats[0].median
            total[1] += stats[1].median
            rows.append([
                call, 'x'.join(map(str, x.shape)), layout(x), p,
                stats[0].ms(), stats[1].ms(),
                f'{stats[0].median / stats[1].median:.2f}×'
            ])
        rows.append([
            '**sum**', '', '', '', f'{total[0] * 1e3:.2f}',
            f'{total[1] * 1e3:.2f}', f'{total[0] / max(total[1], 1e-12):.2f}×'
        ])
        report.add(f'### {name}: each dropout call, forward+backward')
        report.add('')
        report.add(markdown_table([
            'module', 'input shape', 'layout', 'p', 'nn.Dropout ms',
            'FastDropout ms', 'speed-up'
        ], rows, align='lllrrrr'))
        report.add('')

        step_torch = TrainStep(torch_model, device)
        step_fast = TrainStep(model, device)
        stats = measure_interleaved(
            [lambda: step_torch(inputs, samples),
             lambda: step_fast(inputs, samples)], device, args.warmup,
            args.repeats)
        report.add(f'### {name}: whole training step ({swapped} dropout '
                   'modules swapped)')
        report.add('')
        report.add(markdown_table(
            ['dropout', 'step ms', 'speed-up'],
            [['nn.Dropout', stats[0].ms(), '1.00×'],
             ['FastDropout', stats[1].ms(),
              f'{stats[0].median / stats[1].median:.2f}×']]))
        report.add('')
    report.save()
    return report


if __name__ == '__main__':
    main()
