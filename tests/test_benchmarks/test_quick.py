"""Smoke tests: every benchmark script runs in ``--quick`` mode.

The scripts' ``main(argv)`` is called in this process (one import of torch
and mmpretrain for all of them), on the CPU, single-threaded; ``--quick``
uses two models, tiny inputs and one or two steps, so the figures are
meaningless and only the plumbing and the report format are checked.
"""
import importlib
import json
import os.path as osp
import sys

import pytest
import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
BENCH = osp.join(ROOT, 'benchmarks')


@pytest.fixture
def bench(monkeypatch):
    """Import a benchmark script, or a module of its ``common`` package, as
    the scripts run: with benchmarks/ on sys.path."""
    monkeypatch.syspath_prepend(BENCH)
    monkeypatch.chdir(ROOT)
    threads = torch.get_num_threads()
    yield importlib.import_module
    torch.set_num_threads(threads)


QUICK = ['--quick', '--device', 'cpu', '--threads', '1']


def _table_rows(text, first_cell):
    return [
        line for line in text.splitlines()
        if line.startswith(f'| {first_cell} |')
    ]


def test_common_helpers(bench):
    report, timing = bench('common.report'), bench('common.timing')
    memory, cli = bench('common.memory'), bench('common.cli')
    table = report.markdown_table(['a', 'b'], [[1, 2.5]])
    assert table.splitlines() == ['| a | b |', '|:---|---:|', '| 1 | 2.5 |']
    stats = timing.Stats([0.1, 0.2, 0.3, 0.4])
    assert stats.median == pytest.approx(0.25)
    assert stats.q1 == pytest.approx(0.175)
    assert stats.q3 == pytest.approx(0.325)
    assert stats.rate(10).startswith('40.0 [')
    timed = timing.measure(lambda: None, torch.device('cpu'), 1, 3)
    assert len(timed.times) == 3
    grown = memory.peak_memory(lambda: torch.ones(4_000_000).sum(),
                               torch.device('cpu'))
    assert grown >= 8_000_000  # the 16 MB tensor shows in the RSS
    with pytest.raises(ValueError, match='unknown model'):
        cli.resolve_models(['NoSuchNet'], quick=False)
    models = bench('common.models')
    assert list(cli.resolve_models(None, quick=True)) == list(
        models.QUICK_MODELS)
    for config in models.MODEL_CONFIGS.values():
        assert osp.isfile(osp.join(ROOT, config)), config


def test_train_throughput(bench, tmp_path):
    mod = bench('train_throughput')
    report = mod.main(QUICK + ['--out', str(tmp_path)])
    text = (tmp_path / 'train_throughput.md').read_text()
    assert text == '\n'.join(report.parts) + '\n'
    header = next(line for line in text.splitlines()
                  if line.startswith('| Model |'))
    for name in ('LeCT', 'ResNet'):
        rows = _table_rows(text, name)
        assert len(rows) == 1 and 'failed' not in rows[0], rows
        assert rows[0].count(' | ') == header.count(' | ')
    assert '| ResNet | ' in text and '| 1.00 |' in text


def test_train_throughput_variants(bench):
    mod = bench('train_throughput')
    text = '\n'.join(mod.main(QUICK + ['--variants']).parts)
    lect = _table_rows(text, 'LeCT')
    assert [row.split(' | ')[1] for row in lect] == list(mod.VARIANTS)
    ops = [int(row.split(' | ')[5].split(' ')[0].replace(',', ''))
           for row in lect]
    # with_cp and dropout each cost ops: with_cp without dropout costs more
    # than neither, less than both; with_cp saves memory for backward
    assert ops[1] > ops[0] > ops[2] and ops[1] > ops[3] > ops[2]
    saved = [float(row.split(' | ')[4].split(' ')[0]) for row in lect]
    assert saved[1] < saved[0] and saved[3] < saved[2]
    resnet, = _table_rows(text, 'ResNet')
    assert '| 1.00 |' in resnet
    with pytest.raises(SystemExit):
        mod.parse_args(['--variants', '--compile'])


