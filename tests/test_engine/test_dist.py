"""CPU distributed set-up (the 2-process run is in
tests/test_tools/test_train_test_cli.py)."""
import socket

import pytest
import torch
import torch.distributed as torch_dist
from mmengine.config import Config

from lect_mm.launch import (distributed_context, setup_cpu_distributed,
                            teardown_distributed)

cpu_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason='tests the CPU path')


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_no_launcher_changes_nothing():
    cfg = Config(dict(launcher='none', env_cfg=dict(
        dist_cfg=dict(backend='nccl'))))
    assert not setup_cpu_distributed(cfg)
    assert cfg.env_cfg.dist_cfg.backend == 'nccl'
    assert 'model_wrapper_cfg' not in cfg
    assert not torch_dist.is_initialized()


@cpu_only
def test_pytorch_launcher_on_cpu_uses_gloo_and_cpu_ddp(monkeypatch):
    for key, value in dict(
            RANK='0', WORLD_SIZE='1', LOCAL_RANK='0',
            MASTER_ADDR='127.0.0.1', MASTER_PORT=str(_free_port())).items():
        monkeypatch.setenv(key, value)
    cfg = Config(dict(launcher='pytorch', find_unused_parameters=True,
                      env_cfg=dict(dist_cfg=dict(backend='nccl'))))
    try:
        with distributed_context(cfg):
            assert torch_dist.is_initialized()
            assert torch_dist.get_backend() == 'gloo'
            assert cfg.env_cfg.dist_cfg.backend == 'gloo'
            # torch 2.14 deprecates broadcast_buffers (a warning on every
            # rank) for forward_sync_buffers
            assert cfg.model_wrapper_cfg == dict(
                type='MMDistributedDataParallel', device_ids=None,
                forward_sync_buffers=False, find_unused_parameters=True)
        assert not torch_dist.is_initialized()
    finally:
        teardown_distributed()


@cpu_only
def test_user_ddp_wrapper_gets_no_device_ids(monkeypatch):
    for key, value in dict(
            RANK='0', WORLD_SIZE='1', LOCAL_RANK='0',
            MASTER_ADDR='127.0.0.1', MASTER_PORT=str(_free_port())).items():
        monkeypatch.setenv(key, value)
    # No env_cfg at all in this config.
    cfg = Config(dict(launcher='pytorch', model_wrapper_cfg=dict(
        type='MMDistributedDataParallel', find_unused_parameters=True)))
    try:
        assert setup_cpu_distributed(cfg)
        assert cfg.model_wrapper_cfg.device_ids is None
        assert cfg.model_wrapper_cfg.find_unused_parameters
        assert cfg.env_cfg.dist_cfg.backend == 'gloo'
    finally:
        teardown_distributed()
