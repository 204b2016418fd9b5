"""Export a classifier to ONNX and run it in ONNX Runtime (docs/export.md).

:func:`export_onnx` exports through ``torch.export`` (``torch.onnx.export``
with ``dynamo=True``) at opset :data:`OPSET`, at a fixed size, with a
dynamic batch or with a dynamic batch, height and width. On fixed sizes
(the first two) LeCT's attention layers build a graph of constant-size
ops (``PooledKeyAttention.attend_tokens``): pooling and resizes as
matmuls with constant matrices, all heads in one ONNX ``Attention`` op,
no per-head transposes; on dynamic sizes they build the size-independent
graph of the generic path. :func:`optimized_graph` is ONNX Runtime's
optimised graph, the one it runs; :func:`ort_session` a session as
``benchmarks/inference.py`` and ``tools/deployment/export_onnx.py`` time
it.
"""
import collections
import copy
import os.path as osp
import tempfile
from typing import Counter, Optional, Sequence, Tuple

import torch
import torch.nn as nn

#: The ONNX opset of :func:`export_onnx`: 23 has the ``Attention`` op.
OPSET = 23
#: ``dynamic`` of :func:`export_onnx`: the dynamic axes of the input.
DYNAMIC = (None, 'batch', 'size')


def prepare_for_export(model: nn.Module, deploy: bool = True,
                       onnx_attention: bool = True) -> nn.Module:
    """A copy of ``model`` in eval mode, ready to export.

    Args:
        model (nn.Module): A classifier (its ``forward(x)`` gives logits for
            normalised images) or backbone.
        deploy (bool): Fold the BatchNorms of every submodule with a
            ``switch_to_deploy()``, the outermost of them
            (configs/lect/README.md). Defaults to True.
        onnx_attention (bool): Emit LeCT's attention on fixed sizes as the
            ONNX ``Attention`` op (opset 23; ``torch.onnx.ops``, torch 2.8
            and later) instead of its products written out. Defaults to
            True.
    """
    model = copy.deepcopy(model).eval()
    if deploy:  # the outermost modules that fold, each once
        folded = []
        for name, module in model.named_modules():
            if hasattr(module, 'switch_to_deploy') and not any(
                    name == f or name.startswith(f + '.') or f == ''
                    for f in folded):
                module.switch_to_deploy()
                folded.append(name)
    onnx_attention = onnx_attention and hasattr(torch.onnx, 'ops')
    for module in model.modules():
        if hasattr(module, 'onnx_attention'):
            module.onnx_attention = onnx_attention
    return model


def export_onnx(model: nn.Module,
                path: str,
                shape: Sequence[int] = (224, 224),
                dynamic: Optional[str] = None,
                batch: int = 2,
                opset: int = OPSET,
                min_side: int = 57) -> str:
    """Export ``model`` (as it is: see :func:`prepare_for_export`) to
    ``path``.

    Args:
        model (nn.Module): The model, in eval mode; called as ``model(x)``.
        path (str): The ``.onnx`` file to write.
        shape (Sequence[int]): Input ``(H, W)``. Defaults to (224, 224).
        dynamic (str, optional): None (a fixed input size), ``'batch'`` (a
            dynamic batch of ``shape`` images) or ``'size'`` (dynamic
            batch, height and width, each side at least ``min_side``).
        batch (int): The example batch; at least 2 when the batch is
            dynamic (``torch.export`` specialises sizes 0 and 1), and the
            graph's batch otherwise. Defaults to 2.
        opset (int): ONNX opset; at least 23 where LeCT's ``onnx_attention``
            is on. Defaults to :data:`OPSET`.
        min_side (int): The smallest side of a ``'size'`` export: every
            pooled grid needs 2 cells per side (57 for LeCT v1 and v3, 113
            for v2; docs/export.md). Defaults to 57.

    Returns:
        str: ``path``.
    """
    from torch.export import Dim
    if dynamic not in DYNAMIC:
        raise ValueError(f'dynamic must be one of {DYNAMIC}, got '
                         f'{dynamic!r}')
    if dynamic and batch < 2:
        raise ValueError('a dynamic batch needs an example batch of at '
                         f'least 2 (torch.export specialises 0 and 1), got '
                         f'batch={batch}')
    if model.training:
        raise ValueError('export a model in eval mode (prepare_for_export):'
                         ' dropout and batch statistics are training '
                         'behaviour')
    h, w = shape
    x = torch.randn(batch, 3, h, w)
    dims = None
    if dynamic:
        axes = {0: Dim('batch', min=1, max=4096)}
        if dynamic == 'size':
            axes.update({2: Dim('height', min=min_side, max=4096),
                         3: Dim('width', min=min_side, max=4096)})
        dims = (axes, )
    program = torch.onnx.export(
        model, (x, ), dynamo=True, dynamic_shapes=dims, opset_version=opset,
        input_names=['x'], optimize=True, verbose=False)
    program.save(path)
    return path


def ort_session(path: str, threads: Optional[int] = None,
                optimized_path: Optional[str] = None):
    """An ONNX Runtime CPU session of ``path``, every graph optimisation
    on, ``threads`` intra-op threads (default: ONNX Runtime's)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    options.log_severity_level = 3  # not the NCHWc serialisation warning
    if threads:
        options.intra_op_num_threads = threads
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    return ort.InferenceSession(path, options,
                                providers=['CPUExecutionProvider'])


def optimized_graph(path: str) -> Tuple[int, int, Counter]:
    """Nodes of the exported graph, nodes of ONNX Runtime's optimised
    graph (the one it runs), and the optimised graph's count per op type.
    Deterministic for a given model, size and onnxruntime version."""
    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        optimized = osp.join(tmp, 'optimized.onnx')
        ort_session(path, threads=1, optimized_path=optimized)
        nodes = onnx.load(optimized, load_external_data=False).graph.node
    exported = onnx.load(path, load_external_data=False).graph.node
    return (len(exported), len(nodes),
            collections.Counter(n.op_type for n in nodes))


def max_difference(path: str, model: nn.Module,
                   inputs: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference between the ONNX Runtime outputs of
    ``path`` and ``model``'s own on ``inputs``."""
    session = ort_session(path)
    name = session.get_inputs()[0].name
    worst = 0.
    with torch.no_grad():
        for x in inputs:
            ref = model(x)
            ref = ref[-1] if isinstance(ref, (tuple, list)) else ref
            out = session.run(None, {name: x.numpy()})
            out = torch.as_tensor(out[-1] if len(out) > 1 else out[0])
            worst = max(worst, (out - ref).abs().max().item())
    return worst
