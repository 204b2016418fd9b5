"""The authors' published weights (SHI-Labs' CCT-7/3x1, FAIR's LeViT-128S)
through both doors, on files in the authors' layouts made at test time.

The layouts are pinned as data (``data/authors_layouts.json``: each key's
shape and dtype, read from the authors' code at the commits it names). A file
of that layout with distinct random values is put where torch's hub cache
keeps the download of the weights' URL, so that ``timm.create_model(...,
pretrained=True)`` and ``mmpretrain.get_model(..., pretrained=True)`` load it
through their own URL paths without a network; each tensor of the file must
reach the model once, unchanged. That the converted models compute the
authors' logits was checked against the authors' code itself (docs/timm.md).
"""
import json
import re
from pathlib import Path
from urllib.error import URLError

import mmpretrain
import pytest
import timm
import torch

import lect_mm.timm  # noqa: F401
from lect_mm.model_index import index_entry

LAYOUTS = json.loads(
    (Path(__file__).parent / 'data' / 'authors_layouts.json').read_text())
SHI = 'https://shi-labs.com/projects/cct/checkpoints/pretrained/'
# the authors' READMEs: tag -> (URL, top-1 they report)
URLS = {
    'cct_7_3x1.shi_cifar10_300e': SHI + 'cct_7_3x1_32_cifar10_300epochs.pth',
    'cct_7_3x1.shi_cifar100_300e':
    SHI + 'cct_7_3x1_32_cifar100_300epochs.pth',
    'cct_7_3x1.shi_sine_cifar10_1500e':
    SHI + 'cct_7_3x1_32_sine_cifar10_1500epochs.pth',
    'cct_7_3x1.shi_sine_cifar10_5000e':
    SHI + 'cct_7_3x1_32_sine_cifar10_5000epochs.pth',
    'cct_7_3x1.shi_sine_cifar100_1500e':
    SHI + 'cct_7_3x1_32_sine_cifar100_1500epochs.pth',
    'cct_7_3x1.shi_sine_cifar100_5000e':
    SHI + 'cct_7_3x1_32_sine_cifar100_5000epochs.pth',
    'flexible_levit_128s.fb_dist_in1k':
    'https://dl.fbaipublicfiles.com/LeViT/LeViT-128S-96703c44.pth',
}


def _authors_file(layout: str) -> dict:
    """A state dict of the pinned layout: floats distinct and random (BN
    variances positive), the integer buffers (LeViT's bias indices, BN
    counters) zeros."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for key, shape, dtype in LAYOUTS[layout]:
        if dtype != 'float32':
            out[key] = torch.zeros(shape, dtype=getattr(torch, dtype))
        elif key.endswith('running_var'):
            out[key] = 1 + 0.1 * torch.rand(shape, generator=g)
        else:
            out[key] = 0.1 * torch.randn(shape, generator=g)
    return out


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """torch's hub cache in ``tmp_path``: ``put(url, obj)`` makes ``url``'s
    download, as timm's and mmengine's URL loaders find it."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    folder = tmp_path / 'hub' / 'checkpoints'
    folder.mkdir(parents=True)

    def put(url, obj):
        torch.save(obj, folder / url.rsplit('/', 1)[1])

    return put


def _each_tensor_once(authors: dict, model: dict, anchors: dict):
    """Every float tensor of the authors' file is one tensor of the model,
    unchanged, and the anchors land where the key map says."""
    by_value = {}
    for key, value in model.items():
        if value.is_floating_point():
            by_value.setdefault(value.numpy().tobytes(), []).append(key)
    for key, value in authors.items():
        if value.is_floating_point():
            assert len(by_value.get(value.numpy().tobytes(), [])) == 1, key
    for theirs, ours in anchors.items():
        assert torch.equal(model[ours], authors[theirs]), theirs


def test_tags_are_listed_with_the_authors_urls():
    assert set(timm.list_pretrained('cct_7_3x1*')) | set(
        timm.list_pretrained('flexible_levit*')) == set(URLS)
    for name, url in URLS.items():
        assert timm.models.get_pretrained_cfg(name).url == url
        # the same weights' entry in the model index (mmpretrain's door)
        entry = index_entry(lect_mm.timm.mmpretrain_name(name))
        assert entry['Weights'] == 'lect_mm+' + url
    # a name alone: CCT-7 the authors' CIFAR-10 weights (the config's own
    # model); the LeViT the zoo's 10-class model, which has none
    assert timm.models.get_pretrained_cfg('cct_7_3x1').url == URLS[
        'cct_7_3x1.shi_cifar10_300e']
    assert not timm.models.get_pretrained_cfg('flexible_levit_128s').url
    sine = timm.create_model('cct_7_3x1.shi_sine_cifar100_5000e',
                             device='meta')
    assert sine.num_classes == 100
    assert sine.model_cfg['backbone']['positional_embedding'] == 'sine'
    assert sine.pretrained_cfg['std'] == (0.2675, 0.2565, 0.2761)


