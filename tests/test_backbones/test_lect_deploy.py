"""LeCT's deploy mode: folded for inference, as mmpretrain's LeViT.

``switch_to_deploy()`` (or ``deploy=True``) folds every conv → BatchNorm
pair; a folded checkpoint, as mmpretrain's
``tools/model_converters/reparameterize_model.py`` writes it, loads strictly
into the deploy config's model.
"""
import runpy
import sys
from pathlib import Path

import mmpretrain
import pytest
import torch
from mmengine.config import Config
from torch.nn.modules.batchnorm import _BatchNorm

import lect_mm  # noqa: F401
from lect_mm.models.backbones import LeCT

REPO = Path(__file__).resolve().parents[2]
REPARAMETERIZE = (Path(mmpretrain.__file__).parent / '.mim' / 'tools' /
                  'model_converters' / 'reparameterize_model.py')


@pytest.mark.parametrize('arch', ['v1', 'v2', 'v3'])
def test_deploy_keeps_eval_outputs_and_loads_into_deploy_model(arch,
                                                               trained_norms):
    torch.manual_seed(0)
    model = trained_norms(LeCT(arch, out_indices=(0, 1, 2))).eval()
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        expected = model(x)
        model.switch_to_deploy()
        got = model(x)
    assert model.deploy
    assert not any(isinstance(m, _BatchNorm) for m in model.modules())
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)

    deployed = LeCT(arch, out_indices=(0, 1, 2), deploy=True).eval()
    assert deployed.deploy
    deployed.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        for g, e in zip(deployed(x), got):
            torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_deploy_false_keeps_the_training_structure():
    model = LeCT('v2')
    assert not model.deploy
    keys = set(model.state_dict())
    assert 'stages.0.blocks.0.attn.conv1.1.running_var' in keys
    assert 'stages.0.blocks.0.ffn.bn1.weight' in keys
    assert not any(k.endswith('conv1.0.bias') for k in keys)


def test_reparameterize_tool_output_loads_into_the_deploy_config(
        tmp_path, monkeypatch, trained_norms):
    arch = dict(LeCT.arch_zoo['v3'], depths=[1, 1, 1])
    model_cfg = dict(
        type='ImageClassifier',
        backbone=dict(type='LeCT', arch=arch, img_size=64),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=192))
    config = tmp_path / 'tiny_lect.py'
    Config(dict(model=model_cfg, default_scope='mmpretrain',
                custom_imports=dict(imports=['lect_mm']))).dump(config)
    deploy_config = tmp_path / 'tiny_lect_deploy.py'
    deploy_config.write_text(f"_base_ = './{config.name}'\n"
                             'model = dict(backbone=dict(deploy=True))\n')
    torch.manual_seed(0)
    classifier = mmpretrain.get_model(str(config)).eval()
    trained_norms(classifier)
    checkpoint = tmp_path / 'tiny.pth'
    torch.save(dict(state_dict=classifier.state_dict(), meta=dict()),
               checkpoint)

    fused = tmp_path / 'tiny_deploy.pth'
    monkeypatch.setattr(sys, 'argv', [
        str(REPARAMETERIZE), str(config), str(checkpoint), str(fused)])
    runpy.run_path(str(REPARAMETERIZE), run_name='__main__')

    deployed = mmpretrain.get_model(str(deploy_config), pretrained=str(fused))
    assert deployed.backbone.deploy
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(
            deployed(x, mode='tensor'), classifier(x, mode='tensor'),
            rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('config', sorted(
    (REPO / 'configs' / 'lect' / 'deploy').glob('*.py')), ids=lambda p: p.stem)
def test_deploy_configs_fold_their_training_config(config):
    cfg = Config.fromfile(str(config))
    base = Config.fromfile(str(REPO / 'configs' / 'lect' / config.name))
    assert cfg.model.backbone.pop('deploy') is True
    assert cfg.model.to_dict() == base.model.to_dict()
