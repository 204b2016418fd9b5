"""Distributed training that also works without CUDA (gloo on the CPU).

mmengine 0.10.7 assumes a GPU per process whenever a launcher is used: its
``init_dist`` calls ``torch.cuda.set_device`` and its ``Runner`` wraps the
model in DDP with ``device_ids=[LOCAL_RANK]``, both of which fail on a CPU
machine. It also never destroys the process group, and a gloo group torn
down by interpreter shutdown aborts the process now and then, after
training has finished. :func:`distributed_context` fixes both from the
outside, leaving mmengine's accelerator path as it is.
"""
import datetime
import inspect
import os
import subprocess
from contextlib import contextmanager

import torch.distributed as torch_dist
from mmengine.config import Config
from mmengine.device import get_device
from mmpretrain.registry import MODEL_WRAPPERS
from torch.nn.parallel import DistributedDataParallel

LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


def _set_env_from_launcher(launcher: str, port=None) -> None:
    """Set ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_*`` like mmengine's
    ``init_dist`` does for each launcher (torchrun sets them itself)."""
    if launcher == 'slurm':
        node_list = os.environ['SLURM_NODELIST']
        os.environ['RANK'] = os.environ['SLURM_PROCID']
        os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
        os.environ['LOCAL_RANK'] = os.environ.get('SLURM_LOCALID', '0')
        if port is not None:
            os.environ['MASTER_PORT'] = str(port)
        os.environ.setdefault('MASTER_PORT', '29500')
        if 'MASTER_ADDR' not in os.environ:
            os.environ['MASTER_ADDR'] = subprocess.getoutput(
                f'scontrol show hostname {node_list} | head -n1')
    elif launcher == 'mpi':
        os.environ['RANK'] = os.environ['OMPI_COMM_WORLD_RANK']
        os.environ['WORLD_SIZE'] = os.environ['OMPI_COMM_WORLD_SIZE']
        os.environ['LOCAL_RANK'] = os.environ['OMPI_COMM_WORLD_LOCAL_RANK']
        os.environ.setdefault('MASTER_PORT', '29500')
        if 'MASTER_ADDR' not in os.environ:
            raise KeyError('The environment variable MASTER_ADDR is not set')
    elif launcher != 'pytorch':
        raise ValueError(f'launcher={launcher!r} is not valid, choose from '
                         f'{list(LAUNCHERS)}')


def setup_cpu_distributed(cfg: Config) -> bool:
    """Initialise a gloo process group and adapt ``cfg`` for DDP on the CPU.

    Does nothing (returns False) when ``cfg.launcher`` is ``'none'``, when an
    accelerator is available (mmengine's own path, e.g. NCCL, is kept) or
    when a process group already exists. Otherwise, before the ``Runner`` is
    built: initialises the default process group with gloo (so mmengine
    skips its ``init_dist`` and ``torch.cuda.set_device``), sets
    ``env_cfg.dist_cfg.backend='gloo'`` and makes ``model_wrapper_cfg`` a
    DDP wrapper with ``device_ids=None`` and no broadcast of the buffers
    before every forward (:func:`no_buffer_broadcast`;
    ``find_unused_parameters`` taken from the config). The ranks' buffers
    (BatchNorm statistics) are instead averaged after every training epoch,
    before its checkpoint and validation, by ``SyncBuffersHook``
    (``default_hooks.sync_buffers`` of default_runtime).

    Args:
        cfg (Config): The full config; modified in place.

    Returns:
        bool: Whether this call initialised the process group.
    """
    launcher = cfg.get('launcher', 'none')
    if launcher == 'none' or get_device() != 'cpu':
        return False
    if torch_dist.is_initialized():
        return False
    # (Config.setdefault would hand back a copy: assign, then read back.)
    if cfg.get('env_cfg') is None:
        cfg.env_cfg = dict()
    if cfg.env_cfg.get('dist_cfg') is None:
        cfg.env_cfg.dist_cfg = dict()
    dist_cfg = cfg.env_cfg.dist_cfg
    dist_cfg.backend = 'gloo'
    _set_env_from_launcher(launcher, dist_cfg.get('port'))

    kwargs = {}
    if dist_cfg.get('timeout') is not None:
        kwargs['timeout'] = datetime.timedelta(seconds=dist_cfg['timeout'])
    torch_dist.init_process_group(
        backend='gloo',
        rank=int(os.environ['RANK']),
        world_size=int(os.environ['WORLD_SIZE']),
        **kwargs)

    wrapper_cfg = cfg.get('model_wrapper_cfg')
    if wrapper_cfg is None:
        cfg.model_wrapper_cfg = dict(
            type='MMDistributedDataParallel',
            device_ids=None,
            find_unused_parameters=cfg.get('find_unused_parameters', False),
            **no_buffer_broadcast())
    else:
        wrapper_type = MODEL_WRAPPERS.get(
            wrapper_cfg.get('type', 'MMDistributedDataParallel'))
        if isinstance(wrapper_type, type) and issubclass(
                wrapper_type, DistributedDataParallel):
            wrapper_cfg['device_ids'] = None
    return True


def no_buffer_broadcast() -> dict:
    """DDP's argument that stops it from broadcasting rank 0's buffers
    before every forward: ``forward_sync_buffers=False`` where torch has it
    (it deprecates ``broadcast_buffers``, with a warning on every rank),
    else ``broadcast_buffers=False``."""
    params = inspect.signature(DistributedDataParallel.__init__).parameters
    if 'forward_sync_buffers' in params:
        return dict(forward_sync_buffers=False)
    return dict(broadcast_buffers=False)


def teardown_distributed() -> None:
    """Wait for every rank, then destroy the default process group."""
    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.barrier()
        torch_dist.destroy_process_group()


@contextmanager
def distributed_context(cfg: Config):
    """Run the body (build the ``Runner``, train or test) in a process group
    that works on the CPU too, and close it cleanly when the body succeeds.

    Calls :func:`setup_cpu_distributed` on entry and, after a successful
    body, :func:`teardown_distributed` (for any backend, NCCL included:
    torch warns when a process group is left to the interpreter's exit). A
    training stopped by a signal (``TrainingPreempted``: every rank stops at
    the same iteration) is torn down the same way. On another exception
    nothing is torn down -- a barrier would wait forever for the failed
    rank -- and the launcher stops the other ranks.

    Args:
        cfg (Config): The full config; see :func:`setup_cpu_distributed`.
    """
    from .preemption import TrainingPreempted
    setup_cpu_distributed(cfg)
    try:
        yield
    except TrainingPreempted:
        if cfg.get('launcher', 'none') != 'none':
            teardown_distributed()
        raise
    if cfg.get('launcher', 'none') != 'none':
        teardown_distributed()
