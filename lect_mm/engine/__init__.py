"""lect_mm's engine: the runner, loop, hooks, checkpoint files and errors
that ``configs/_base_/default_runtime.py`` selects. ``__all__`` is what a
config or a user names; helpers stay in their modules."""
from .checkpoint_io import (CheckpointError, CheckpointNotFoundError,
                            verify_checkpoint_file)
from .checkpoints import (CheckpointConflictError, RunCheckpoints,
                          SafeCheckpointHook)
from .checks import CheckpointClassesHook, ConfigCheckHook
from .config_tree import ConfigError, ConfigMismatchError
from .hooks import (CompileModelHook, DivergenceError, NonFiniteLossHook,
                    RNGStateHook)
from .loading import (CheckpointMismatchError, StrictPretrainedInit,
                      load_weights)
from .optim_wrapper import DeviceAmpOptimWrapper
from .preemption import (PREEMPTED_EXIT_CODE, LectEpochBasedTrainLoop,
                         PreemptionHook, TrainingPreempted)
from .runner import LectRunner
from .workdir import WorkDirInUseError
from .write_errors import DiskFullError

__all__ = [
    # runner, loop, hooks, optimizer wrapper and initialiser of configs
    'LectRunner', 'LectEpochBasedTrainLoop', 'SafeCheckpointHook',
    'CheckpointClassesHook', 'ConfigCheckHook', 'PreemptionHook',
    'RNGStateHook', 'NonFiniteLossHook', 'CompileModelHook',
    'DeviceAmpOptimWrapper', 'StrictPretrainedInit',
    # a run's checkpoints, functions
    'RunCheckpoints', 'load_weights', 'verify_checkpoint_file',
    # what a run raises
    'CheckpointError', 'CheckpointNotFoundError', 'CheckpointMismatchError',
    'CheckpointConflictError', 'ConfigError', 'ConfigMismatchError',
    'DivergenceError', 'DiskFullError', 'TrainingPreempted',
    'PREEMPTED_EXIT_CODE', 'WorkDirInUseError'
]
