"""Weights both ways between a lect_mm training run and timm: a checkpoint
of a real (tiny) run of the README's demo model (LeCT v1 with the demo's
``sr_ratio`` 2/2/1) loads through timm's own mechanisms and gives the
trained model's logits, and only into a model built with the demo's
arguments; the converter's Hugging Face folder carries them and loads with
``local-dir:``; a timm state dict loads strictly into the mmpretrain
config; a checkpoint of another backbone is refused, naming both models."""
import json
import os.path as osp
import re
import sys

import pytest
import timm
import torch
from mmengine.config import Config, ConfigDict
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmpretrain.registry import MODELS
from timm.models import load_checkpoint

from lect_mm.engine import load_weights as lect_load
from lect_mm.model_index import mim_root
from lect_mm.timm import checkpoint_filter_fn, model_args

# the tiny run of the engine tests
sys.path.insert(0, osp.join(osp.dirname(osp.dirname(__file__)),
                            'test_engine'))
from tiny_run_utils import TINY_CONFIG, tiny_cfg  # noqa: E402

SIDE = 16  # the tiny Digits run's images
# The README's demo model: LeCT v1 with sr_ratio 2/2/1 (not the default's
# 14/7/2, which no parameter shape tells apart)
DEMO = Config.fromfile(
    str(mim_root() / 'configs' / 'demo' / 'lect_digits.py')).model.to_dict()
DEMO_ARGS = model_args('lect_v1', DEMO)


def test_model_args_are_the_demos_architecture():
    assert DEMO_ARGS == dict(num_classes=10, in_chans=3, attn_cfg=[
        dict(sr_ratio=2), dict(sr_ratio=2), dict(sr_ratio=1)])
    with pytest.raises(ValueError, match=re.escape(
            "backbone.arch: 'v2' (the model of lect_v1: 'v1')")):
        model_args('lect_v1', dict(DEMO, backbone=dict(DEMO['backbone'],
                                                       arch='v2')))


