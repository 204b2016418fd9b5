"""CheckedCIFAR10/100: each pickle of the split is checked, and a missing,
empty, truncated or altered one is named with its expected size or MD5."""
import os
import os.path as osp

import numpy as np
import pytest
from mmpretrain.registry import DATASETS

import lect_mm.datasets.cifar as cifar_mod
from lect_mm.datasets import CheckedCIFAR10, CheckedCIFAR100

C10 = 'cifar-10-batches-py'


@pytest.fixture
def no_download(monkeypatch, no_network):
    """Record download attempts instead of making them."""
    calls = []
    monkeypatch.setattr(cifar_mod, 'download_and_extract_archive',
                        lambda *args, **kwargs: calls.append(args))
    return calls


def _img(row):
    return row.reshape(3, 32, 32).transpose(1, 2, 0)


def test_registered():
    assert DATASETS.get('CheckedCIFAR10') is CheckedCIFAR10
    assert DATASETS.get('CheckedCIFAR100') is CheckedCIFAR100


@pytest.mark.parametrize('split', ['train', 'test'])
def test_reads_like_mmpretrain(tmp_path, make_cifar10, no_download, split):
    data, labels = make_cifar10(str(tmp_path), per_batch=2)[split]
    ds = CheckedCIFAR10(
        data_root=str(tmp_path), split=split, verify_md5=False)
    assert len(ds) == len(labels) == (10 if split == 'train' else 2)
    assert list(ds.get_gt_labels()) == labels
    for i in (0, len(ds) - 1):
        np.testing.assert_array_equal(ds.get_data_info(i)['img'],
                                      _img(data[i]))
    assert ds.CLASSES[0] == 'airplane'
    assert no_download == []


def test_cifar100_reads_fine_labels(tmp_path, make_cifar100, no_download):
    data, fine = make_cifar100(str(tmp_path), num=3)['test']
    ds = CheckedCIFAR100(data_root=str(tmp_path), split='test',
                         verify_md5=False)
    assert list(ds.get_gt_labels()) == fine and len(ds.CLASSES) == 100
    np.testing.assert_array_equal(ds.get_data_info(2)['img'], _img(data[2]))


def test_wrong_size_names_file_and_official_size(tmp_path, make_cifar10,
                                                 no_download):
    """The tests' tiny pickles are not the official files: with the default
    checks, each one is named with the official size, nothing is fetched."""
    make_cifar10(str(tmp_path), per_batch=2)
    with pytest.raises(ValueError) as info:
        CheckedCIFAR10(data_root=str(tmp_path), split='test')
    message = str(info.value)
    path = osp.join(str(tmp_path), C10, 'test_batch')
    assert f'{path} is truncated: {osp.getsize(path):,} bytes' in message
    assert ('expected 31,035,526 bytes: the official python pickle of '
            '10,000 images') in message
    assert 'download=True' in message
    assert no_download == []


def test_missing_file_is_named(tmp_path, make_cifar10, no_download):
    make_cifar10(str(tmp_path), per_batch=2)
    os.remove(osp.join(str(tmp_path), C10, 'data_batch_3'))
    with pytest.raises(FileNotFoundError) as info:
        CheckedCIFAR10(data_root=str(tmp_path), split='train',
                       verify_md5=False)
    assert (f"missing {osp.join(str(tmp_path), C10, 'data_batch_3')} "
            '(expected 31,035,999 bytes') in str(info.value)
    assert no_download == []


def test_missing_folder_is_named(tmp_path, no_download):
    with pytest.raises(FileNotFoundError, match='does not exist.*test_batch'):
        CheckedCIFAR10(data_root=str(tmp_path / 'nowhere'), split='test')
    assert no_download == []


def test_empty_file_is_named(tmp_path, make_cifar100, no_download):
    make_cifar100(str(tmp_path), num=2)
    path = osp.join(str(tmp_path), 'cifar-100-python', 'train')
    open(path, 'wb').close()
    with pytest.raises(ValueError) as info:
        CheckedCIFAR100(data_root=str(tmp_path), split='train',
                        verify_md5=False)
    assert (f'{path} is empty (0 bytes; expected 155,249,918 bytes: the '
            'official python pickle of 50,000 images)') in str(info.value)