def test_train_throughput_options(bench):
    mod = bench('train_throughput')
    report = mod.main(QUICK + ['--models', 'LeCT', '--amp',
                               '--channels-last', '--cpu-time'])
    text = '\n'.join(report.parts)
    assert 'bf16 autocast, CPU time of ' in text and ', channels_last' in text
    assert 'failed' not in _table_rows(text, 'LeCT')[0]


def test_train_throughput_compile_mode(bench, monkeypatch):
    # --compile MODE reaches nn.Module.compile of the backbone and neck and
    # the table's settings line; plain --compile is torch's default mode
    mod = bench('train_throughput')
    assert mod.parse_args(['--compile']).compile == 'default'
    with pytest.raises(SystemExit):
        mod.parse_args(['--compile', 'fast'])
    calls = []
    monkeypatch.setattr(torch.nn.Module, 'compile',
                        lambda self, **kwargs: calls.append(kwargs))
    report = mod.main(QUICK + ['--models', 'LeCT', '--compile',
                               'reduce-overhead'])
    assert calls == [dict(mode='reduce-overhead')] * 2  # backbone, neck
    assert ', torch.compile (reduce-overhead)' in '\n'.join(report.parts)
    calls.clear()
    model = torch.nn.Module()
    model.backbone, model.neck = torch.nn.Linear(2, 2), torch.nn.Identity()
    bench('common.models').compile_model(model, 'default')
    assert calls == [{}, {}]


def test_train_throughput_profile(bench):
    mod = bench('train_throughput')
    report = mod.main(QUICK + ['--profile', 'LeCT', '--top', '5'])
    text = '\n'.join(report.parts)
    assert 'Top 5 ops by self_cpu_time_total' in text
    assert '| LeMSA |' in text and '| LeFFN |' in text


def test_dropout(bench):
    mod = bench('dropout')
    report = mod.main(QUICK + ['--models', 'LeCT', 'ResNet'])
    text = '\n'.join(report.parts)
    calls = _table_rows(text, 'backbone.stages.0.blocks.0.ffn.drop')
    assert len(calls) == 2  # LeFFN drops twice: hidden map and output
    assert '| channels_last | 0.1 |' in calls[0]
    assert '### LeCT: whole training step (15 dropout modules swapped)' \
        in text
    assert len(_table_rows(text, 'FastDropout')) == 1
    assert '### ResNet: no dropout with p > 0, skipped' in text


@pytest.mark.heavy
def test_resolution_scaling(bench, tmp_path):
    mod = bench('resolution_scaling')
    mod.main(QUICK + ['--out', str(tmp_path)])
    text = (tmp_path / 'resolution_scaling.md').read_text()
    for name in ('LeCT pool_size', 'LeCT sr_ratio'):
        rows = _table_rows(text, name)
        assert len(rows) == 2, rows  # time and memory tables
        assert all('fails' not in r and 'OOM' not in r for r in rows)
    assert (tmp_path / 'resolution_scaling_time.png').stat().st_size > 0
    assert (tmp_path / 'resolution_scaling_memory.png').stat().st_size > 0


def test_inference(bench):
    mod = bench('inference')
    report = mod.main(QUICK)
    text = '\n'.join(report.parts)
    assert 'bs 1 fp32 | bs 1 bf16 | bs 2 fp32 | bs 2 bf16' in text
    for name in ('LeCT', 'ResNet'):
        assert 'failed' not in _table_rows(text, name)[0]


def test_inference_deploy_speedup(bench):
    mod = bench('inference')
    text = '\n'.join(
        mod.main(QUICK + ['--deploy-speedup', '--cpu-time']).parts)
    assert '### Inference images/s, eager, deployed (batch 2, 64²' in text
    assert 'Images/s of CPU time (process_time)' in text
    lect, = _table_rows(text, 'LeCT')
    resnet, = _table_rows(text, 'ResNet')
    cells = [c.strip() for c in lect.strip('|').split('|')]
    assert len(cells) == 7 and '–' not in cells  # LeCT folds
    cells = [c.strip() for c in resnet.strip('|').split('|')]
    assert cells[3:5] == ['–', '–'] and cells[5:] == ['1.00', '1.00']
    with pytest.raises(SystemExit):
        mod.parse_args(['--deploy-speedup', '--compile'])


