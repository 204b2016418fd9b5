"""LeMSA attention paths: impl='fused' (SDPA on resized keys) vs 'literal'.

Times one LeMSA layer at each LeCT stage shape (224 input: 56×56 C64 heads 2
K14, 28×28 C128 heads 4 K7, 14×14 C192 heads 6 K2), forward (eval,
``torch.no_grad``) and forward+backward (train mode, input and parameter
gradients), in fp32 and under bf16 autocast. ``warmup`` untimed calls, then
``repeats`` timed ones; the tables give the median and the inter-quartile
range in milliseconds, and the peak memory of one call.

Two scopes (``--scopes``): ``layer`` is the whole LeMSA layer (projections,
depthwise convs, norms, pooling, query upsampler, skip: everything the
model runs); ``core`` is only the part in which the two paths differ,
:func:`lect_mm.blocks.pooled_attention.pooled_key_attention` (key-axis
resize, logits, softmax, ``A·V``), on pooled queries/keys and values laid
out as the layer lays them out (channels_last maps, a view of the value
tokens).

Peak memory is the same quantity on both devices: the largest amount of
tensor memory allocated during the call on top of what was live before it
(weights and input excluded). CUDA: ``torch.cuda.max_memory_allocated`` minus
``memory_allocated`` before the call. CPU: the allocator's own allocation and
free events, recorded by ``torch.profiler`` (``profile_memory=True``) in a
separate untimed call and summed in time order (exact tensor bytes, no RSS
or allocator-cache effects).

Examples::

    python benchmarks/lemsa.py                    # all stages, B 64
    python benchmarks/lemsa.py --stages 1 --passes fwd+bwd --precisions fp32
    python benchmarks/lemsa.py --quick --out work_dirs/bench
"""
import argparse
import sys
import traceback
from typing import Callable, Dict, List, Optional, Tuple

import torch
from common.cli import new_parser, setup
from common.memory import MEMORY_NOTE, fmt_bytes, peak_memory
from common.models import autocast
from common.report import (Report, machine_header, markdown_table, pyplot,
                           save_figure)
from common.timing import measure
from einops import rearrange

from lect_mm.blocks import LeMSA
from lect_mm.blocks.functional import IMPLS  # the two paths compared
from lect_mm.blocks.pooled_attention import pool_map, pooled_key_attention

# LeCT v1 stages (LeCT report §3): (embed_dims, num_heads, sr_ratio K,
# stride from the input image).
STAGES = {
    1: dict(embed_dims=64, num_heads=2, sr_ratio=14, stride=4),
    2: dict(embed_dims=128, num_heads=4, sr_ratio=7, stride=8),
    3: dict(embed_dims=192, num_heads=6, sr_ratio=2, stride=16),
}
PASSES = ('fwd', 'fwd+bwd')
SCOPES = {
    'layer': 'whole LeMSA layer',
    'core': 'attention core only (key-axis resize, logits, softmax, A·V: '
    'the part in which the paths differ)',
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--img-size', type=int, default=224,
                        help='image size the stage shapes derive from '
                        '(feature map = ceil(img / 4, 8, 16))')
    parser.add_argument('--stages', nargs='+', type=int, default=[1, 2, 3],
                        choices=sorted(STAGES))
    parser.add_argument('--passes', nargs='+', default=list(PASSES),
                        choices=PASSES)
    parser.add_argument('--precisions', nargs='+', default=['fp32', 'bf16'],
                        choices=['fp32', 'bf16'])
    parser.add_argument('--scopes', nargs='+', default=list(SCOPES),
                        choices=list(SCOPES),
                        help='what is timed: the whole layer and/or the '
                        'attention core (default both)')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--repeats', type=int, default=10)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.img_size = 2, 64
        args.warmup, args.repeats = 1, 1
    return args


def make_core_call(impl: str, stage: dict, hw: Tuple[int, int], args,
                   device: torch.device, precision: str,
                   pass_: str) -> Callable[[], None]:
    """The attention core on inputs laid out as LeMSA lays them out."""
    c, m, k = stage['embed_dims'], stage['num_heads'], stage['sr_ratio']
    n = hw[0] * hw[1]

    def pooled_map():  # channels_last map, as pooling the layer's maps gives
        tokens = torch.randn(args.batch_size, n, c, device=device)
        return pool_map(rearrange(tokens, 'b (h w) c -> b c h w', h=hw[0]),
                        k, None, 'avg')

    q_map, k_map = pooled_map(), pooled_map()
    v_tokens = torch.randn(args.batch_size, n, c, device=device)
    train = pass_ == 'fwd+bwd'
    dropout = torch.nn.Dropout(0.).train(train)
    leaves = (q_map, k_map, v_tokens)
    for t in leaves:
        t.requires_grad_(train)
    amp = precision == 'bf16'

    def core():
        q = rearrange(q_map, 'b (m d) h w -> b m (h w) d', m=m)
        v = rearrange(v_tokens, 'b n (m d) -> b m n d', m=m)
        out, _ = pooled_key_attention(q, k_map, v, hw, 'bilinear', c**-0.5,
                                      dropout, impl)
        return out

    if not train:
        def call():
            with torch.no_grad(), autocast(device, amp):
                core()
        return call

    def call():
        for t in leaves:
            t.grad = None
        with autocast(device, amp):
            out = core()
        out.float().sum().backward()
    return call


