"""Build the runner of the tiny Digits config of the engine tests and
read what its runs logged."""
import json
import os
import os.path as osp
import signal
import time

import lect_mm  # noqa: F401
import pytest
from mmengine.config import Config
from mmengine.registry import RUNNERS

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
    """The runner the tiny config names (``LectRunner``)."""
    return RUNNERS.build(tiny_cfg(work_dir, name, **options))


def final_state(runner):
    """A copy of the trained model's state dict."""
    return {k: v.detach().clone()
            for k, v in runner.model.state_dict().items()}


def logged_losses(work_dir):
    """{step: loss} of every training iteration logged under ``work_dir``
    (all runs in it; a step logged twice must log the same loss)."""
    losses = {}
    for root, _, files in os.walk(work_dir):
        if 'scalars.json' not in files:
            continue
        with open(osp.join(root, 'scalars.json')) as f:
            for line in f:
                record = json.loads(line)
                if 'loss' in record:
                    step = record['step']
                    assert losses.setdefault(step, record['loss']) == \
                        record['loss'], f'step {step} logged twice, unequal'
    return losses


def import_what_runs_import():
    """Import what a run imports on first use: mmengine's visualizer
    imports matplotlib, its environment report distutils, and the
    ``mmpretrain`` scope the modules of its registries. A test calls this
    before it forks a run, so that the child finds them imported, as the
    forking tests intend: a child that imports them itself spends about
    half a second of CPU on it, again in every child."""
    from distutils import errors  # noqa: F401

    from matplotlib import figure  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)


def wait_for_child(pid, timeout=300):
    """The exit status of the forked child ``pid``; a child still running
    after ``timeout`` seconds is killed and the test fails."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail('the child run did not finish')
        time.sleep(0.02)
