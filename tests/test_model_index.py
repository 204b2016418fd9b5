"""Every config has a name in model-index.yml, and mmpretrain's model hub
(list_models, get_model, inference_model) knows it after ``import lect_mm``.
"""
import json
import warnings
from pathlib import Path

import mmpretrain
import numpy as np
import pytest
import torch
from mmpretrain.apis import ModelHub
from modelindex.load_model_index import load

from lect_mm.model_index import mim_root, register_model_index

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ('lect', 'baselines', 'ceit', 'vitae', 'cct', 'levit',
            'fashion_mnist', 'demo')


def _index():
    """name -> (config path relative to the repo, model metainfo)."""
    index = load(str(REPO / 'model-index.yml'))
    index.build_models_with_collections()
    return {m.name: (m.config, m) for m in index.models}


INDEX = _index()
# One name per family and input protocol: what get_model builds in full.
BUILT = ('lect-v1_cifar10', 'lect-v2_cifar100', 'lect-v3_stl10',
         'lect-v1-ablation_stl10', 'lect-v1_digits', 'lect-v1-msa_digits',
         'lect-v3_fashion-mnist-cpu', 'resnet-report_cifar10',
         'convnext-report_fashion-mnist-cpu', 'vit-report_stl10',
         'alternet-18_cifar10', 'ceit-gap_cifar100', 'ceit-ref_stl10',
         'ceit-t_cifar10', 'vitae-xs_cifar10', 'vitae-t_stl10',
         'cct-2-3x2_cifar100', 'cct-7-3x1_fashion-mnist', 'levit-64s_cifar10',
         'levit-128s_stl10')


def test_every_leaf_config_has_exactly_one_name():
    """... but the model of several of the authors' weights (the CCT
    authors' 1,500- and 5,000-epoch sine weights), one name per weight."""
    leaves = {
        p.relative_to(REPO).as_posix()
        for family in FAMILIES
        for p in (REPO / 'configs' / family).glob('*.py')
    }
    configs = [config for config, meta in INDEX.values()
               if meta.weights is None]
    assert sorted(configs) == sorted(
        c for c in leaves if '_3rdparty_' not in c)
    assert len(configs) == len(set(configs))
    assert 'configs/fashion_mnist/lect_v3_fashion_mnist_cpu.py' in configs
    weighted = {config for config, meta in INDEX.values() if meta.weights}
    assert weighted == {c for c in leaves if '_3rdparty_' in c}


def test_names_follow_mmpretrain_style_and_ship_no_weights():
    """The zoo's own configs have no weights; the authors' weights (the
    `_3rdparty` names) load converted from the authors' URLs."""
    for name, (_, meta) in INDEX.items():
        # mmpretrain compares names case-sensitively before lowering them
        assert name == name.lower(), name
        parts = name.split('_')
        assert len(parts) in (2, 3) and all(parts), name
        if '_3rdparty' in name:
            source = meta.data['Converted From']['Weights']
            assert meta.weights == 'lect_mm+' + source, name
            assert meta.results[0].metrics['Top 1 Accuracy'] > 0, name
        else:
            assert len(parts) == 2 and meta.weights is None, name
        tasks = {r.task for r in meta.results}
        assert tasks == {'Image Classification'}, name
    assert INDEX['lect-v3_stl10'][0] == 'configs/lect/lect_v3_stl10.py'
    assert INDEX['lect-v1_fashion-mnist'][0] == (
        'configs/fashion_mnist/lect_v1_fashion_mnist.py')
    assert INDEX['lect-v1_fashion-mnist-cpu'][0] == (
        'configs/fashion_mnist/lect_v1_fashion_mnist_cpu.py')


def test_report_figures_stay_on_report_rows():
    assert INDEX['lect-v3_stl10'][1].results[0].metrics == {
        'Top 1 Accuracy': 83.47
    }
    assert INDEX['cct-7-3x1_cifar10'][1].results[0].metrics == {}
    # Fashion-MNIST: this library's measured cpu-protocol runs only
    assert all(INDEX[n][1].results[0].metrics == {} for n in INDEX
               if n.endswith('fashion-mnist'))
    measured = INDEX['lect-v1_fashion-mnist-cpu'][1].results[0].metrics
    assert set(measured) == {'Top 1 Accuracy', 'Top 5 Accuracy'}


def test_list_models_knows_every_name_next_to_mmpretrains_own():
    listed = set(mmpretrain.list_models())
    assert set(INDEX) <= listed
    assert 'resnet50_8xb32_in1k' in listed  # mmpretrain's index still loads
    lect = mmpretrain.list_models('lect*')
    assert lect == sorted(n for n in INDEX if n.startswith('lect'))
    # 12 CIFAR/STL10 configs, 2 digits demos, 13 Fashion-MNIST configs (v1,
    # v2, v3 and the ablation under the gpu and cpu protocols; v1, v3 and
    # the ablation under cpu112; v1 and v3 in the cost study), the folder
    # example
    assert len(lect) == 12 + 2 + 13 + 1
    classifiers = mmpretrain.list_models(
        'lect*', task='Image Classification')
    assert classifiers == lect


