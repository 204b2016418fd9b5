import json

import pytest


@pytest.fixture(scope='module')
def pc(load_script):
    return load_script('tools/analysis_tools/plot_convergence.py')


def _write_run(work_dir, stamp, val, losses, iters_per_epoch=2):
    """Write a scalars.json as mmengine's LoggerHook does."""
    vis = work_dir / stamp / 'vis_data'
    vis.mkdir(parents=True)
    lines = []
    for epoch in sorted(set(val) | set(losses)):
        for i, loss in enumerate(losses.get(epoch, [])):
            step = (epoch - 1) * iters_per_epoch + i + 1
            lines.append(dict(lr=1e-3, data_time=0.01, loss=loss, time=0.1,
                              epoch=epoch, iter=step, memory=0, step=step))
        if epoch in val:
            lines.append({'accuracy/top1': val[epoch], 'data_time': 0.01,
                          'time': 0.05, 'step': epoch})
    (vis / 'scalars.json').write_text(
        '\n'.join(json.dumps(x) for x in lines) + '\n')


def _png_size(path):
    import matplotlib.image as mpimg
    img = mpimg.imread(str(path))
    return img.shape[1], img.shape[0]


def test_table_plot_and_threshold(pc, tmp_path, capsys):
    fast = tmp_path / 'fast'
    slow = tmp_path / 'slow'
    _write_run(fast, '20240101_000000',
               {1: 40.0, 2: 61.0, 3: 75.5, 4: 70.0},
               {1: [2.0, 1.0], 2: [1.0, 0.8], 3: [0.5, 0.5], 4: [0.4, 0.2]})
    _write_run(slow, '20240101_000000', {1: 10.0, 2: 30.0, 3: 55.25},
               {1: [2.3], 2: [2.0], 3: [1.5]})
    out = tmp_path / 'figs' / 'conv.png'
    table = pc.main([str(fast), str(slow), '--labels', 'A', 'B',
                     '--threshold', '60', '--out', str(out),
                     '--fig-size', '6', '3', '--dpi', '50'])
    printed = capsys.readouterr().out
    assert table in printed
    rows = table.splitlines()
    assert rows[0] == ('| run | best accuracy/top1 | epoch of best | '
                       'first epoch ≥ 60 |')
    assert rows[2] == '| A | 75.50 | 3 | 2 |'
    assert rows[3] == '| B | 55.25 | 3 | — |'
    assert out.is_file()
    assert _png_size(out) == (300, 150)


def test_loss_is_epoch_mean(pc, tmp_path):
    _write_run(tmp_path / 'w', '20240101_000000', {1: 1.0, 2: 2.0},
               {1: [2.0, 1.0], 2: [1.0, 0.5]})
    run = pc.load_run(str(tmp_path / 'w'))
    assert run['val'] == {1: 1.0, 2: 2.0}
    assert run['loss'] == pytest.approx({1: 1.5, 2: 0.75})


def test_resumed_runs_merge_by_epoch(pc, tmp_path):
    w = tmp_path / 'w'
    # First run crashed during epoch 3; the resumed run restarts at epoch 3.
    _write_run(w, '20240101_000000', {1: 10.0, 2: 20.0},
               {1: [3.0], 2: [2.0], 3: [9.9]})
    _write_run(w, '20240102_000000', {3: 30.0, 4: 40.0},
               {3: [1.0], 4: [0.5]})
    run = pc.load_run(str(w))
    assert run['val'] == {1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0}
    assert run['loss'] == {1: 3.0, 2: 2.0, 3: 1.0, 4: 0.5}
    latest = pc.load_run(str(w), latest_only=True)
    assert latest['val'] == {3: 30.0, 4: 40.0}


def test_fresh_restart_ignores_older_runs(pc, tmp_path):
    w = tmp_path / 'w'
    _write_run(w, '20240101_000000', {1: 5.0, 2: 6.0, 3: 7.0},
               {1: [1.0], 2: [1.0], 3: [1.0]})
    _write_run(w, '20240102_000000', {1: 50.0}, {1: [0.1]})
    (w / '20240103_000000').mkdir()  # a run that died before logging
    run = pc.load_run(str(w))
    assert run['val'] == {1: 50.0}


def test_errors(pc, tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        pc.load_run(str(tmp_path / 'missing'))
    (tmp_path / 'empty').mkdir()
    with pytest.raises(FileNotFoundError, match='scalars.json'):
        pc.load_run(str(tmp_path / 'empty'))
    with pytest.raises(SystemExit):
        pc.parse_args(['a', 'b', '--labels', 'only-one'])
