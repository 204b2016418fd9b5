from .checkpoint_checks import CheckpointCheckHook
from .checkpoint_hook import SafeCheckpointHook
from .checkpoint_io import (CheckpointError, CheckpointNotFoundError,
                            atomic_write, latest_checkpoint,
                            load_checkpoint_file, load_checkpoint_verified,
                            verify_checkpoint_file)
from .config_check_hook import ConfigCheckHook, empty_epoch_problem
from .config_input import load_config, merge_cfg_options
from .config_tree import (ConfigError, ConfigMismatchError, check_config,
                          explain_config_error, explain_config_errors)
from .dist import (LAUNCHERS, distributed_context, setup_cpu_distributed,
                   teardown_distributed)
from .divergence import DivergenceError, NonFiniteLossHook
from .hooks import (CompileModelHook, RNGStateHook, compile_submodules,
                    get_rng_state, set_rng_state)
from .loading import (CheckpointMismatchError, StrictPretrainedInit,
                      load_checkpoint)
from .loops import LectEpochBasedTrainLoop
from .optim_wrapper import DeviceAmpOptimWrapper
from .preemption import PREEMPTED_EXIT_CODE, StopSignals, TrainingPreempted
from .runner import LectRunner, find_resume_checkpoint
from .workdir import WorkDirInUseError, WorkDirLock
from .write_errors import DiskFullError, GuardedFileHandler

__all__ = [
    'LAUNCHERS',
    'distributed_context', 'setup_cpu_distributed', 'teardown_distributed',
    'DivergenceError', 'NonFiniteLossHook',
    'ConfigCheckHook', 'ConfigError', 'ConfigMismatchError',
    'explain_config_error', 'explain_config_errors', 'merge_cfg_options',
    'check_config', 'load_config', 'empty_epoch_problem',
    'CompileModelHook', 'RNGStateHook', 'compile_submodules',
    'get_rng_state', 'set_rng_state',
    'DeviceAmpOptimWrapper', 'CheckpointCheckHook',
    'SafeCheckpointHook', 'CheckpointError', 'CheckpointNotFoundError',
    'atomic_write', 'latest_checkpoint', 'load_checkpoint_file',
    'load_checkpoint_verified',
    'verify_checkpoint_file', 'CheckpointMismatchError',
    'StrictPretrainedInit', 'load_checkpoint', 'LectRunner',
    'find_resume_checkpoint', 'WorkDirInUseError', 'WorkDirLock',
    'LectEpochBasedTrainLoop', 'PREEMPTED_EXIT_CODE', 'StopSignals',
    'TrainingPreempted', 'DiskFullError', 'GuardedFileHandler'
]
