import numpy as np
import pytest
import torch
import torch.nn as nn

TINY_LECT = """
custom_imports = dict(imports=['lect_mm'], allow_failed_imports=False)
default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LeCT',
        arch=dict(embed_dims=[8, 16], depths=[1, 2], num_heads=[1, 2],
                  ffn_ratios=[1, 1],
                  attn_cfgs=[dict(type='LeMSA', sr_ratio=2),
                             dict(type='LeMSA', sr_ratio=2)]),
        img_size=32, out_indices=(1, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=16))
data_preprocessor = dict(num_classes=10, mean=[128.] * 3, std=[64.] * 3,
                         to_rgb=False)
test_dataloader = dict(dataset=dict(type='Digits', split='val',
                                    pipeline=[dict(type='PackInputs')]))
"""


@pytest.fixture(scope='module')
def va(load_script):
    return load_script('tools/visualization/vis_attention.py')


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    import mmcv
    root = tmp_path_factory.mktemp('vis')
    img = (np.random.RandomState(0).rand(32, 32, 3) * 255).astype(np.uint8)
    mmcv.imwrite(img, str(root / 'img.png'))
    (root / 'tiny_lect.py').write_text(TINY_LECT)
    return root


def _png_size(path):
    import matplotlib.image as mpimg
    img = mpimg.imread(str(path))
    return img.shape[1], img.shape[0]


def test_lemsa_maps_and_png(va, files, capsys):
    out = files / 'lemsa.png'
    res = va.main([
        str(files / 'img.png'), str(files / 'tiny_lect.py'), '--queries',
        '0.25,0.5', '1,1', '--out', str(out), '--panel-size', '64'
    ])
    assert 'initialised (untrained) weights' in capsys.readouterr().out
    # 2 stages x 2 queries; 1 image column + at most 2 heads.
    assert len(res['rows']) == 4
    assert res['size'] == (3 * 64 + 56, 4 * 64 + 24)  # + colour bars
    assert _png_size(out) == res['size']

    records = res['records']
    assert [r['hw'] for r in records] == [(8, 8), (4, 4), (4, 4)]
    assert [r['query_grid'] for r in records] == [(4, 4), (2, 2), (2, 2)]
    for rec, heads in zip(records, (1, 2, 2)):
        h, w = rec['hw']
        gh, gw = rec['query_grid']
        assert rec['attn'].shape == (1, heads, gh * gw, h * w)
        assert rec['num_extra'] == 0
        torch.testing.assert_close(rec['attn'].sum(-1),
                                   torch.ones(1, heads, gh * gw))
        # the opt-in switch is off again and the stored map released
        assert rec['module'].return_attn_map is False
        assert rec['module'].attn_map is None

    # relative (0.25, 0.5) -> pooled cell (1, 2) of 4x4; (1, 1) is an index
    cells = [(r['stage'], r['block'], r['cell']) for r in res['rows']]
    assert cells == [(0, 0, (1, 2)), (0, 0, (1, 1)), (1, 1, (0, 1)),
                     (1, 1, (1, 1))]
    row = res['rows'][0]
    torch.testing.assert_close(row['maps'],
                               records[0]['attn'][0, :, 6].reshape(1, 8, 8))


def test_recording_matches_literal_and_keeps_output(va, files):
    from mmengine.config import Config
    cfg = Config.fromfile(str(files / 'tiny_lect.py'))
    model = va.load_model(cfg)
    inputs, image = va.prepare_input(model, cfg, str(files / 'img.png'))
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8
    with torch.no_grad():
        plain = model(inputs, mode='tensor')
    records, output = va.record_attention(model, inputs)
    torch.testing.assert_close(output, plain)
    # --img-size resizes the pipeline output before the model
    resized, shown = va.prepare_input(model, cfg, str(files / 'img.png'),
                                      img_size=(40, 48))
    assert resized.shape == (1, 3, 40, 48) and shown.shape == (40, 48, 3)
    # the fused path's map equals the literal (readable) path's softmax
    for rec in records:
        rec['module'].impl = 'literal'
    literal, _ = va.record_attention(model, inputs)
    for a, b in zip(records, literal):
        torch.testing.assert_close(a['attn'], b['attn'], atol=1e-6,
                                   rtol=1e-5)


