"""Reading any stage's output during the backbone's own forward.

The backbones return only the outputs of their ``out_indices`` (a classifier
builds them for the last stage, and AlterNet, CeiT and CCT build modules for
exactly what they return). timm's ``forward_intermediates`` and
``features_only`` ask for any stage of the same model, so the stage outputs
are read with forward hooks on the module that ends each stage, which each
backbone names (:meth:`~lect_mm.models.backbones.ZooBackbone.stage_taps`):
one implementation, no second copy of a forward.
"""
from typing import List, Sequence

import torch
import torch.nn as nn

from lect_mm.models.backbones.base_backbone import StageTap


def run_tapped(backbone: nn.Module, x: torch.Tensor, taps: List[StageTap],
               indices: Sequence[int]):
    """Run ``backbone(x)`` and read the stages of ``indices`` on the way.

    Returns:
        tuple: The backbone's own outputs and the maps of ``indices``, in
        that order.
    """
    maps = {}
    handles = []
    for i in sorted(set(indices)):
        tap = taps[i]

        def hook(module, args, out, i=i, tap=tap):
            maps[i] = tap.to_map(args, out)

        handles.append(
            backbone.get_submodule(tap.module).register_forward_hook(hook))
    try:
        outs = backbone(x)
    finally:
        for h in handles:
            h.remove()
    missing = [i for i in indices if i not in maps]
    if missing:
        raise RuntimeError(f'stages {missing} of {type(backbone).__name__} '
                           'were not reached by its forward.')
    return outs, [maps[i] for i in indices]