def test_inference_engines(bench, tmp_path):
    mod = bench('inference')
    out = tmp_path / 'engines.json'
    text = '\n'.join(mod.main(QUICK + [
        '--engine', 'torch', '--models', 'ResNet', 'timm/test_resnet',
        '--json', str(out)]).parts)
    assert '### Deployed models by engine (images/s, 64², fp32, 1 thread)' \
        in text
    assert '| torch bs 1 | torch bs 2 | torch bs 1 × ResNet |' in text
    resnet, = _table_rows(text, 'ResNet')
    timm_row, = _table_rows(text, 'timm/test_resnet')
    assert [c.strip() for c in resnet.strip('|').split('|')][4:] == [
        '1.00', '1.00']
    assert len(timm_row.strip('|').split('|')) == 6
    figures = json.loads(out.read_text())
    assert (figures['engine'], figures['batch']) == ('torch', 1)
    assert figures['command'].startswith(
        'python benchmarks/inference.py --quick') and figures[
            'command'].endswith(f'--json {out}')
    assert figures['models']['timm/test_resnet']['ms'] > 0
    with pytest.raises(SystemExit):
        mod.parse_args(['--engine', 'ort', '--compile'])
    # the ONNX Runtime call of --engine ort, on a graph of its own (the
    # graphs of lect_mm.export.export_onnx: tests/test_tools/
    # test_export_onnx.py)
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node('Relu', ['x'], ['y'])], 'relu',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['b', 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['b', 3])])
    path = str(tmp_path / 'relu.onnx')
    onnx.save(helper.make_model(
        graph, opset_imports=[helper.make_opsetid('', 17)]), path)
    y, = mod.engine_call(None, 'ort', path, threads=1)(
        torch.tensor([[-1., 0., 2.]]))
    assert y.tolist() == [[0., 0., 2.]]


def test_export(bench):
    pytest.importorskip('onnxruntime')
    mod = bench('export')
    text = '\n'.join(mod.main(QUICK).parts)
    row, = _table_rows(text, 'LeCT')
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert cells[1] == '57'  # LeCT v1: from 57 on, 2x2 pooled grids
    assert cells[3] == 'ONNX TorchScript'
    assert all(float(c) < 1e-4 for c in cells[5:]) and len(cells) == 7


@pytest.mark.heavy
def test_data_pipeline(bench):
    mod = bench('data_pipeline')
    report = mod.main(QUICK + ['--num-workers', '0'])
    text = '\n'.join(report.parts)
    assert '| CPU pipeline (Resize 48) |' in text
    assert '| device (ResizeClsDataPreprocessor 48) |' in text


def test_data_pipeline_loader_only(bench):
    mod = bench('data_pipeline')
    report = mod.main(QUICK + ['--num-workers', '0', '--loader-only'])
    text = '\n'.join(report.parts)
    assert '### Data loader alone, 32 32×32 images' in text
    rows = [line for line in text.splitlines()
            if line.startswith(('| CPU pipeline', '| device'))]
    assert len(rows) == 2
    assert all(len(r.strip('|').split('|')) == 3 for r in rows)


def test_data_pipeline_without_loader_pass(bench):
    mod = bench('data_pipeline')
    report = mod.main(QUICK + ['--num-workers', '0', '--modes', 'device',
                               '--no-loader-pass'])
    text = '\n'.join(report.parts)
    row = [line for line in text.splitlines() if line.startswith('| device')]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip('|').split('|')]
    assert cells[1:3] == ['–', '–'] and float(cells[3]) > 0


def test_in_memory_dataset(bench):
    mod = bench('data_pipeline')
    ds = mod.InMemoryImages(num_images=5, img_size=8, num_classes=3)
    assert len(ds) == 5
    item = ds.get_data_info(4)
    assert item['img'].shape == (8, 8, 3) and item['gt_label'] == 1


