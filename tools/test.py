"""Test (evaluate) a checkpoint: mmpretrain's ``tools/test.py`` command line
(every option, with the same meaning), working on the CPU too (see
:mod:`lect_mm.engine`)."""
import argparse
from copy import deepcopy

import lect_mm  # noqa: F401,I001  (first: registers modules, lect_mm::)
import mmengine
from mmengine.config import ConfigDict, DictAction
from mmengine.evaluator import DumpResults

from lect_mm.cli import (exit_launched_process, load_config, merge_cfg_options,
                         parse_launcher_args, runner_context,
                         set_dataloader_defaults, set_work_dir)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Test (and evaluate) a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir',
        help='the dir under which the evaluation writes its own folder, '
        '<timestamp>/ (log, metrics, config copy), leaving what else is '
        'there untouched; defaults to ./work_dirs/<config name>')
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
        '--show-dir',
        help='save a picture of each visualised prediction into this folder '
        '(mmpretrain\'s VisualizationHook)')
    parser.add_argument(
        '--show',
        action='store_true',
        help='display the predictions in a window')
    parser.add_argument(
        '--interval',
        type=int,
        default=1,
        help='visualise every INTERVAL-th sample')
    parser.add_argument(
        '--wait-time',
        type=float,
        default=2,
        help='seconds each --show window stays open')
    parser.add_argument(
        '--no-pin-memory',
        action='store_true',
        help='disable the pin_memory option of the dataloader')
    parser.add_argument(
        '--tta',
        action='store_true',
        help='test-time augmentation: the config\'s tta_pipeline and '
        'tta_model, else flip TTA averaging the classification scores')
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
    # Testing may share the work dir of a training, running or not: no
    # lock, and everything goes into this run's own folder,
    # <work_dir>/<timestamp>/ (the config copy too).
    cfg.lock_work_dir = False
    cfg.log_dir_only = True

    if args.amp:
        cfg.test_cfg.fp16 = True

    if args.show or args.show_dir is not None:
        if 'visualization' not in cfg.get('default_hooks', {}):
            raise ValueError(
                '--show/--show-dir need a VisualizationHook: add '
                "default_hooks.visualization=dict(type='VisualizationHook') "
                'to the config.')
        cfg.default_hooks.visualization.update(
            enable=True, show=args.show, wait_time=args.wait_time,
            out_dir=args.show_dir, interval=args.interval)

    if args.tta:
        merge_tta(cfg)

    set_dataloader_defaults(
        cfg, ('test_dataloader', ), pin_memory=not args.no_pin_memory)

    # merge_tta reads tta_model and tta_pipeline
    merge_cfg_options(cfg, args.cfg_options,
                      reads=('tta_model', 'tta_pipeline'))
    return cfg


def merge_tta(cfg):
    """Test with ``cfg.tta_pipeline`` and ``cfg.tta_model`` (mmpretrain's
    ``--tta``): by default the test pipeline with a flipped and an
    unflipped view, their classification scores averaged."""
    if 'tta_model' not in cfg:
        cfg.tta_model = dict(type='mmpretrain.AverageClsScoreTTA')
    if 'tta_pipeline' not in cfg:
        test_pipeline = cfg.test_dataloader.dataset.pipeline
        cfg.tta_pipeline = deepcopy(test_pipeline)
        cfg.tta_pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[
                dict(type='RandomFlip', prob=1.),
                dict(type='RandomFlip', prob=0.)
            ], [test_pipeline[-1]]])
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config)
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
