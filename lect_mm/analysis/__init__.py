"""Model analysis shared by tools/ and benchmarks/: FLOPs and parameters."""
from .complexity import (EXTRA_HANDLES, analyze, build_model, count_flops,
                         count_params, literal_attention, sdpa_flop_jit)

__all__ = [
    'EXTRA_HANDLES', 'analyze', 'build_model', 'count_flops', 'count_params',
    'literal_attention', 'sdpa_flop_jit'
]
