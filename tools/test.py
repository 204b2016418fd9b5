"""Test (evaluate) a checkpoint: mmpretrain's ``tools/test.py`` command line,
working on the CPU too (see :mod:`lect_mm.engine`)."""
import argparse

import lect_mm  # noqa: F401,I001  (first: registers modules, quiets warnings)
import mmengine
from mmengine.config import Config, DictAction
from mmengine.evaluator import DumpResults

from lect_mm.engine.cli import (exit_launched_process, parse_launcher_args,
                                runner_context, set_dataloader_defaults,
                                set_work_dir)
from lect_mm.engine.errors import merge_cfg_options


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Test (and evaluate) a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir',
        help='the dir to save the evaluation metrics; defaults to '
        './work_dirs/<config name>')
    parser.add_argument(
        '--out', help='dump the results (see --out-item) to this file')
    parser.add_argument(
        '--out-item',
        choices=['metrics', 'pred'],
        help='what --out holds: the metrics or the predictions (default)')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='mixed-precision test (float16 on GPUs, bfloat16 on CPUs)')
    parser.add_argument(
        '--no-pin-memory',
        action='store_true',
        help='disable the pin_memory option of the dataloader')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value pairs merged into '
        'it; lists as key="[a,b]" or key=a,b')
    args = parse_launcher_args(parser, argv)
    if args.out is None and args.out_item is not None:
        parser.error('--out-item needs --out')
    return args


def merge_args(cfg, args):
    """Merge the command-line arguments into the config."""
    cfg.launcher = args.launcher
    set_work_dir(cfg, args.work_dir, args.config)
    cfg.load_from = args.checkpoint
    # Testing may share the work dir of a training that is running.
    cfg.lock_work_dir = False

    if args.amp:
        cfg.test_cfg.fp16 = True

    set_dataloader_defaults(
        cfg, ('test_dataloader', ), pin_memory=not args.no_pin_memory)

    merge_cfg_options(cfg, args.cfg_options)
    return cfg


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg = merge_args(cfg, args)

    with runner_context(cfg) as runner:
        if args.out and args.out_item in ('pred', None):
            runner.test_evaluator.metrics.append(
                DumpResults(out_file_path=args.out))

        metrics = runner.test()

        if args.out and args.out_item == 'metrics':
            mmengine.dump(metrics, args.out)
    return metrics


if __name__ == '__main__':
    exit_launched_process(main)
