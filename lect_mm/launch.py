"""The launcher of ``tools/train.py`` and ``tools/test.py`` (tools layer,
docs/architecture.md): distributed training on the CPU too, its process
group destroyed at the end. lect_mm starts gloo itself, since mmengine's
``init_dist`` calls ``torch.cuda.set_device`` (docs/pitfalls.md);
accelerators keep mmengine's."""
import inspect
import os
import subprocess
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as torch_dist
from mmengine.config import Config
from mmengine.device import get_device
from mmpretrain.registry import MODEL_WRAPPERS
from torch.nn.parallel import DistributedDataParallel

from lect_mm.engine.preemption import TrainingPreempted

LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


def _set_env_from_launcher(launcher: str, port=None) -> None:
    """Set ``RANK``, ``WORLD_SIZE``... as mmengine's ``init_dist`` would."""
    env = os.environ
    if launcher == 'slurm':
        env.update(RANK=env['SLURM_PROCID'], WORLD_SIZE=env['SLURM_NTASKS'],
                   LOCAL_RANK=env.get('SLURM_LOCALID', '0'))
        if port is not None:
            env['MASTER_PORT'] = str(port)
        env.setdefault('MASTER_PORT', '29500')
        if 'MASTER_ADDR' not in env:
            env['MASTER_ADDR'] = subprocess.getoutput(
                f'scontrol show hostname {env["SLURM_NODELIST"]} | head -n1')
    elif launcher == 'mpi':
        env.update(RANK=env['OMPI_COMM_WORLD_RANK'],
                   WORLD_SIZE=env['OMPI_COMM_WORLD_SIZE'],
                   LOCAL_RANK=env['OMPI_COMM_WORLD_LOCAL_RANK'])
        env.setdefault('MASTER_PORT', '29500')
        if 'MASTER_ADDR' not in env:
            raise KeyError('The environment variable MASTER_ADDR is not set')
    elif launcher != 'pytorch':
        raise ValueError(f'launcher={launcher!r} is not valid, choose from '
                         f'{list(LAUNCHERS)}')


def setup_cpu_distributed(cfg: Config) -> bool:
    """On the CPU under a launcher, before the ``Runner`` is built: start a
    gloo process group (mmengine then skips ``init_dist``); DDP gets
    ``device_ids=None`` and no buffer broadcast before every forward
    (``SyncBuffersHook`` averages them after each epoch). True if started."""
    launcher = cfg.get('launcher', 'none')
    if launcher == 'none' or get_device() != 'cpu' or \
            torch_dist.is_initialized():
        return False
    env_cfg = cfg.get('env_cfg') or {}
    dist_cfg = dict(env_cfg.get('dist_cfg') or {}, backend='gloo')
    cfg.env_cfg = dict(env_cfg, dist_cfg=dist_cfg)
    _set_env_from_launcher(launcher, dist_cfg.get('port'))
    timeout = dist_cfg.get('timeout')
    torch_dist.init_process_group(
        backend='gloo', rank=int(os.environ['RANK']),
        world_size=int(os.environ['WORLD_SIZE']),
        timeout=None if timeout is None else timedelta(seconds=timeout))

    wrapper_cfg = cfg.get('model_wrapper_cfg')
    if wrapper_cfg is None:
        # torch deprecates broadcast_buffers where it has forward_sync_buffers
        ddp_args = inspect.signature(DistributedDataParallel).parameters
        no_broadcast = 'forward_sync_buffers' if 'forward_sync_buffers' in \
            ddp_args else 'broadcast_buffers'
        cfg.model_wrapper_cfg = {
            'type': 'MMDistributedDataParallel', 'device_ids': None,
            'find_unused_parameters': cfg.get('find_unused_parameters', False),
            no_broadcast: False}
    else:
        wrapper_type = MODEL_WRAPPERS.get(
            wrapper_cfg.get('type', 'MMDistributedDataParallel'))
        if isinstance(wrapper_type, type) and issubclass(
                wrapper_type, DistributedDataParallel):
            wrapper_cfg['device_ids'] = None
    return True


def teardown_distributed() -> None:
    """Wait for every rank, then destroy the default process group."""
    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.barrier()
        torch_dist.destroy_process_group()


@contextmanager
def distributed_context(cfg: Config):
    """Run the body in a process group (on the CPU too), torn down when it
    returns or raises ``TrainingPreempted``; after another error a barrier
    would wait forever for the failed rank: the launcher stops the others."""
    setup_cpu_distributed(cfg)
    launched = cfg.get('launcher', 'none') != 'none'
    try:
        yield
    except TrainingPreempted:
        if launched:
            teardown_distributed()
        raise
    if launched:
        teardown_distributed()