@pytest.mark.skipif(sys.platform != 'linux', reason='bash script')
def test_kernel_summary_of_cuda_events(bench):
    # what --profile prints on CUDA, from the profiler's averaged events
    # (2 steps): kernels per step, GPU busy, the compute kernels' share
    from types import SimpleNamespace

    from torch.autograd import DeviceType
    mod = bench('train_throughput')

    def event(key, count, us, device=DeviceType.CUDA, annotation=False):
        return SimpleNamespace(key=key, count=count, device_type=device,
                               self_device_time_total=us,
                               is_user_annotation=annotation)

    events = [event('sm90_xmma_fprop_implicit_gemm', 2, 4000),
              event('dgrad2d_c1_k1_nhwc_specialized', 2, 2000),
              event('vectorized_elementwise_kernel<convert>', 10, 2000),
              event('Memcpy DtoD', 2, 2000),
              event('aten::conv2d', 4, 0, DeviceType.CPU),
              # a record_function range and its GPU-timeline mirror (an
              # annotation spanning kernels, not one): not counted
              event('module::LeMSA', 2, 0, DeviceType.CPU),
              event('module::LeMSA', 2, 50000, annotation=True)]
    table = mod._kernel_summary(events, 2, 0.01).splitlines()[2:]
    rows = dict([cell.strip() for cell in line.strip('|').split('|')]
                for line in table)
    assert rows['CUDA kernels and memory copies per step'] == '8'
    assert rows['GPU busy (kernel time / wall time)'] == '50 %'
    assert rows['GEMM / conv / attention kernels (share of kernel time)'] \
        == '60 %'


@pytest.mark.parametrize('script', ['run_gpu.sh', 'gpu_session.sh'])
def test_gpu_script_syntax(script):
    import subprocess
    script = osp.join(BENCH, script)
    assert subprocess.run(['bash', '-n', script]).returncode == 0


def test_header_commit_without_git(bench, monkeypatch, tmp_path):
    # A GPU machine gets the working tree without .git: the header then
    # takes LECT_MM_COMMIT, or says that it cannot know.
    report = bench('common.report')
    monkeypatch.setattr(report, 'REPO_ROOT', str(tmp_path))
    monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path.parent))
    monkeypatch.delenv('LECT_MM_COMMIT', raising=False)
    assert report._git_commit() == 'unknown (no git checkout)'
    monkeypatch.setenv('LECT_MM_COMMIT', '2fa690c')
    assert report._git_commit() == '2fa690c'
    # and it wins over a .git that is there (a stale copy of one)
    monkeypatch.setattr(report, 'REPO_ROOT', ROOT)
    assert report._git_commit() == '2fa690c'


def test_report_optim_wrapper_on_plain_cuda(bench, monkeypatch):
    # '--device cuda' is torch.device('cuda') without an index, which
    # torch.cuda.set_device refuses: only a named index is set
    models = bench('common.models')
    from torch.cuda._utils import _get_device_index
    calls = []

    def set_device(device):
        calls.append(_get_device_index(device))

    monkeypatch.setattr(torch.cuda, 'set_device', set_device)
    model = torch.nn.Linear(2, 2)
    for device in ('cuda', 'cuda:1'):
        wrapper = models.build_report_optim_wrapper(
            model, torch.device(device), amp=False)
        assert wrapper.clip_grad_kwargs == dict(max_norm=5)
    assert calls == [1]


def test_reference(bench):
    # Same converted weights: the logits agree; both steps are timed.
    mod = bench('reference')
    report = mod.main(QUICK)
    text = '\n'.join(report.parts)
    row = [line for line in text.splitlines() if line.startswith('| LeCT v1')]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip('|').split('|')]
    assert len(cells) == 8
    assert float(cells[1]) < 1e-4
    assert cells[4].endswith('×') and cells[7].endswith('×')


def test_measure_interleaved_takes_turns(bench):
    timing = bench('common.timing')
    calls = []
    stats = timing.measure_interleaved(
        [lambda: calls.append('a'), lambda: calls.append('b')],
        torch.device('cpu'), warmup=1, repeats=2)
    assert calls == ['a', 'b', 'a', 'b', 'b', 'a']  # warm-up, then ABBA
    assert [len(s.times) for s in stats] == [2, 2]
    calls.clear()
    stats = timing.measure_interleaved(
        [lambda: calls.append('a'), lambda: calls.append('b')],
        torch.device('cpu'), warmup=0, repeats=3, turn=2)
    # turns of one untimed and two timed calls, the last turn shorter
    assert calls == ['a'] * 3 + ['b'] * 3 + ['b'] * 2 + ['a'] * 2
    assert [len(s.times) for s in stats] == [3, 3]
