"""Model analysis shared by tools/ and benchmarks/: FLOPs, parameters and
the training footprint (bytes saved for backward, ATen ops)."""
from .complexity import (EXTRA_HANDLES, add_shape_argument, analyze,
                         build_model, count_flops, count_params,
                         init_weights_quietly, literal_attention,
                         sdpa_flop_jit)
from .footprint import training_footprint

__all__ = [
    'EXTRA_HANDLES', 'add_shape_argument', 'analyze', 'build_model',
    'count_flops', 'count_params', 'init_weights_quietly',
    'literal_attention', 'sdpa_flop_jit',
    'training_footprint'
]
