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
def test_torch_export_runs_at_any_size(model):
    # Not under no_grad: impl='auto' must not turn into a size guard where
    # autograd records (Constraints violated otherwise). Its ONNX graph
    # (torch.onnx.export(exported, dynamo=True)) is checked at the three
    # sizes by benchmarks/export.py (docs/export.md), for LeCT v1, v2, v3.
    exported = torch.export.export(
        model, (torch.randn(EXAMPLE[0], 3, *EXAMPLE[1:]), ),
        dynamic_shapes=_dynamic_shapes())
    graph = exported.module()  # one module runs every size
    with torch.no_grad():
        for x in _inputs():
            _assert_close(graph(x), model(x))


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
def test_symbolic_size_pooling_is_ceil_mode_pooling(op, size):
    # the pooling an export on symbolic sizes traces (no ceil mode)
    x = torch.randn(2, 3, *size)
    torch.testing.assert_close(
        pooled_attention._pool_ceil_traceable(x, 4, op),
        pooled_attention.pool_map(x, 4, None, op))


@pytest.mark.parametrize('size, sr_ratio, pool_size', [
    ((12, 20), 4, None), ((13, 9), 4, None), ((3, 5), 4, None),
    ((14, 10), None, (4, 3))])
def test_pooling_matrix_pools_as_pool_map(size, sr_ratio, pool_size):
    x = torch.randn(2, 3, *size)
    pooled = pooled_attention.pool_map(x, sr_ratio, pool_size, 'avg')
    matrix = pooled_attention.pooling_matrix(size, sr_ratio, pool_size)
    tokens = matrix @ x.flatten(2).transpose(1, 2)
    torch.testing.assert_close(tokens, pooled.flatten(2).transpose(1, 2))


def test_export_resolves_auto_by_whether_the_grid_is_fixed(monkeypatch):
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    args = (torch.device('cpu'), torch.float32, True, 64)
    with torch.enable_grad():
        assert pooled_attention.resolve_impl_for('auto', *args, 4) == \
            'literal'
        assert pooled_attention.resolve_impl_for('auto', *args, 49) == \
            'fused'
        monkeypatch.setattr(pooled_attention, 'is_exporting', lambda: True)
        # a fixed grid: the key-axis resize is a constant matrix
        for cells, impl in ((4, 'literal'), (49, 'literal'),
                            (1024, 'fused')):
            assert pooled_attention.resolve_impl_for(
                'auto', *args, cells) == impl
        # a symbolic grid: no size condition in the graph
        symbolic = ShapeEnv().create_unbacked_symint()
        assert pooled_attention.resolve_impl_for('auto', *args,
                                                 symbolic) == 'fused'
        assert pooled_attention.resolve_impl_for(
            'literal', *args, 4) == 'literal'


@pytest.mark.parametrize('grid, out_size', [
    ((2, 3), (8, 12)),  # the trained grid
    ((3, 4), (9, 13)),  # ceil-mode pooling of 9x13: resampled, cropped
    ((3, 4), (5, 30)),  # another grid (adaptive pooling): resized
])
def test_symbolic_size_sv_upsampler_computes_forward(grid, out_size):
    torch.manual_seed(0)
    up = SVConvTransposeUpsampler(20, in_size=(2, 3), scale_factor=4)
    x = torch.randn(2, 20, *grid)
    with torch.no_grad():
        torch.testing.assert_close(up._forward_traceable(x, out_size),
                                   up(x, out_size), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('mode', ['bilinear', 'bicubic', 'nearest'])
def test_export_resizes_fixed_grids_with_a_matrix(monkeypatch, mode):
    x = torch.randn(2, 4, 3, 5)
    expected = F.interpolate(x, (12, 20), mode=mode,
                             align_corners=None if mode == 'nearest'
                             else False)
    monkeypatch.setattr(upsample, 'is_exporting', lambda: True)
    torch.testing.assert_close(upsample.resize(x, (12, 20), mode), expected,
                               rtol=1e-5, atol=1e-5)
    # equal sizes: nothing to resize
    assert upsample.resize(x, (3, 5), mode) is x


def _exporting(monkeypatch):
    import lect_mm.blocks.functional as functional
    for module in (functional, pooled_attention, upsample):
        monkeypatch.setattr(module, 'is_exporting', lambda: True)


@pytest.mark.parametrize('onnx_attention', [False, True])
@pytest.mark.parametrize('attn_cfg', [
    dict(sr_ratio=4),  # LeCT v1
    dict(sr_ratio=4, conv_skip=False, qkv_mode='parallel'),  # Table 3
    dict(sr_ratio=4, input_size=(13, 10),  # LeCT v3
         query_upsampler=dict(type='SVConvTransposeUpsampler')),
    dict(pool_size=(3, 2), key_upsample='bicubic',
         query_upsampler=dict(type='ResizeDWConvUpsampler', mode='bicubic')),
])
def test_fixed_size_export_path_computes_lemsa(monkeypatch, attn_cfg,
                                               onnx_attention):
    # The graph LeMSA builds under export on fixed sizes (pooling, resizes
    # as matrices, all heads in one op) computes its forward; 13x10 pools
    # to partial windows.
    from lect_mm.blocks import LeMSA
    torch.manual_seed(0)
    layer = LeMSA(24, 3, **attn_cfg).eval()
    for m in layer.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    layer.onnx_attention = onnx_attention
    x = torch.randn(2, 130, 24)
    with torch.no_grad():
        expected = layer(x, (13, 10))
        _exporting(monkeypatch)
        assert layer.exports_static(x, (13, 10))
        got = layer(x, (13, 10))
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
