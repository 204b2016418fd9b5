import hashlib
import os
import os.path as osp
import tarfile

import numpy as np
import pytest
from mmpretrain.registry import DATASETS

import lect_mm.datasets.stl10 as stl10_mod
from lect_mm.datasets import STL10

STL10_IMG_BYTES = 3 * 96 * 96
STANDARD = ('airplane', 'bird', 'car', 'cat', 'deer', 'dog', 'horse',
            'monkey', 'ship', 'truck')


def test_registered():
    assert DATASETS.get('STL10') is STL10


@pytest.mark.parametrize('split', ['train', 'test'])
def test_images_labels_and_default_classes(tmp_path, make_stl10, split):
    raw = make_stl10(str(tmp_path), {'train': 3, 'test': 12})
    ds = STL10(data_root=str(tmp_path), split=split)
    x, y = raw[split]
    assert len(ds) == len(y)
    assert ds.CLASSES == STANDARD
    labels = ds.get_gt_labels()
    np.testing.assert_array_equal(labels, y.astype(np.int64) - 1)
    assert labels.min() >= 0 and labels.max() <= 9
    img = ds.get_data_info(0)['img']
    assert img.shape == (96, 96, 3) and img.dtype == np.uint8
    # the whole image follows torchvision's orientation:
    # reshape (3, 96, 96) then swap the two spatial axes, then HWC
    ref = x[0].reshape(3, 96, 96).transpose(0, 2, 1).transpose(1, 2, 0)
    np.testing.assert_array_equal(img, ref)


def test_pixel_orientation(tmp_path):
    """Bytes are channel-major, then column-major inside a channel."""
    folder = tmp_path / 'stl10_binary'
    folder.mkdir()
    x = np.zeros(STL10_IMG_BYTES, dtype=np.uint8)
    plane = 96 * 96
    # red at (row 5, col 70); green at (row 90, col 2); byte offset of
    # (channel c, row h, col w) is c * 96 * 96 + w * 96 + h
    x[0 * plane + 70 * 96 + 5] = 255
    x[1 * plane + 2 * 96 + 90] = 200
    x.tofile(folder / 'train_X.bin')
    np.array([3], dtype=np.uint8).tofile(folder / 'train_y.bin')

    ds = STL10(data_root=str(tmp_path), split='train')
    img = ds.get_data_info(0)['img']
    assert img[5, 70, 0] == 255
    assert img[90, 2, 1] == 200
    assert np.count_nonzero(img) == 2
    assert ds.get_data_info(0)['gt_label'] == 2


def test_class_names_file_and_override(tmp_path, make_stl10):
    names = [f'name{i}' for i in range(10)]
    make_stl10(str(tmp_path), class_names=names)
    assert STL10(data_root=str(tmp_path)).CLASSES == tuple(names)
    mine = tuple(f'mine{i}' for i in range(10))
    assert STL10(data_root=str(tmp_path),
                 metainfo=dict(classes=mine)).CLASSES == mine
    assert STL10(data_root=str(tmp_path), classes=list(mine)).CLASSES == mine


def test_class_names_file_wrong_length(tmp_path, make_stl10):
    make_stl10(str(tmp_path), class_names=['a', 'b'])
    with pytest.raises(ValueError, match='class_names.txt lists 2'):
        STL10(data_root=str(tmp_path))


def test_unlabeled_split(tmp_path, make_stl10):
    make_stl10(str(tmp_path), {'unlabeled': 2})
    ds = STL10(data_root=str(tmp_path), split='unlabeled')
    assert len(ds) == 2
    assert 'gt_label' not in ds.get_data_info(1)
    assert ds.get_data_info(1)['img'].shape == (96, 96, 3)


def test_pipeline_output(tmp_path, make_stl10):
    make_stl10(str(tmp_path))
    ds = STL10(
        data_root=str(tmp_path),
        split='test',
        pipeline=[dict(type='Resize', scale=32), dict(type='PackInputs')])
    out = ds[1]
    assert tuple(out['inputs'].shape) == (3, 32, 32)
    assert int(out['data_samples'].gt_label) == 1


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="split='val'.*'train', 'test'"):
        STL10(data_root=str(tmp_path), split='val')
    with pytest.raises(ValueError, match='data_root must be set'):
        STL10()


def test_missing_root(tmp_path):
    root = str(tmp_path / 'nowhere')
    with pytest.raises(FileNotFoundError) as err:
        STL10(data_root=root)
    assert root in str(err.value)
    assert 'train,test' in str(err.value) and 'download=True' in str(err.value)


def test_missing_file(tmp_path, make_stl10):
    make_stl10(str(tmp_path))
    os.remove(tmp_path / 'stl10_binary' / 'test_y.bin')
    STL10(data_root=str(tmp_path), split='train')  # train is complete
    with pytest.raises(FileNotFoundError) as err:
        STL10(data_root=str(tmp_path), split='test')
    msg = str(err.value)
    assert osp.join(str(tmp_path), 'stl10_binary', 'test_y.bin') in msg
    assert "['test_X.bin', 'test_y.bin']" in msg


