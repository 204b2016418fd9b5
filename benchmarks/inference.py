"""Inference throughput of the report's models (Table 2).

Images/s at batch 1 (latency-bound) and batch 64 (throughput-bound), in
fp32 and under bf16 autocast, eval mode, ``torch.inference_mode``, 224×224
random input on the device (no data loading). Median and IQR over the timed
batches; the last column is the batch-64 fp32 rate relative to the report's
ResNet.

Examples::

    python benchmarks/inference.py
    python benchmarks/inference.py --models LeCT ViT --channels-last
    python benchmarks/inference.py --quick
"""
import argparse
import gc
import sys
import traceback
from typing import Dict, List

import torch
from common.cli import (add_model_args, layout_flags, new_parser,
                        resolve_models, setup)
from common.models import (REFERENCE_MODEL, build_classifier, compile_model,
                           inference_call)
from common.report import Report, machine_header, markdown_table
from common.timing import measure

from lect_mm.analysis import count_params


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    add_model_args(parser)
    parser.add_argument('--batch-sizes', nargs='+', type=int,
                        default=[1, 64])
    parser.add_argument('--precisions', nargs='+', default=['fp32', 'bf16'],
                        choices=['fp32', 'bf16'])
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--channels-last', action='store_true')
    parser.add_argument('--compile', action='store_true',
                        help='torch.compile the backbone and neck')
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_sizes = [1, 2]
        args.img_size = 64
        args.warmup, args.repeats = 1, 2
    return args


def run_model(config: str, args, device: torch.device) -> Dict:
    model = build_classifier(config).to(device).eval()
    params = count_params(model)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.compile:
        compile_model(model)
    rates = {}
    for bs in args.batch_sizes:
        x = torch.randn(bs, 3, args.img_size, args.img_size, device=device)
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for prec in args.precisions:
            rates[(bs, prec)] = measure(
                inference_call(model, x, device, prec == 'bf16'), device,
                args.warmup, args.repeats)
    del model
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    if args.compile:
        torch._dynamo.reset()
    return dict(params=params, stats=rates)


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('inference', args.out)
    report.add(machine_header(device, 'Inference throughput'))
    models = resolve_models(args.models, args.quick)
    results = {}
    for name, config in models.items():
        print(f'[{name}] {config}', file=sys.stderr, flush=True)
        try:
            results[name] = run_model(config, args, device)
        except Exception as err:  # noqa: BLE001  (report and go on)
            traceback.print_exc()
            results[name] = dict(error=f'{type(err).__name__}: {err}')

    keys = [(bs, p) for bs in args.batch_sizes for p in args.precisions]
    big = (max(args.batch_sizes), args.precisions[0])
    ref = results.get(REFERENCE_MODEL, {}).get('stats', {}).get(big)
    rows: List[list] = []
    for name, res in results.items():
        if 'error' in res:
            rows.append([name, 'failed: ' + res['error'][:120]] + [''] *
                        len(keys) + [''])
            continue
        cells = [res['stats'][k].rate(k[0]) for k in keys]
        ratio = (f'{ref.median / res["stats"][big].median:.2f}'
                 if ref else 'n/a')
        rows.append([name, f'{res["params"] / 1e6:.3f}'] + cells + [ratio])
    flags = [f'{args.img_size}²', 'eval', 'inference_mode']
    flags += layout_flags(args)
    report.add(f'### Inference images/s ({", ".join(flags)})')
    report.add()
    report.add(
        markdown_table(['Model', 'Params (M)'] +
                       [f'bs {bs} {p}' for bs, p in keys] +
                       [f'× {REFERENCE_MODEL} (bs {big[0]} {big[1]})'],
                       rows))
    report.add()
    report.add(f'Images/s, median [IQR] over {args.repeats} timed batches '
               f'after {args.warmup} warm-up batches; bf16 = autocast.')
    report.add()
    report.save()
    return report


if __name__ == '__main__':
    main()
