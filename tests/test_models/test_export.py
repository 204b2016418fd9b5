"""Exporting LeCT: ``torch.jit.trace``, ``torch.export`` and ONNX.

The round trips export one model with dynamic batch, height and width and
run the exported graph at three input sizes. That model is a small two-stage
LeCT that holds every block of the three variants: stage 1 is LeCT v2's
stage 1 (LeMSAv2, bicubic key and query resizes, the resize + DWConv + BN
query upsampler), stage 2 is v3's stage 2 (LeMSA, bilinear key resize, the
spatially-varying ConvTranspose upsampler); v1's blocks are LeMSA with the
resize + DWConv + BN upsampler in bilinear mode, the same code. Smaller
``sr_ratio`` let the small inputs pool to grids of 2 to 6 cells, partial
windows included: every size-dependent path of v1, v2 and v3 in one export
of a few seconds. ``benchmarks/export.py`` checks the full v1, v2 and v3
at 224², 160x192 and 320x256, the ONNX graph optimised.
"""
import copy
import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import lect_mm.blocks.pooled_attention as pooled_attention
import lect_mm.blocks.upsample as upsample
from lect_mm.blocks import SVConvTransposeUpsampler
from lect_mm.models.backbones import LeCT

#: Inputs (batch, height, width) of the round trips: the example the model
#: is exported with, then three others (v3's kernels are trained at 64x64).
EXAMPLE = (2, 64, 64)
SIZES = [(1, 64, 64), (3, 48, 80), (2, 96, 72)]
#: The smallest side at which every pooled grid of the model below has two
#: cells (torch.export specialises sizes 0 and 1).
MIN_SIDE = 33


def _all_blocks_lect():
    attn_cfgs = [
        dict(LeCT.arch_zoo['v2']['attn_cfgs'][0], sr_ratio=4),  # LeMSAv2
        dict(LeCT.arch_zoo['v3']['attn_cfgs'][1], sr_ratio=4),  # LeMSA + SV
    ]
    arch = dict(embed_dims=[32, 48], depths=[1, 1], num_heads=[2, 2],
                ffn_ratios=[2, 2], attn_cfgs=copy.deepcopy(attn_cfgs))
    torch.manual_seed(0)
    model = LeCT(arch, img_size=EXAMPLE[1:], out_indices=(0, 1))
    # Batch statistics away from their initial values, as after training.
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


@pytest.fixture(scope='module')
def model():
    return _all_blocks_lect()


def _inputs():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(*size[:1], 3, *size[1:], generator=g)
            for size in SIZES]


def _dynamic_shapes():
    return {'x': {0: Dim('batch', min=1, max=64),
                  2: Dim('height', min=MIN_SIDE, max=4096),
                  3: Dim('width', min=MIN_SIDE, max=4096)}}