def test_cct_weights_by_url_in_both_doors(hub):
    """cct_7_3x1 with pretrained=True and the mmpretrain name load the
    authors' CIFAR-10 file converted, with the same logits."""
    authors = _authors_file('cct_7_3x1_32')
    hub(URLS['cct_7_3x1.shi_cifar10_300e'], authors)
    model = timm.create_model('cct_7_3x1', pretrained=True).eval()
    assert model.pretrained_cfg['tag'] == 'shi_cifar10_300e'
    _each_tensor_once(
        authors, model.state_dict(), {
            'classifier.positional_emb': 'backbone.pos_embed',
            'classifier.blocks.3.self_attn.qkv.weight':
            'backbone.layers.3.attn.qkv.weight',
            'classifier.blocks.6.linear1.bias':
            'backbone.layers.6.ffn.layers.0.0.bias',
            'classifier.blocks.6.linear2.weight':
            'backbone.layers.6.ffn.layers.1.weight',
            'classifier.attention_pool.weight':
            'backbone.seq_pool.attention_pool.weight',
            'classifier.fc.bias': 'head.fc.bias',
        })
    ref = mmpretrain.get_model(
        'cct-7-3x1_3rdparty-300e_cifar10', pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), ref(x, mode='tensor'))


def test_levit_weights_by_url_in_both_doors(hub):
    """FAIR's LeViT-128S: the flat blocks split into stages, both
    classifiers of the distillation head; the mmpretrain name loads the
    same state and gives the same logits."""
    authors = _authors_file('LeViT_128S')
    hub(URLS['flexible_levit_128s.fb_dist_in1k'], {'model': authors})
    model = timm.create_model('flexible_levit_128s.fb_dist_in1k',
                              pretrained=True)
    assert model.num_classes == 1000
    state = model.state_dict()
    _each_tensor_once(
        authors, state, {
            'patch_embed.6.c.weight':
            'backbone.patch_embed.patch_embed.6.conv.weight',
            'blocks.3.m.2.bn.bias':
            'backbone.stages.0.3.block.linear2.bn.bias',
            'blocks.4.kv.c.weight': 'backbone.stages.1.0.kv.linear.weight',
            'blocks.12.q.1.bn.weight': 'backbone.stages.2.0.q.1.bn.weight',
            'blocks.21.m.0.c.weight':
            'backbone.stages.2.9.block.linear1.linear.weight',
            'head_dist.l.bias': 'head.head_dist.linear.bias',
        })
    ref = mmpretrain.get_model('flexible-levit-128s_3rdparty_in1k',
                               pretrained=True).eval()
    assert all(torch.equal(ref.state_dict()[k], v) for k, v in state.items())
    # the distillation head's eval output, as mmpretrain's LeViTClsHead
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), ref(x, mode='tensor'))


def test_no_network_names_the_url_and_the_file_way(monkeypatch):
    def offline(url, *args, **kwargs):
        raise URLError('no network')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', offline)
    monkeypatch.setenv('TORCH_HOME', '/nonexistent/torch_home')
    url = URLS['cct_7_3x1.shi_cifar100_300e']
    with pytest.raises(RuntimeError, match=re.escape(
            f'Could not download {url} (no network). Without network, '
            'download it elsewhere and load the file, converted as from the '
            "URL: timm.create_model('cct_7_3x1.shi_cifar100_300e', "
            "pretrained=True, pretrained_cfg_overlay=dict(file='/path/to/"
            "cct_7_3x1_32_cifar100_300epochs.pth')).")):
        timm.create_model('cct_7_3x1.shi_cifar100_300e', pretrained=True,
                          device='meta')
    with pytest.raises(RuntimeError, match=re.escape(
            f"Could not download {url} (no network). Without network, "
            'download it elsewhere and load the file converted: '
            "get_model(name, pretrained='lect_mm+/path/to/FILE.pth')")):
        mmpretrain.get_model('cct-7-3x1_3rdparty-300e_cifar100',
                             pretrained=True)