def make_call(impl: str, stage: dict, hw: Tuple[int, int], args,
              device: torch.device, precision: str, pass_: str,
              scope: str = 'layer') -> Callable[[], None]:
    if scope == 'core':
        return make_core_call(impl, stage, hw, args, device, precision,
                              pass_)
    module = LeMSA(
        stage['embed_dims'], stage['num_heads'], sr_ratio=stage['sr_ratio'],
        impl=impl).to(device)
    x = torch.randn(args.batch_size, hw[0] * hw[1], stage['embed_dims'],
                    device=device)
    amp = precision == 'bf16'
    if pass_ == 'fwd':
        module.eval()

        def call():
            with torch.no_grad(), autocast(device, amp):
                module(x, hw)
        return call

    module.train()
    x.requires_grad_(True)

    def call():
        module.zero_grad(set_to_none=True)
        x.grad = None
        with autocast(device, amp):
            y = module(x, hw)
        y.float().sum().backward()
    return call


def run(args, device: torch.device) -> List[Dict]:
    results = []
    for scope in args.scopes:
        for s in args.stages:
            for precision in args.precisions:
                for pass_ in args.passes:
                    results.append(
                        run_one(scope, s, precision, pass_, args, device))
    return results


def run_one(scope: str, s: int, precision: str, pass_: str, args,
            device: torch.device) -> Dict:
    """Time and measure both paths for one table row."""
    stage = STAGES[s]
    side = -(-args.img_size // stage['stride'])
    hw = (side, side)
    row = dict(scope=scope, stage=s, hw=hw, precision=precision, pass_=pass_)
    for impl in IMPLS:
        call = None
        try:
            call = make_call(impl, stage, hw, args, device, precision, pass_,
                             scope)
            row[impl] = measure(call, device, args.warmup, args.repeats)
            row[impl + '_mem'] = peak_memory(call, device)
        except Exception as err:  # noqa: BLE001 (OOM etc.)
            traceback.print_exc(file=sys.stderr)
            row[impl] = row[impl + '_mem'] = None
            row[impl + '_err'] = type(err).__name__
        finally:
            call = None
            if device.type == 'cuda':
                torch.cuda.empty_cache()
    print(f'[{scope} stage {s} {precision} {pass_} done]', file=sys.stderr,
          flush=True)
    return row


def table(results: List[Dict], args) -> str:
    rows = []
    for r in results:
        stage = STAGES[r['stage']]
        shape = (f"{r['hw'][0]}×{r['hw'][1]}, C{stage['embed_dims']}, "
                 f"m{stage['num_heads']}, K{stage['sr_ratio']}")
        cells = []
        for impl in IMPLS:
            cells.append(r[impl].ms() if r[impl] else r[impl + '_err'])
        ratio = (f"{r['literal'].median / r['fused'].median:.2f}×"
                 if r['fused'] and r['literal'] else '–')
        mems = [fmt_bytes(r[i + '_mem']) if r[i + '_mem'] is not None
                else '–' for i in IMPLS]
        rows.append([r['stage'], shape, r['precision'], r['pass_'], *cells,
                     ratio, *mems])
    return markdown_table(
        ['stage', 'shape', 'precision', 'pass', 'fused ms [IQR]',
         'literal ms [IQR]', 'literal / fused', 'fused peak',
         'literal peak'], rows, align='rlllrrrrr')


def plot(results: List[Dict], path: Optional[str], title: str) -> None:
    plt = pyplot(path) if path else None
    if plt is None:
        return

    precisions = list(dict.fromkeys(r['precision'] for r in results))
    fig, axes = plt.subplots(1, len(precisions), squeeze=False, dpi=120,
                             figsize=(5.5 * len(precisions), 4))
    for ax, precision in zip(axes[0], precisions):
        rows = [r for r in results if r['precision'] == precision]
        labels = [f"S{r['stage']} {r['pass_']}" for r in rows]
        width = 0.38
        for i, impl in enumerate(IMPLS):
            xs = [j + (i - 0.5) * width for j in range(len(rows))]
            med = [r[impl].median * 1e3 if r[impl] else 0 for r in rows]
            err = [[(r[impl].median - r[impl].q1) * 1e3 if r[impl] else 0
                    for r in rows],
                   [(r[impl].q3 - r[impl].median) * 1e3 if r[impl] else 0
                    for r in rows]]
            ax.bar(xs, med, width, yerr=err, capsize=2, label=impl)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=30, ha='right', fontsize=8)
        ax.set_ylabel('median time per call (ms), IQR bars')
        ax.set_title(f'{title}, {precision}', fontsize=9)
        ax.grid(True, axis='y', alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(plt, fig, path)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = setup(args)
    report = Report('lemsa', args.out)
    report.add(machine_header(device, 'LeMSA: fused (SDPA) vs literal'))
    report.add(f'- batch {args.batch_size}, input {args.img_size}², warm-up '
               f'{args.warmup}, repeats {args.repeats}'
               + (' (--quick: numbers meaningless)' if args.quick else ''))
    report.add(f'- {MEMORY_NOTE[device.type]}')
    if device.type == 'cpu':
        report.add('- CPU timings are wall time and share the cores with '
                   'whatever else runs (see the load average above)')
    report.add('')
    results = run(args, device)
    for scope in args.scopes:
        rows = [r for r in results if r['scope'] == scope]
        report.add(f'### {SCOPES[scope][0].upper()}{SCOPES[scope][1:]}')
        report.add('')
        report.add(table(rows, args))
        report.add('')
        name = 'lemsa.png' if scope == 'layer' else f'lemsa_{scope}.png'
        plot(rows, report.path(name),
             f'LeMSA {scope} B{args.batch_size} ({device.type})')
    report.save()


if __name__ == '__main__':
    main()