def test_truncated_file(tmp_path, make_stl10):
    make_stl10(str(tmp_path), {'train': 3})
    x_path = tmp_path / 'stl10_binary' / 'train_X.bin'
    data = x_path.read_bytes()
    x_path.write_bytes(data[:-100])
    with pytest.raises(ValueError) as err:
        STL10(data_root=str(tmp_path))
    msg = str(err.value)
    assert str(x_path) in msg
    assert f'has {3 * STL10_IMG_BYTES - 100} bytes' in msg
    assert f'expected {3 * STL10_IMG_BYTES}' in msg


def test_images_labels_count_mismatch(tmp_path, make_stl10):
    make_stl10(str(tmp_path), {'train': 3})
    np.arange(1, 5, dtype=np.uint8).tofile(
        tmp_path / 'stl10_binary' / 'train_y.bin')
    with pytest.raises(ValueError, match=f'expected {4 * STL10_IMG_BYTES}'):
        STL10(data_root=str(tmp_path))


def test_unlabeled_truncated(tmp_path, make_stl10):
    make_stl10(str(tmp_path), {'unlabeled': 1})
    x_path = tmp_path / 'stl10_binary' / 'unlabeled_X.bin'
    x_path.write_bytes(x_path.read_bytes()[:1000])
    with pytest.raises(ValueError, match=f'multiple of {STL10_IMG_BYTES}'):
        STL10(data_root=str(tmp_path), split='unlabeled')


@pytest.mark.parametrize('bad', [0, 11])
def test_labels_out_of_range(tmp_path, make_stl10, bad):
    make_stl10(str(tmp_path), {'train': 3})
    np.array([1, bad, 10], dtype=np.uint8).tofile(
        tmp_path / 'stl10_binary' / 'train_y.bin')
    with pytest.raises(ValueError, match=rf'outside 1\.\.10: \[{bad}\].*1'):
        STL10(data_root=str(tmp_path))


# ---------------------------------------------------------------- download
def _make_archive(tmp_path, make_stl10):
    src = tmp_path / 'src'
    make_stl10(str(src), {'train': 2, 'test': 1},
               class_names=[f'n{i}' for i in range(10)])
    archive = tmp_path / 'stl10_binary.tar.gz'
    with tarfile.open(archive, 'w:gz') as tar:
        tar.add(src / 'stl10_binary', arcname='stl10_binary')
    return archive, hashlib.md5(archive.read_bytes()).hexdigest()


@pytest.fixture
def fake_download(tmp_path, monkeypatch, no_network, make_stl10):
    archive, md5 = _make_archive(tmp_path, make_stl10)
    calls = []

    def _download(url, dst, *args, **kwargs):
        calls.append((url, dst))
        with open(dst, 'wb') as f:
            f.write(archive.read_bytes())

    monkeypatch.setattr(stl10_mod, 'download_url_to_file', _download)
    return md5, calls


def test_official_archive_constants():
    assert STL10.url == \
        'http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz'
    assert STL10.tgz_md5 == '91f7769df0f17e558f3565bffb0c7dfb'


def test_download_good_checksum_extracts(tmp_path, monkeypatch,
                                         fake_download):
    md5, calls = fake_download
    monkeypatch.setattr(STL10, 'tgz_md5', md5)
    root = tmp_path / 'data'
    root.mkdir()
    # a stale partial archive is not trusted: it is fetched again
    (root / 'stl10_binary.tar.gz').write_bytes(b'partial')
    ds = STL10(data_root=str(root), split='train', download=True)
    assert len(ds) == 2 and ds.CLASSES[0] == 'n0'
    assert calls == [(STL10.url, str(root / 'stl10_binary.tar.gz'))]
    assert (root / 'stl10_binary' / 'test_X.bin').is_file()

    # files present: no second download; verified archive is reused
    STL10(data_root=str(root), split='test', download=True)
    assert len(calls) == 1
    (root / 'stl10_binary' / 'test_X.bin').unlink()
    assert len(STL10(data_root=str(root), split='test', download=True)) == 1
    assert len(calls) == 1


def test_download_bad_checksum_extracts_nothing(tmp_path, monkeypatch,
                                                fake_download):
    _, calls = fake_download
    monkeypatch.setattr(STL10, 'tgz_md5', '0' * 32)
    root = tmp_path / 'data'
    with pytest.raises(RuntimeError, match='expected 0{32}.*nothing was '
                       'extracted'):
        STL10(data_root=str(root), download=True)
    assert len(calls) == 1
    assert not (root / 'stl10_binary').exists()
    assert not (root / 'stl10_binary.tar.gz').exists()


def test_no_download_by_default(tmp_path, fake_download):
    _, calls = fake_download
    with pytest.raises(FileNotFoundError):
        STL10(data_root=str(tmp_path / 'data'))
    assert calls == []