def _ort_outputs(onnx_bytes, inputs):
    ort = pytest.importorskip('onnxruntime')
    session = ort.InferenceSession(
        onnx_bytes, providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    return [session.run(None, {name: x.numpy()}) for x in inputs]


def _assert_close(outs, refs):
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        torch.testing.assert_close(
            torch.as_tensor(out), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.heavy
def test_torch_export_and_its_onnx_graph_run_at_any_size(model):
    # Not under no_grad: impl='auto' must not turn into a size guard where
    # autograd records (Constraints violated otherwise). One test for
    # both: the ONNX graph is translated from this export.
    exported = torch.export.export(
        model, (torch.randn(EXAMPLE[0], 3, *EXAMPLE[1:]), ),
        dynamic_shapes=_dynamic_shapes())
    inputs = _inputs()
    graph = exported.module()  # one module runs every size
    with torch.no_grad():
        refs = [model(x) for x in inputs]
        for x, ref in zip(inputs, refs):
            _assert_close(graph(x), ref)

    pytest.importorskip('onnxscript')
    # Unoptimised, which saves a third of the test's time;
    # benchmarks/export.py runs the optimised graphs.
    program = torch.onnx.export(
        exported, dynamo=True, verbose=False, optimize=False)
    outs = _ort_outputs(program.model_proto.SerializeToString(), inputs)
    for out, ref in zip(outs, refs):
        _assert_close(out, ref)


def test_onnx_torchscript_export_of_deployed_model_runs_at_any_size(model):
    pytest.importorskip('onnx')
    deployed = copy.deepcopy(model)
    deployed.switch_to_deploy()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # TracerWarning, deprecation
        torch.onnx.export(
            deployed, (torch.randn(EXAMPLE[0], 3, *EXAMPLE[1:]), ), f,
            dynamo=False, input_names=['x'],
            dynamic_axes={'x': {0: 'batch', 2: 'height', 3: 'width'}})
    inputs = _inputs()
    with torch.no_grad():
        for outs, x in zip(_ort_outputs(f.getvalue(), inputs), inputs):
            _assert_close(outs, model(x))


@pytest.mark.parametrize('op', ['avg', 'max'])
@pytest.mark.parametrize('size', [(12, 20), (13, 9), (3, 5)])
def test_export_pooling_is_ceil_mode_pooling(monkeypatch, op, size):
    x = torch.randn(2, 3, *size)
    expected = pooled_attention.pool_map(x, 4, None, op)
    monkeypatch.setattr(pooled_attention, 'is_exporting', lambda: True)
    torch.testing.assert_close(
        pooled_attention.pool_map(x, 4, None, op), expected)


def test_export_resolves_auto_to_fused_at_any_size(monkeypatch):
    args = (torch.device('cpu'), torch.float32, True, 64)
    with torch.enable_grad():
        assert pooled_attention.resolve_impl_for('auto', *args, 4) == \
            'literal'
        monkeypatch.setattr(pooled_attention, 'is_exporting', lambda: True)
        for cells in (4, 49, 1024):
            assert pooled_attention.resolve_impl_for(
                'auto', *args, cells) == 'fused'
        assert pooled_attention.resolve_impl_for(
            'literal', *args, 4) == 'literal'


@pytest.mark.parametrize('grid, out_size', [
    ((2, 3), (8, 12)),  # the trained grid
    ((3, 4), (9, 13)),  # ceil-mode pooling of 9x13: resampled, cropped
    ((3, 4), (5, 30)),  # another grid (adaptive pooling): resized
])
def test_export_sv_upsampler_computes_forward(monkeypatch, grid, out_size):
    torch.manual_seed(0)
    up = SVConvTransposeUpsampler(20, in_size=(2, 3), scale_factor=4)
    x = torch.randn(2, 20, *grid)
    with torch.no_grad():
        expected = up(x, out_size)
        monkeypatch.setattr(upsample, 'is_exporting', lambda: True)
        got = up(x, out_size)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_export_resizes_small_grids_with_interpolate(monkeypatch):
    x = torch.randn(2, 4, 3, 5)
    expected = upsample.resize(x, (12, 20), 'bicubic')  # a matmul
    monkeypatch.setattr(upsample, 'is_exporting', lambda: True)
    got = upsample.resize(x, (12, 20), 'bicubic')
    torch.testing.assert_close(
        got, F.interpolate(x, (12, 20), mode='bicubic', align_corners=False))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('arch', ['v1', 'v2'])
def test_jit_trace_passes_its_check(arch):
    # impl='auto' used to pick LeMSA's literal path when autograd records
    # the call (at 96x80 every stage of v1 and v2 does), while
    # check_trace re-traces under no_grad, so the two graphs differed.
    # One block per stage keeps the test cheap; each stage keeps the
    # variant's attention and pooling, so the same paths are chosen.
    settings = copy.deepcopy(LeCT.arch_zoo[arch])
    settings['depths'] = [1, 1, 1]
    torch.manual_seed(0)
    model = LeCT(arch=settings, out_indices=(0, 1, 2)).eval()
    x = torch.randn(1, 3, 96, 80)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # TracerWarning, deprecation
        traced = torch.jit.trace(model, x, check_trace=True)
    y = torch.randn(1, 3, 96, 80)
    for got, ref in zip(traced(y), model(y)):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