def test_plain_msa_via_cfg_options(va, files):
    out = files / 'msa.png'
    res = va.main([
        str(files / 'img.png'), str(files / 'tiny_lect.py'), '--stage', '1',
        '--block', '0', '--queries', '0,0', '3,-1', '--out', str(out),
        '--panel-size', '50', '--cfg-options',
        'model.backbone.attn_cfg.type=MultiheadSelfAttention'
    ])
    assert type(res['records'][0]['module']).__name__ == \
        'MultiheadSelfAttention'
    assert [r['query_grid'] for r in res['records']] == [(8, 8), (4, 4),
                                                         (4, 4)]
    assert [r['cell'] for r in res['rows']] == [(0, 0), (3, 3)]
    assert _png_size(out) == (3 * 50 + 56, 2 * 50 + 24)


class _ToyCeiT(nn.Module):
    """Class token + mmpretrain MultiheadAttention called without hw."""

    class Block(nn.Module):

        def __init__(self):
            super().__init__()
            from mmpretrain.models.utils import MultiheadAttention
            self.attn = MultiheadAttention(8, 2, qkv_bias=True)

        def forward(self, x, hw_shape):
            return x + self.attn(x)

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 4, 4)
        self.cls_token = nn.Parameter(torch.randn(1, 1, 8))
        self.layers = nn.ModuleList([self.Block(), self.Block()])

    def forward(self, x, mode='tensor'):
        x = self.embed(x)
        hw = x.shape[-2:]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1),
                       x.flatten(2).transpose(1, 2)], dim=1)
        for layer in self.layers:
            x = layer(x, hw)
        return x


def test_sdpa_wrapper_for_attention_without_switch(va):
    torch.manual_seed(0)
    model = _ToyCeiT().eval()
    x = torch.randn(1, 3, 12, 8)
    with torch.no_grad():
        plain = model(x)
        tokens = model.embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([model.cls_token, tokens], dim=1)
        qkv = model.layers[0].attn.qkv(tokens).reshape(1, 7, 3, 2, 4)
        q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)
        expected = (q @ k.transpose(-2, -1) * 4**-0.5).softmax(-1)
    records, output = va.record_attention(model, x)
    torch.testing.assert_close(output, plain)
    assert len(records) == 2
    rec = records[0]
    assert rec['hw'] == (3, 2) and rec['num_extra'] == 1
    assert rec['query_grid'] == (3, 2)
    torch.testing.assert_close(rec['attn'], expected)
    # the class token is dropped from both axes
    maps = va.head_maps(rec, (2, 1))
    torch.testing.assert_close(maps, expected[0, :, 1 + 5, 1:].reshape(
        2, 3, 2))
    # the wrapper is removed again
    assert 'scaled_dot_product_attention' in vars(model.layers[0].attn)
    assert not hasattr(
        model.layers[0].attn.scaled_dot_product_attention, '__wrapped__')
    assert model.layers[0].attn.scaled_dot_product_attention is \
        torch.nn.functional.scaled_dot_product_attention
    rows = va.select_rows(records, [0], [0, 1], [va.parse_query('0.9,0.9')])
    assert [(r['block'], r['cell']) for r in rows] == [(0, (2, 1)),
                                                       (1, (2, 1))]


def test_ceit_backbone(va, files):
    (files / 'tiny_ceit.py').write_text(
        "_base_ = ['./tiny_lect.py']\n"
        "custom_imports = dict(imports=['lect_mm', "
        "'lect_mm.models.backbones.ceit'], allow_failed_imports=False)\n"
        "model = dict(backbone=dict(_delete_=True, type='CeiT', arch=dict("
        "i2t_channels=8, embed_dims=16, num_layers=2, num_heads=2, "
        "ffn_ratio=1, pooling='lca', lca_ffn_ratio=1), img_size=32, "
        "patch_size=2), neck=None, head=dict(in_channels=16))\n")
    out = files / 'ceit.png'
    res = va.main([
        str(files / 'img.png'), str(files / 'tiny_ceit.py'), '--block', '0',
        '1', '--queries', '0.5,0.5', '--out', str(out), '--panel-size', '40'
    ])
    assert len(res['records']) == 2  # the LCA (class tokens only) is skipped
    assert all(r['num_extra'] == 1 and r['hw'] == (4, 4)
               for r in res['records'])
    assert [r['cell'] for r in res['rows']] == [(2, 2), (2, 2)]
    assert _png_size(out) == (3 * 40 + 56, 2 * 40 + 24)