def test_truncated_pickle_is_named(tmp_path, make_cifar10, no_download):
    """Without the size check (verify_md5=False), a cut file still fails
    with its name, when it is unpickled."""
    make_cifar10(str(tmp_path), per_batch=2)
    path = osp.join(str(tmp_path), C10, 'test_batch')
    with open(path, 'rb') as f:
        head = f.read(osp.getsize(path) // 2)
    with open(path, 'wb') as f:
        f.write(head)
    with pytest.raises(ValueError) as info:
        CheckedCIFAR10(data_root=str(tmp_path), split='test',
                       verify_md5=False)
    message = str(info.value)
    assert f'{path} ({len(head):,} bytes) cannot be unpickled' in message
    assert 'Expected 31,035,526 bytes' in message


def test_altered_file_of_official_size_fails_md5(tmp_path, make_cifar10,
                                                 no_download, monkeypatch):
    make_cifar10(str(tmp_path), per_batch=2)
    path = osp.join(str(tmp_path), C10, 'test_batch')
    size = osp.getsize(path)
    # Pretend the tiny file had the official size: the MD5 decides.
    monkeypatch.setattr(CheckedCIFAR10, 'file_sizes',
                        {'test_batch': (size, 10000)})
    with pytest.raises(ValueError) as info:
        CheckedCIFAR10(data_root=str(tmp_path), split='test')
    assert (f'{path} is corrupted: MD5 {cifar_mod.calculate_md5(path)}, '
            'expected 40351d587109b95175f43aff81a1287e') in str(info.value)
    # Right size and MD5 but the wrong number of images.
    monkeypatch.setattr(CheckedCIFAR10, 'test_list',
                        [['test_batch', cifar_mod.calculate_md5(path)]])
    with pytest.raises(ValueError, match='holds 2 images, expected 10,000'):
        CheckedCIFAR10(data_root=str(tmp_path), split='test')


def test_download_only_when_asked(tmp_path, make_cifar10, no_download):
    make_cifar10(str(tmp_path), per_batch=2)
    with pytest.raises(ValueError):
        CheckedCIFAR10(data_root=str(tmp_path), split='test')
    assert no_download == []
    with pytest.raises(ValueError, match='test_batch is truncated'):
        CheckedCIFAR10(data_root=str(tmp_path), split='test', download=True)
    assert len(no_download) == 1
    assert no_download[0][0] == CheckedCIFAR10.url


class _WritesMarker:
    """Unpickles into ``open(marker, 'w')``: running it creates the file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


@pytest.mark.parametrize('verify_md5', [False, True])
def test_crafted_pickle_runs_no_code(tmp_path, make_cifar10, no_download,
                                     verify_md5):
    """A data_batch_1 whose pickle would create a file: plain unpickling
    runs it, CheckedCIFAR10 refuses the file without running it."""
    import pickle
    make_cifar10(str(tmp_path), per_batch=2)
    path = osp.join(str(tmp_path), C10, 'data_batch_1')
    marker = tmp_path / 'marker'
    with open(path, 'wb') as f:
        pickle.dump(dict(data=_WritesMarker(str(marker)), labels=[0, 1]), f,
                    protocol=2)
    with open(path, 'rb') as f:
        pickle.load(f)['data'].close()  # as pickle.loads did: it runs
    assert marker.exists()
    marker.unlink()
    with pytest.raises(ValueError) as info:
        CheckedCIFAR10(data_root=str(tmp_path), split='train',
                       verify_md5=verify_md5)
    assert not marker.exists()
    if verify_md5:  # the size check stops it before any unpickling
        assert f'{path} is truncated' in str(info.value)
    else:
        assert str(info.value).startswith(
            f'CheckedCIFAR10: {path} is not a CIFAR python pickle: it would '
            'run code when unpickled (refused to load io.open')
        assert 'Nothing was run' in str(info.value)


@pytest.mark.parametrize('protocol', [2, 4, 5])
def test_restricted_unpickler_reads_cifar_pickles(protocol):
    """The official files' contents, written by numpy 1.x (``numpy.core``)
    or 2.x, under the protocols Python 2 and 3 write."""
    import pickle
    entry = dict(batch_label='b', labels=[3, 1], filenames=['a.png', 'b.png'],
                 data=np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072),
                 raw=b'\x00\xff')
    raw = pickle.dumps(entry, protocol=protocol)
    variants = [raw]
    if protocol == 2:  # as numpy 1.x names the reconstructor
        variants.append(
            raw.replace(b'numpy._core.multiarray', b'numpy.core.multiarray'))
    for raw in variants:
        loaded = cifar_mod.load_cifar_pickle(raw)
        assert loaded.keys() == entry.keys()
        np.testing.assert_array_equal(loaded['data'], entry['data'])
        assert loaded['raw'] == b'\x00\xff'
    with pytest.raises(cifar_mod.UnsafePickleError, match='posix.system'):
        cifar_mod.load_cifar_pickle(
            b'cposix\nsystem\n(S"echo hi"\ntR.')