def test_every_name_resolves_to_its_config_file():
    root = mim_root()
    assert root == REPO  # a checkout: configs are read in place
    for name, (config, _) in INDEX.items():
        assert ModelHub._models_dict[name].config == str(root / config)
        assert (root / config).is_file(), config


def test_registering_twice_is_harmless():
    before = mmpretrain.list_models()
    register_model_index()
    register_model_index(REPO)
    register_model_index(str(REPO / 'configs' / '..'))
    assert mmpretrain.list_models() == before
    # without the guard, mmpretrain refuses the names as duplicates
    with pytest.raises(ValueError, match='conflict'):
        ModelHub.register_model_index(
            REPO / 'model-index.yml', config_prefix=REPO)


def test_registering_reads_yaml_only(monkeypatch):
    from mmengine.config import Config
    from mmpretrain.registry import MODELS

    import lect_mm.model_index as model_index

    def refuse(*args, **kwargs):
        raise AssertionError('registering must not build or parse configs')

    monkeypatch.setattr(MODELS, 'build', refuse)
    monkeypatch.setattr(Config, 'fromfile', refuse)
    monkeypatch.setattr(model_index, '_registered', set())
    monkeypatch.setattr(ModelHub, '_models_dict', {})
    register_model_index()
    register_model_index()
    assert sorted(ModelHub._models_dict) == sorted(INDEX)
    assert isinstance(ModelHub._models_dict['lect-v3_stl10'].config, str)


@pytest.mark.parametrize('name', BUILT)
def test_get_model_builds_by_name(name):
    model = mmpretrain.get_model(name)
    config = INDEX[name][0]
    assert Path(model._config.filename) == REPO / config
    assert model._metainfo.name == name
    assert not model.training
    assert model.head.num_classes == (100 if 'cifar100' in name else 10)


def test_get_model_forward_at_the_config_size():
    model = mmpretrain.get_model('lect-v1_digits', head=dict(num_classes=7))
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 7)


def test_inference_by_name_warns_that_weights_are_random():
    image = np.random.default_rng(0).integers(
        0, 256, (32, 32, 3), dtype=np.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = mmpretrain.inference_model('lect-v1_digits', image)
    assert any('Unable to find pre-defined checkpoint' in str(w.message)
               for w in caught)
    assert 0 <= result['pred_label'] < 10
    assert result['pred_scores'].shape == (10, )


def test_mim_root_prefers_the_installed_copy(tmp_path):
    package = tmp_path / 'site-packages' / 'lect_mm'
    (package / '.mim' / 'configs' / 'lect').mkdir(parents=True)
    (package / '.mim' / 'model-index.yml').write_text('Import: []\n')
    assert mim_root(package) == package / '.mim'


def test_mim_root_names_both_places_when_nothing_is_found(tmp_path):
    package = tmp_path / 'lect_mm'
    package.mkdir()
    # a stray `configs/` next to the package is not lect_mm's
    (tmp_path / 'configs').mkdir()
    with pytest.raises(FileNotFoundError, match=r'\.mim.*pip install'):
        mim_root(package)


@pytest.mark.parametrize('protocol', ['cpu', 'cpu112', 'cost'])
def test_fashion_mnist_metrics_are_the_means_of_the_results_runs(protocol):
    # The metafile's figures for a protocol are the means over seeds of the
    # runs docs/results keeps (tools/benchmark_accuracy.py's *_runs.json),
    # and every model with runs there has them. The cost study's configs
    # are its models at LeCT v1's CPU-time budget.
    results = REPO / 'docs' / 'results'
    runs_file = results / f'fashion_mnist_{protocol}_runs.json'
    runs = [dict(r, model=r['model'].replace('/', '-'))
            for r in json.loads(runs_file.read_text())
            if r.get('train_images', 10000) == 10000
            and 'cpu-time x1' in r.get('budgets', ['cpu-time x1'])]
    suffix = f'_fashion_mnist_{protocol}.py'
    listed = {}
    for name, (config, model) in INDEX.items():
        if not config.endswith(suffix):
            continue
        metrics = model.results[0].metrics or {}
        if metrics:
            listed[Path(config).name[:-len(suffix)]] = metrics
    measured = {r['model'] for r in runs}
    assert measured and set(listed) == measured
    for key, metrics in listed.items():
        mine = [r for r in runs if r['model'] == key]
        assert len(mine) == 3, key
        for metric, field in (('Top 1 Accuracy', 'top1'),
                              ('Top 5 Accuracy', 'top5')):
            if all(field in r for r in mine):
                mean = sum(r[field] for r in mine) / len(mine)
                assert metrics[metric] == pytest.approx(mean, abs=0.006), (
                    key, metric)
