import numpy as np
import pytest
from mmpretrain.registry import DATASETS

from lect_mm.datasets import Digits


@pytest.fixture(scope='module')
def splits():
    return Digits(split='train'), Digits(split='val')


def _sources(ds):
    return np.array(
        [ds.get_data_info(i)['source_idx'] for i in range(len(ds))])


def test_registered():
    assert DATASETS.get('Digits') is Digits


def test_split_sizes_and_stratification(splits):
    train, val = splits
    assert (len(train), len(val)) == (1438, 359)
    val_counts = np.bincount(val.get_gt_labels(), minlength=10)
    train_counts = np.bincount(train.get_gt_labels(), minlength=10)
    assert val_counts.min() >= 35 and val_counts.max() <= 37
    assert train_counts.min() >= 139
    assert train.CLASSES == tuple(str(i) for i in range(10))


def test_disjoint_and_complete(splits):
    train, val = splits
    tr, va = _sources(train), _sources(val)
    assert len(set(tr)) == len(tr) and len(set(va)) == len(va)
    assert not set(tr) & set(va)
    assert set(tr) | set(va) == set(range(1797))


def test_image_shape_dtype_and_content(splits):
    train, _ = splits
    info = train.get_data_info(0)
    img = info['img']
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert (img[..., 0] == img[..., 1]).all()
    assert (img[..., 0] == img[..., 2]).all()
    assert img.max() > 200


def test_deterministic_and_seeded(splits):
    _, val = splits
    again = Digits(split='val')
    np.testing.assert_array_equal(_sources(again), _sources(val))
    np.testing.assert_array_equal(again.get_data_info(7)['img'],
                                  val.get_data_info(7)['img'])
    other = Digits(split='val', seed=1)
    assert set(_sources(other)) != set(_sources(val))


def test_image_size_and_ratio():
    ds = Digits(split='val', image_size=8, val_ratio=0.5)
    assert ds.get_data_info(0)['img'].shape == (8, 8, 3)
    assert len(ds) == 898  # per class round(n / 2), half to even


@pytest.mark.parametrize('kwargs, match', [
    (dict(split='test'), "split='test'.*'train', 'val'"),
    (dict(val_ratio=1.0), 'val_ratio'),
    (dict(image_size=4), 'image_size'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Digits(**kwargs)


def test_arrays_and_labels_are_scikit_learns_digits(splits):
    """The only test that imports scikit-learn (about a second of CPU, in
    each pytest worker that does)."""
    from sklearn.datasets import load_digits

    from lect_mm.datasets.digits import load_digits_arrays
    images, labels = load_digits_arrays()
    reference = load_digits()
    np.testing.assert_array_equal(images, reference.images)
    np.testing.assert_array_equal(labels, reference.target)
    assert labels.dtype == np.int64
    with pytest.raises(ValueError, match='read-only'):
        images[0, 0, 0] = 1
    # a sample's label is that of its source_idx in load_digits()
    info = splits[0].get_data_info(0)
    assert info['gt_label'] == reference.target[info['source_idx']]
