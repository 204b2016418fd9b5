"""mmpretrain's CIFAR classes on tiny pickles in the official format."""
import numpy as np
import pytest
from mmpretrain.datasets import CIFAR10, CIFAR100


def _ref_img(row):
    # one row holds the R, G and B planes, each 32x32 row-major
    return row.reshape(3, 32, 32).transpose(1, 2, 0)


@pytest.mark.parametrize('split', ['train', 'test'])
def test_cifar10(tmp_path, make_cifar10, cifar_no_md5, split):
    data, labels = make_cifar10(str(tmp_path), per_batch=2)[split]
    ds = CIFAR10(data_root=str(tmp_path), split=split, download=False)
    assert len(ds) == (10 if split == 'train' else 2)
    assert list(ds.get_gt_labels()) == labels
    for i in (0, len(ds) - 1):
        img = ds.get_data_info(i)['img']
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8
        np.testing.assert_array_equal(img, _ref_img(data[i]))
    assert ds.CLASSES[0] == 'airplane'


def test_cifar10_pixel_layout(tmp_path, make_cifar10, cifar_no_md5):
    data, _ = make_cifar10(str(tmp_path), per_batch=2)['test']
    ds = CIFAR10(data_root=str(tmp_path), split='test', download=False)
    # R plane first, then (row 3, col 20) at 3 * 32 + 20; B plane at 2048
    assert ds.get_data_info(1)['img'][3, 20, 0] == data[1, 3 * 32 + 20]
    assert ds.get_data_info(1)['img'][31, 0, 2] == data[1, 2048 + 31 * 32]


@pytest.mark.parametrize('split', ['train', 'test'])
def test_cifar100(tmp_path, make_cifar100, cifar_no_md5, split):
    data, fine = make_cifar100(str(tmp_path), num=3)[split]
    ds = CIFAR100(data_root=str(tmp_path), split=split, download=False)
    assert len(ds) == 3
    assert list(ds.get_gt_labels()) == fine
    np.testing.assert_array_equal(ds.get_data_info(2)['img'],
                                  _ref_img(data[2]))
    assert len(ds.CLASSES) == 100


def test_md5_mismatch_without_download_raises(tmp_path, make_cifar10,
                                              no_network):
    """With the real MD5s, generated files are rejected, not re-fetched."""
    make_cifar10(str(tmp_path))
    with pytest.raises(RuntimeError, match='download=True'):
        CIFAR10(data_root=str(tmp_path), split='train', download=False)
