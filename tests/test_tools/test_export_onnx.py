"""tools/deployment/export_onnx.py: a config's classifier (a checkpoint of
it) to ONNX, checked against eager in ONNX Runtime.

LeCT v1 with a dynamic batch: the graph ONNX Runtime runs has no shape
arithmetic, its node count (pinned: deterministic for the model, the
exporter and onnxruntime) is within 3 of the fixed-size export's, and it
computes the eager model at other batches. The export at a dynamic size of
every LeCT block is tests/test_models/test_export.py's.
"""
import re

import pytest
import torch


@pytest.fixture(scope='module')
def tool(load_script):
    pytest.importorskip('onnxruntime')
    return load_script('tools/deployment/export_onnx.py')


@pytest.mark.heavy
def test_lect_v1_exports_a_graph_that_computes(tool, tmp_path, capsys):
    config = 'configs/lect/lect_v1_cifar10.py'
    model = tool.load_classifier(config)
    torch.manual_seed(0)
    for m in model.modules():  # batch statistics as after training
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    ckpt = tmp_path / 'ckpt.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    out = str(tmp_path / 'lect_v1.onnx')
    # --atol 0 fails (folded BatchNorms round differently) after the graph
    # is written and checked: the message gives the difference
    with pytest.raises(SystemExit) as error:
        tool.main([config, str(ckpt), '--out', out, '--deploy', '--dynamic',
                   '--atol', '0'])
    diff = re.fullmatch(rf'{re.escape(out)}: the graph differs from the '
                        r'eager model by (\S+) > --atol 0', str(error.value))
    assert diff and 0 < float(diff.group(1)) < 1e-4
    printed = capsys.readouterr().out
    assert ' 199 after ONNX Runtime\'s optimisation (' in printed
    assert 'Attention 5' in printed and 'Shape' not in printed
    assert ('on 3 inputs (2x3x224x224, 1x3x224x224, 3x3x224x224)'
            in printed)
    # the checkpoint's weights, at another batch
    from lect_mm.export import ort_session
    x = torch.randn(5, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(
            torch.as_tensor(ort_session(out).run(None,
                                                 {'x': x.numpy()})[0]),
            model(x), rtol=1e-4, atol=1e-4)


def test_dynamic_sizes_are_checked_at_other_batches_and_sizes(tool):
    sizes = [tuple(x.shape) for x in tool.check_inputs((224, 200), 'size',
                                                       57)]
    assert sizes == [(2, 3, 224, 200), (1, 3, 224, 200), (3, 3, 224, 200),
                     (2, 3, 168, 232)]
    assert [tuple(x.shape) for x in tool.check_inputs((64, 64), None, 57)
            ] == [(2, 3, 64, 64)]
