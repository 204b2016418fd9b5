"""Build a ``Runner`` for the tiny Digits config of the engine tests."""
import os.path as osp

import lect_mm  # noqa: F401
from mmengine.config import Config
from mmengine.runner import Runner

TINY_CONFIG = osp.join(osp.dirname(__file__), 'data', 'tiny_digits.py')


def tiny_cfg(work_dir, name, **options):
    """The tiny config with ``work_dir``, a unique ``experiment_name`` (the
    runner's logger and message hub are global instances keyed by it) and
    ``--cfg-options``-style overrides."""
    cfg = Config.fromfile(TINY_CONFIG)
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = name
    cfg.merge_from_dict(options)
    return cfg


def tiny_runner(work_dir, name, **options):
    return Runner.from_cfg(tiny_cfg(work_dir, name, **options))