@pytest.fixture(scope='module')
def trained(tmp_path_factory, load_script):
    """The demo's model trained for one epoch (4 steps) on the tiny Digits
    set; its checkpoint (which records its config) and a batch of
    normalised inputs with the trained model's logits."""
    work_dir = tmp_path_factory.mktemp('timm_run')
    # epoch_1.pth is what the tests load: no best checkpoint besides it
    cfg = tiny_cfg(work_dir, 'timm_lect_v1', **{
        'train_cfg.max_epochs': 1,
        'default_hooks.checkpoint.save_best': None
    })
    cfg.model = ConfigDict(DEMO, data_preprocessor=cfg.model
                           .get('data_preprocessor'))
    runner = Runner.from_cfg(cfg)
    runner.train()
    model = runner.model.eval()
    x = torch.randn(
        4, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(x, mode='tensor')
    return osp.join(work_dir, 'epoch_1.pth'), x, logits


@pytest.fixture(scope='module')
def from_file(trained):
    """``timm.create_model`` of the trained checkpoint with the demo's
    arguments (read-only)."""
    return timm.create_model('lect_v1', pretrained=True,
                             pretrained_cfg_overlay=dict(file=trained[0]),
                             **DEMO_ARGS)


def _logits(model, x):
    with torch.no_grad():
        return model.eval()(x)


def test_pretrained_file_and_load_checkpoint(trained, from_file):
    ckpt, x, expected = trained
    torch.testing.assert_close(_logits(from_file, x), expected)
    model = timm.create_model('lect_v1', attn_cfg=DEMO_ARGS['attn_cfg'])
    load_checkpoint(model, ckpt, filter_fn=checkpoint_filter_fn)
    torch.testing.assert_close(_logits(model, x), expected)
    # timm's adaptations: a grey-scale stem, a new head
    grey = timm.create_model(
        'lect_v1', pretrained=True, in_chans=1, num_classes=3,
        pretrained_cfg_overlay=dict(file=ckpt),
        attn_cfg=DEMO_ARGS['attn_cfg'], drop_path_rate=0.3)
    stem = 'backbone.stages.0.patch_embed.proj.weight'
    trained_stem = torch.load(ckpt, weights_only=True)['state_dict'][stem]
    torch.testing.assert_close(grey.state_dict()[stem],
                               trained_stem.sum(1, keepdim=True))
    assert _logits(grey, x[:, :1]).shape == (4, 3)


def test_a_file_of_other_arguments_is_refused_by_key(trained):
    """The demo's checkpoint into the default lect_v1 (sr_ratio 14/7/2)
    would load strictly (no shape differs) and compute something else:
    the config it records names the difference."""
    with pytest.raises(ValueError, match=re.escape(
            "records a model trained with other arguments than lect_v1: "
            "backbone.attn_cfg: the file's [{'sr_ratio': 2}, {'sr_ratio': "
            "2}, {'sr_ratio': 1}], the model's {}.")):
        timm.create_model('lect_v1', pretrained=True, device='meta',
                          pretrained_cfg_overlay=dict(file=trained[0]))


def test_hf_folder_round_trip(trained, tmp_path, load_script):
    """The converter reads the architecture from the checkpoint's recorded
    config into config.json; local-dir: rebuilds the demo's model and gives
    the mmpretrain model's logits exactly."""
    ckpt, x, expected = trained
    convert = load_script('tools/model_converters/lect_mm2timm_hf.py')
    out = tmp_path / 'hf'
    convert.main([ckpt, 'lect_v1', str(out), '--img-size', str(SIDE)])
    assert sorted(p.name for p in out.iterdir()) == ['config.json',
                                                     'model.safetensors']
    model = timm.create_model(f'local-dir:{out}', pretrained=True)
    assert model.model_cfg['backbone']['attn_cfg'] == DEMO_ARGS['attn_cfg']
    assert torch.equal(_logits(model, x), expected)
    data = timm.data.resolve_data_config(model=model)
    # the tiny config's 127.5 / 255
    assert tuple(data['mean']) == (0.5, 0.5, 0.5)
    assert tuple(data['input_size']) == (3, SIDE, SIDE)
    # as the README's user did: --config the demo's config
    demo = str(mim_root() / 'configs' / 'demo' / 'lect_digits.py')
    convert.main([ckpt, 'lect_v1', str(tmp_path / 'demo'), '--config', demo])
    config = json.loads((tmp_path / 'demo' / 'config.json').read_text())
    assert config['model_args']['attn_cfg'] == DEMO_ARGS['attn_cfg']
    model = timm.create_model(f'local-dir:{tmp_path / "demo"}',
                              pretrained=True)
    assert torch.equal(_logits(model, x), expected)
    # another config than the recorded one, or none at all, is refused
    with pytest.raises(SystemExit, match=re.escape(
            "backbone.type: the file's 'LeCT', the model's 'ResNet'")):
        convert.main([ckpt, 'lect_v1', str(tmp_path / 'x'), '--config',
                      TINY_CONFIG])
    bare = str(tmp_path / 'bare.pth')
    torch.save(model.state_dict(), bare)
    with pytest.raises(SystemExit, match='records no config'):
        convert.main([bare, 'lect_v1', str(tmp_path / 'y')])


def test_timm_state_dict_loads_strictly_into_the_config(
        trained, from_file, tmp_path):
    ckpt, x, expected = trained
    path = str(tmp_path / 'timm_state_dict.pth')
    torch.save(from_file.state_dict(), path)
    ref = MODELS.build(DEMO)
    lect_load(ref, path)  # lect_mm's loader: strict
    torch.testing.assert_close(_logits(ref, x), expected)
    cfg = dict(DEMO)
    cfg['init_cfg'] = dict(type='Pretrained', checkpoint=path)
    ref = MODELS.build(cfg)
    with DefaultScope.overwrite_default_scope('lect_mm'):
        ref.init_weights()
    torch.testing.assert_close(_logits(ref, x), expected)


def test_a_files_classes_and_channels_are_read_from_it(tmp_path):
    """pretrained_cfg_overlay=dict(file=...) of a 5-class grey-scale
    checkpoint: the head and stem load as trained (timm would drop a head
    whose classes differ from the pretrained_cfg's 10)."""
    torch.manual_seed(0)
    trained = timm.create_model('cct_2_3x2', num_classes=5, in_chans=1)
    path = str(tmp_path / 'five.pth')
    torch.save({'state_dict': trained.state_dict()}, path)
    model = timm.create_model('cct_2_3x2', num_classes=5, in_chans=1,
                              pretrained=True,
                              pretrained_cfg_overlay=dict(file=path))
    for k, v in trained.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    assert model.pretrained_cfg['num_classes'] == 5


def test_lect_reference_layout_loads_converted(lect_reference, tmp_path):
    """A checkpoint of the LeCT author's reference layout loads through the
    filter (lect_mm.models.convert) with the reference's logits; another
    layout for another backbone is refused by name."""
    ref = lect_reference.randomize_(
        lect_reference.ReferenceLeCT('v1'), seed=1).eval()
    path = str(tmp_path / 'ref.pth')
    torch.save({'model': ref.state_dict()}, path)
    model = timm.create_model('lect_v1', pretrained=True,
                              pretrained_cfg_overlay=dict(file=path))
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert (model.eval()(x) - ref(x)).abs().max() <= 1e-4
    with pytest.raises(ValueError, match=r'neither a lect_mm classifier '
                       r'\(no backbone\.\* key\) nor in a layout'):
        checkpoint_filter_fn({'blocks.0.w': torch.zeros(1)},
                             timm.create_model('cct_2_3x2', device='meta'))
    # the wrong model's file: both models named
    with pytest.raises(ValueError, match=re.escape(
            "The checkpoint holds a LeCT classifier in the LeCT author's "
            'reference layout, but the model asked for is vitae_xs '
            '(ViTAE).')):
        timm.create_model('vitae_xs', pretrained=True, device='meta',
                          pretrained_cfg_overlay=dict(file=path))


def test_another_backbones_checkpoint_is_named(trained):
    with pytest.raises(ValueError, match=re.escape(
            'The checkpoint holds a LeCT classifier (lect_mm layout), but '
            'the model asked for is ceit_gap (CeiT).')):
        timm.create_model('ceit_gap', pretrained=True, device='meta',
                          pretrained_cfg_overlay=dict(file=trained[0]))
