"""Parameters and FLOPs of a config's model, attention included.

Usage::

    python tools/analysis_tools/get_flops.py CONFIG [--shape H W]
        [--show-table] [--cfg-options KEY=VALUE ...]

Counting rules (mmengine.analysis ``FlopAnalyzer``, fvcore convention):
one multiply-add is one FLOP; batch 1; the whole classifier
(``backbone -> neck -> head``). Tracers cannot look inside
``torch.nn.functional.scaled_dot_product_attention``, so every module with an
``impl`` switch (LeMSA, LeMSAv2, MultiheadSelfAttention) is run on its
``'literal'`` path while counting: the attention matmuls appear as
``matmul`` ops and the key-axis resize of LeMSA's logit map as
``upsample_*`` ops. A handle for ``scaled_dot_product_attention`` itself
(``B·m·Nq·Nk·(d_qk + d_v)``) catches attention modules without that switch.
Handles are also added for ops mmengine does not count (bicubic resize,
avg/max pooling). Elementwise ops (GELU, softmax, additions) are not counted,
as in mmengine/fvcore; the tool lists them.
"""
import argparse
from typing import Dict, Sequence

from mmengine.analysis.print_helper import complexity_stats_table
from mmengine.config import DictAction

from lect_mm.analysis import add_shape_argument, analyze, build_model


def report(result: Dict, input_shape: Sequence[int],
           show_table: bool = False) -> str:
    lines = [
        f'Input shape: {tuple(input_shape)} (batch 1)',
        f'Params: {result["params"] / 1e6:.4f} M ({result["params"]:,})',
        f'FLOPs: {result["flops"] / 1e9:.4f} G ({result["flops"]:,}; '
        'one multiply-add = 1 FLOP)',
        f'Attention counted explicitly: {result["literal_modules"]} '
        "module(s) switched to impl='literal' for counting "
        '(SDPA hides its FLOPs from tracers).',
        'FLOPs by operator: ' + ', '.join(
            f'{op} {n / 1e6:.2f}M'
            for op, n in sorted(result['by_operator'].items(),
                                key=lambda kv: -kv[1])),
    ]
    if result['uncounted']:
        lines.append('Not counted (elementwise, as in mmengine): ' +
                     ', '.join(sorted(result['uncounted'])))
    if show_table:
        lines.append(
            complexity_stats_table(result['analyzer'], max_depth=4,
                                   show_param_shapes=False))
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Params and FLOPs of a model (attention counted on '
        'the literal path)')
    parser.add_argument('config', help='config file path')
    add_shape_argument(parser)
    parser.add_argument('--show-table', action='store_true',
                        help='print a per-module table')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings in the config, xxx=yyy format')
    args = parser.parse_args(argv)
    return args


def main(argv=None) -> Dict:
    args = parse_args(argv)
    model = build_model(args.config, args.cfg_options)
    input_shape = (3, *args.shape)
    result = analyze(model, input_shape)
    print(report(result, input_shape, args.show_table))
    return result


if __name__ == '__main__':
    main()
