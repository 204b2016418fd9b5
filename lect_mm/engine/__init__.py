from .checkpoint import (MMENGINE_CHECKPOINT_GLOBALS,
                         allow_mmengine_checkpoints)
from .dist import (LAUNCHERS, distributed_context, setup_cpu_distributed,
                   teardown_distributed)
from .divergence import DivergenceError, NonFiniteLossHook
from .errors import (ConfigCheckHook, ConfigError, ConfigMismatchError,
                     explain_config_error, explain_config_errors,
                     merge_cfg_options)
from .hooks import (CompileModelHook, RNGStateHook, compile_submodules,
                    get_rng_state, set_rng_state)
from .optim_wrapper import DeviceAmpOptimWrapper

allow_mmengine_checkpoints()

__all__ = [
    'MMENGINE_CHECKPOINT_GLOBALS', 'allow_mmengine_checkpoints', 'LAUNCHERS',
    'distributed_context', 'setup_cpu_distributed', 'teardown_distributed',
    'DivergenceError', 'NonFiniteLossHook',
    'ConfigCheckHook', 'ConfigError', 'ConfigMismatchError',
    'explain_config_error', 'explain_config_errors', 'merge_cfg_options',
    'CompileModelHook', 'RNGStateHook', 'compile_submodules',
    'get_rng_state', 'set_rng_state',
    'DeviceAmpOptimWrapper'
]
