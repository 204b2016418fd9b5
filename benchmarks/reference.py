"""lect_mm's LeCT against a reference-layout LeCT: same weights, same outputs.

The reference is ``tests/reference/lect_reference.py``: a plain-``torch.nn``
LeCT written from the LeCT report in the author's layout (state_dict keys of
the reference checkpoints, literal attention: pooled logits resized along the
key axis, ``nn.Upsample`` resizes, channels-first maps). It is not the
author's code, which is not available here; it is the straightforward
implementation of the same network. For each variant the script

1. fills the reference with random weights, converts them with
   :func:`lect_mm.models.convert.convert_lect_ref` (the key map of
   ``tools/model_converters/lect_ref2mmpretrain.py``) and loads them into
   lect_mm's classifier of ``configs/_base_/models/lect_<variant>.py``
   (strict);
2. checks the logits agree (eval mode, the largest absolute difference);
3. times one training step of each, both the same way (forward,
   cross-entropy, then mmengine's optim wrapper: backward, clip 5, AdamW),
   dropout and drop path off in lect_mm because the reference has none;
4. times inference (eval, ``torch.inference_mode``).

Examples::

    python benchmarks/reference.py                       # v1, v2, v3, B 64
    python benchmarks/reference.py --device cpu --batch-size 8
    python benchmarks/reference.py --quick
"""
import argparse
import importlib.util
import os.path as osp
import sys
from typing import Dict

import torch
import torch.nn.functional as F
from common import REPO_ROOT
from common.cli import new_parser, setup
from common.models import build_classifier, build_report_optim_wrapper
from common.report import Report, machine_header, markdown_table
from common.timing import measure_interleaved

from lect_mm.engine.loading import load_state_dict_checked
from lect_mm.models.convert import convert_lect_ref

VARIANTS = ('v1', 'v2', 'v3')


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=VARIANTS)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--repeats', type=int, default=10)
    args = parser.parse_args(argv)
    if args.quick:
        # The reference only serves 224 (nn.Upsample by K and a v3
        # upsampler built for one grid): keep 224, shrink the rest.
        args.variants, args.batch_size = ['v1'], 1
        args.warmup, args.repeats = 0, 1
    return args


def load_reference_module():
    """``tests/reference/lect_reference.py`` (a test file, not a module)."""
    path = osp.join(REPO_ROOT, 'tests', 'reference', 'lect_reference.py')
    spec = importlib.util.spec_from_file_location('lect_reference', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_pair(variant: str, num_classes: int = 10):
    """The reference (random weights) and lect_mm's model with them."""
    reference = load_reference_module()
    ref = reference.randomize_(
        reference.ReferenceLeCT(variant, num_classes=num_classes), seed=1)
    ours = build_classifier(
        f'configs/_base_/models/lect_{variant}.py', {
            'model.backbone.drop_rate': 0.,
            'model.backbone.drop_path_rate': 0.,
            'model.head.num_classes': num_classes
        })
    load_state_dict_checked(ours, convert_lect_ref(ref.state_dict(), variant),
                            'The converted reference', strict=True,
                            opt_out='')
    return ref, ours


class PlainStep:
    """forward → cross-entropy → the report's optim wrapper
    (``update_params``: backward, clip 5, AdamW), for any model that
    returns logits from ``forward_fn()``."""

    def __init__(self, model, forward_fn, labels):
        self.forward_fn, self.labels = forward_fn, labels
        self.optim_wrapper = build_report_optim_wrapper(
            model, labels.device)

    def __call__(self):
        self.optim_wrapper.update_params(
            F.cross_entropy(self.forward_fn(), self.labels))


def run_variant(variant: str, args, device: torch.device) -> Dict:
    ref, ours = build_pair(variant)
    ref, ours = ref.to(device), ours.to(device)
    x = torch.randn(args.batch_size, 3, 224, 224, device=device)
    labels = torch.arange(args.batch_size, device=device) % 10

    ref.eval()
    ours.eval()
    with torch.inference_mode():
        probe = x[:2]
        diff = (ref(probe) - ours(probe, mode='tensor')).abs().max().item()

    def inference(fn):
        def call():
            with torch.inference_mode():
                fn()
        return call

    # In turns (reference, lect_mm, reference, ...): a drift of the
    # machine's load hits both alike.
    inf_ref, inf_ours = measure_interleaved(
        [inference(lambda: ref(x)),
         inference(lambda: ours(x, mode='tensor'))], device, args.warmup,
        args.repeats)

    ref.train()
    ours.train()
    train_ref, train_ours = measure_interleaved(
        [PlainStep(ref, lambda: ref(x), labels),
         PlainStep(ours, lambda: ours(x, mode='tensor'), labels)], device,
        args.warmup, args.repeats)
    print(f'[{variant} done]', file=sys.stderr, flush=True)
    return dict(diff=diff, train_ref=train_ref, train_ours=train_ours,
                inf_ref=inf_ref, inf_ours=inf_ours)


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('reference', args.out)
    report.add(machine_header(
        device, 'lect_mm LeCT vs a reference-layout LeCT (same weights)'))
    report.add(f'- batch {args.batch_size}, 224², fp32, warm-up '
               f'{args.warmup}, repeats {args.repeats}'
               + (' (--quick: numbers meaningless)' if args.quick else ''))
    report.add('- reference: tests/reference/lect_reference.py, written '
               'from the LeCT report in the author\'s checkpoint layout '
               '(literal '
               'attention, nn.Upsample, channels-first maps); not the '
               'author\'s code')
    report.add('')
    rows = []
    for variant in args.variants:
        r = run_variant(variant, args, device)
        n = args.batch_size
        rows.append([
            f'LeCT {variant}', f'{r["diff"]:.1e}',
            r['train_ref'].ms(), r['train_ours'].ms(),
            f'{r["train_ref"].median / r["train_ours"].median:.2f}×',
            r['inf_ref'].rate(n), r['inf_ours'].rate(n),
            f'{r["inf_ref"].median / r["inf_ours"].median:.2f}×'
        ])
    report.add(markdown_table([
        'model', 'max abs Δ logits', 'train step ms, reference',
        'train step ms, lect_mm', 'speed-up', 'inference img/s, reference',
        'inference img/s, lect_mm', 'speed-up'
    ], rows, align='lrrrrrrr'))
    report.add('')
    report.add('Same weights in both (converted by '
               'lect_mm.models.convert.convert_lect_ref, loaded '
               'strictly); the difference is of the eval-mode logits on two '
               'images. Train step: the same for both (forward, '
               'cross-entropy, mmengine optim wrapper: backward, clip 5, '
               'AdamW), dropout and drop '
               'path off in lect_mm as the reference has none. The two are '
               'timed in turns; medians [IQR].')
    report.add('')
    report.save()
    return report


if __name__ == '__main__':
    main()