def test_queries_and_cells(va):
    assert va.parse_query('0.25,0.5') == ('rel', (0.25, 0.5))
    assert va.parse_query('1,-1') == ('idx', (1, -1))
    assert va.query_cell(('rel', (1.0, 0.0)), (4, 3)) == (3, 0)
    assert va.query_cell(('idx', (-1, 1)), (4, 3)) == (3, 1)
    with pytest.raises(ValueError, match='outside the 4x3 query grid'):
        va.query_cell(('idx', (4, 0)), (4, 3))
    with pytest.raises(ValueError, match=r'\[0, 1\]'):
        va.parse_query('1.5,0.2')
    with pytest.raises(ValueError, match='not Y,X'):
        va.parse_query('0.5')
    with pytest.raises(SystemExit):
        va.parse_args(['img.png', 'cfg.py', '--queries', 'a,b'])

    lemsa = nn.Module()
    lemsa.sr_ratio, lemsa.pool_size = 2, None
    assert va.query_grid(lemsa, (7, 8), 16) == (4, 4)  # ceil mode
    assert va.cell_box(lemsa, (7, 8), (4, 4), (3, 1)) == (6, 7, 2, 4)
    lemsa.sr_ratio, lemsa.pool_size = None, (2, 2)
    assert va.query_grid(lemsa, (7, 8), 4) == (2, 2)
    assert va.cell_box(lemsa, (7, 8), (2, 2), (1, 0)) == (3, 7, 0, 4)
    with pytest.raises(RuntimeError, match='cannot lay 5 queries'):
        va.query_grid(lemsa, (7, 8), 5)


def test_stage_and_block_errors(va):
    recs = [dict(hw=(4, 4), query_grid=(4, 4), attn=torch.ones(1, 1, 16, 16),
                 num_extra=0, module=nn.Identity())]
    with pytest.raises(ValueError, match=r'choose from \[0\]'):
        va.select_rows(recs, [1], [-1], [('rel', (0.5, 0.5))])
    with pytest.raises(ValueError, match='1 attention block'):
        va.select_rows(recs, [0], [2], [('rel', (0.5, 0.5))])
    with pytest.raises(ValueError, match='no attention module'):
        va.record_attention(nn.Linear(2, 2), torch.ones(1, 2))


def test_checkpoint_is_loaded_strictly(va, files, tmp_path):
    from mmengine.config import Config
    cfg = Config.fromfile(str(files / 'tiny_lect.py'))
    torch.manual_seed(0)
    state = va.load_model(cfg).state_dict()
    good = tmp_path / 'good.pth'
    torch.save(dict(state_dict=state,
                    meta=dict(dataset_meta=dict(classes=list('abcdefghij')))),
               str(good))
    model = va.load_model(cfg, str(good))
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, state[key])
    assert model._dataset_meta['classes'][0] == 'a'

    wrong = dict(state)
    wrong['backbone.extra.weight'] = torch.zeros(1)
    del wrong['head.fc.bias']
    wrong['head.fc.weight'] = torch.zeros(5, 16)
    path = tmp_path / 'wrong.pth'
    torch.save(dict(state_dict=wrong), str(path))
    with pytest.raises(RuntimeError) as err:
        va.load_model(cfg, str(path))
    message = str(err.value)
    assert f'checkpoint {path} does not fit' in message
    assert 'tiny_lect.py' in message
    assert "unexpected key(s) (backbone.extra.weight)" in message
    assert 'missing key(s) in the checkpoint (head.fc.bias)' in message
    assert 'head.fc.weight: [5, 16] in the checkpoint' in message


def test_heads_of_a_row_share_one_scale_with_a_colour_bar(
        va, files, monkeypatch):
    from matplotlib.figure import Figure
    figures = []
    monkeypatch.setattr(Figure, 'savefig',
                        lambda fig, *args, **kwargs: figures.append(fig))
    res = va.main([
        str(files / 'img.png'), str(files / 'tiny_lect.py'), '--stage', '0',
        '1', '--queries', '0.5,0.5', '--out', str(files / 'scale.png')
    ])
    # per row, in order: the input, one panel per head, the colour bar
    axes = list(figures[0].axes)
    assert len(axes) == sum(r['maps'].shape[0] + 2 for r in res['rows'])
    for row in res['rows']:
        maps = row['maps']
        heads, bar = axes[1:maps.shape[0] + 1], axes[maps.shape[0] + 1]
        axes = axes[maps.shape[0] + 2:]
        clims = [ax.images[1].get_clim() for ax in heads]
        assert clims == [(0, float(maps.max()))] * maps.shape[0]
        assert bar._colorbar.mappable is heads[-1].images[1]
        assert bar.get_ylim() == (0, float(maps.max()))
    assert va.format_prob(0.000318) == '0.00032'
    assert va.format_prob(0.25) == '0.25' and va.format_prob(0) == '0'
