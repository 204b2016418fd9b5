"""Test (evaluate) a checkpoint: mmpretrain's ``tools/test.py`` command line,
working on the CPU too (see :mod:`lect_mm.engine`)."""
import argparse
import os
import os.path as osp

import lect_mm  # noqa: F401,I001  (first: registers modules, quiets warnings)
from lect_mm import silence_known_log_messages
import mmengine
from mmengine.config import Config, DictAction
from mmengine.device import get_device
from mmengine.evaluator import DumpResults
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from lect_mm.engine import (LAUNCHERS, distributed_context,
                            explain_config_errors)


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
    parser.add_argument(
        '--launcher', choices=LAUNCHERS, default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    if args.out is None and args.out_item is not None:
        parser.error('--out-item needs --out')
    return args


def merge_args(cfg, args):
    """Merge the command-line arguments into the config."""
    cfg.launcher = args.launcher

    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])

    cfg.load_from = args.checkpoint

    if args.amp:
        cfg.test_cfg.fp16 = True

    if cfg.get('test_dataloader', None) is not None:
        loader = cfg.test_dataloader
        # Pinned memory only helps copies to an accelerator.
        pin_memory = not args.no_pin_memory and get_device() != 'cpu'
        loader.setdefault('collate_fn', dict(type='default_collate'))
        loader.setdefault('pin_memory', pin_memory)
        if args.no_pin_memory:
            loader.pin_memory = False

    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    return cfg


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg = merge_args(cfg, args)

    with distributed_context(cfg), explain_config_errors(cfg):
        if 'runner_type' not in cfg:
            runner = Runner.from_cfg(cfg)
        else:
            runner = RUNNERS.build(cfg)
        silence_known_log_messages(runner.logger)

        if args.out and args.out_item in ('pred', None):
            runner.test_evaluator.metrics.append(
                DumpResults(out_file_path=args.out))

        metrics = runner.test()

        if args.out and args.out_item == 'metrics':
            mmengine.dump(metrics, args.out)
    return metrics


if __name__ == '__main__':
    main()
