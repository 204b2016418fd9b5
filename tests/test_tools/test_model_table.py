import re

import pytest

from lect_mm.analysis import count_flops

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
def mt(load_script):
    return load_script('tools/analysis_tools/model_table.py')


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp('cfg') / 'tiny_lect.py'
    path.write_text(TINY_LECT)
    return str(path)


def test_params_flops_throughput(mt, config, tmp_path, capsys):
    plot = tmp_path / 'models.png'
    table = mt.main([
        config, '--shape', '32', '--throughput', '--batch-size', '2',
        '--warmup', '0', '--repeats', '1', '--plot',
        str(plot), '--fig-size', '4', '3', '--dpi', '50', '--cfg-options',
        'model.head.num_classes=5'
    ])
    import matplotlib.image as mpimg
    assert mpimg.imread(str(plot)).shape[:2] == (150, 200)
    assert table in capsys.readouterr().out
    lines = table.splitlines()
    assert lines[0] == ('| Model | Params (M) | FLOPs (G) @32×32 | '
                        'Throughput (img/s, bs 2, cpu) | Config |')
    assert len(lines) == 3

    from mmengine.config import Config
    from mmpretrain.apis import get_model
    cfg = Config.fromfile(config)
    cfg.merge_from_dict({'model.head.num_classes': 5})
    model = get_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    flops = count_flops(model, (3, 32, 32))
    assert flops > 0
    cells = [c.strip() for c in lines[2].strip('|').split('|')]
    assert cells[0] == 'tiny_lect'
    assert cells[1] == f'{params / 1e6:.4f}'
    assert cells[2] == f'{flops / 1e9:.3f}'
    assert float(cells[3]) > 0
    assert cells[4] == config

    row = mt.model_row(config, (3, 32, 32), cfg_options={
        'model.head.num_classes': 5})
    assert row['params'] == params
    assert row['flops'] is None and row['throughput'] is None


def test_markdown_format_and_args(mt):
    rows = [
        dict(name='a', config='a.py', params=1_151_600, flops=261_000_000,
             throughput=None),
        dict(name='b', config='b.py', params=2_000_000, flops=None,
             throughput=None),
    ]
    table = mt.markdown_table(rows, (3, 224, 224))
    assert table.splitlines() == [
        '| Model | Params (M) | FLOPs (G) @224×224 | Config |',
        '|---|---|---|---|',
        '| a | 1.1516 | 0.261 | a.py |',
        '| b | 2.0000 | — | b.py |',
    ]
    rows[0]['throughput'] = 123.45
    table = mt.markdown_table(rows, (3, 64, 32), batch_size=8)
    assert table.splitlines()[0] == ('| Model | Params (M) | FLOPs (G) '
                                     '@64×32 | Throughput (img/s, bs 8, '
                                     'cpu) | Config |')
    assert '| a | 1.1516 | 0.261 | 123.5 | a.py |' in table
    assert '| b | 2.0000 | — | — | b.py |' in table
    assert mt.parse_args(['c.py', '--shape', '96']).shape == [96, 96]
    with pytest.raises(SystemExit):
        mt.parse_args(['c.py', '--shape', '1', '2', '3'])
    with pytest.raises(SystemExit):
        mt.parse_args(['c.py', '--no-flops', '--plot', 'x.png'])
    with pytest.raises(ValueError, match='repeats'):
        mt.measure_throughput(None, (3, 8, 8), repeats=0)


def test_failing_config_gets_a_row_and_the_rest_is_measured(
        mt, config, tmp_path, capsys):
    broken = tmp_path / 'broken.py'
    broken.write_text(TINY_LECT.replace("type='LeCT'", "type='LeCTT'"))
    missing = str(tmp_path / 'missing.py')
    plot = tmp_path / 'models.png'
    with pytest.raises(SystemExit) as exc:
        mt.main([str(broken), config, missing, '--shape', '32', '--plot',
                 str(plot), '--fig-size', '2', '2', '--dpi', '20'])
    assert exc.value.code == (f'2 of 3 configs failed: {broken}, {missing}')
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith('|')]
    assert lines[0] == ('| Model | Params (M) | FLOPs (G) @32×32 | Config | '
                        'Error |')
    cells = [[c.strip() for c in line.strip('|').split('|')]
             for line in lines[2:]]
    assert [c[0] for c in cells] == ['broken', 'tiny_lect', 'missing']
    assert cells[0][1:4] == ['—', '—', str(broken)]
    assert cells[0][4].startswith('KeyError') and 'LeCTT' in cells[0][4]
    assert float(cells[1][1]) > 0
    assert re.fullmatch(r'\d+\.\d{3}', cells[1][2])  # measured FLOPs
    assert cells[1][4] == ''
    assert cells[2][4].startswith('FileNotFoundError')
    assert plot.exists()  # drawn from the configs that worked
