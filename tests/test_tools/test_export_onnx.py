"""tools/deployment/export_onnx.py: a config's classifier (a checkpoint of
it) to ONNX, checked against eager in ONNX Runtime."""
import pytest
import torch

TINY_LECT = """
custom_imports = dict(imports=['lect_mm'], allow_failed_imports=False)
default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LeCT',
        arch=dict(embed_dims=[8, 16], depths=[1, 1], num_heads=[1, 2],
                  ffn_ratios=[1, 1],
                  attn_cfgs=[dict(type='LeMSA', sr_ratio=2),
                             dict(type='LeMSA', sr_ratio=2)]),
        img_size=32, out_indices=(1, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=16))
"""


@pytest.fixture(scope='module')
def tool(load_script):
    pytest.importorskip('onnxruntime')
    return load_script('tools/deployment/export_onnx.py')


@pytest.mark.heavy
def test_a_checkpoint_exports_and_is_checked(tool, tmp_path, capsys):
    config = tmp_path / 'tiny_lect.py'
    config.write_text(TINY_LECT)
    model = tool.load_classifier(str(config))
    torch.nn.init.normal_(model.head.fc.weight)  # not the initialisation
    ckpt = tmp_path / 'ckpt.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    out = str(tmp_path / 'tiny.onnx')
    # BatchNorms folded: rounding away from eager, so --atol 0 fails, after
    # the graph is written and its figures printed
    with pytest.raises(SystemExit, match='differs from the eager model by '
                       r'.* > --atol 0'):
        tool.main([str(config), str(ckpt), '--out', out, '--shape', '32',
                   '--deploy', '--dynamic', '--atol', '0'])
    printed = capsys.readouterr().out
    assert 'after ONNX Runtime\'s optimisation (' in printed
    assert ('on 3 inputs (2x3x32x32, 1x3x32x32, 3x3x32x32)' in printed)
    # the checkpoint's weights at any batch
    from lect_mm.export import ort_session
    session = ort_session(out)
    x = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            torch.as_tensor(session.run(None, {'x': x.numpy()})[0]),
            model(x), rtol=1e-4, atol=1e-4)


def test_dynamic_sizes_are_checked_at_other_batches_and_sizes(tool):
    sizes = [tuple(x.shape) for x in tool.check_inputs((224, 200), 'size',
                                                       57)]
    assert sizes == [(2, 3, 224, 200), (1, 3, 224, 200), (3, 3, 224, 200),
                     (2, 3, 168, 232)]
    assert [tuple(x.shape) for x in tool.check_inputs((64, 64), None, 57)
            ] == [(2, 3, 64, 64)]
