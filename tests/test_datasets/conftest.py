"""Generators of tiny data sets in the official on-disk formats."""
import os
import os.path as osp
import pickle

import numpy as np
import pytest

STL10_IMG_BYTES = 3 * 96 * 96


def write_stl10(root, splits=None, class_names=None, seed=0):
    """Write ``root/stl10_binary/{split}_{X,y}.bin`` with random content.

    Args:
        root (str): Data root to create.
        splits (dict): ``{split: num_images}``. Defaults to train 3, test 2.
        class_names (list[str], optional): Written to ``class_names.txt``.

    Returns:
        dict: ``{split: (raw uint8 X of shape (N, 27648), labels 1..10)}``.
    """
    splits = splits or {'train': 3, 'test': 2}
    folder = osp.join(root, 'stl10_binary')
    os.makedirs(folder, exist_ok=True)
    rng = np.random.RandomState(seed)
    out = {}
    for split, num in splits.items():
        x = rng.randint(0, 256, (num, STL10_IMG_BYTES), dtype=np.uint8)
        x.tofile(osp.join(folder, f'{split}_X.bin'))
        y = None
        if split != 'unlabeled':
            y = (np.arange(num) % 10 + 1).astype(np.uint8)
            y.tofile(osp.join(folder, f'{split}_y.bin'))
        out[split] = (x, y)
    if class_names is not None:
        with open(osp.join(folder, 'class_names.txt'), 'w') as f:
            f.write('\n'.join(class_names) + '\n')
    return out


def _cifar_rows(rng, num):
    return rng.randint(0, 256, (num, 3 * 32 * 32), dtype=np.uint8)


def _dump(path, obj):
    with open(path, 'wb') as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar10(root, per_batch=2, seed=0):
    """Write ``root/cifar-10-batches-py`` in the official pickle format.

    Returns:
        dict: ``{'train': (data, labels), 'test': (data, labels)}`` with
        ``data`` the (N, 3072) rows (R, G, B planes, each row-major).
    """
    folder = osp.join(root, 'cifar-10-batches-py')
    os.makedirs(folder, exist_ok=True)
    rng = np.random.RandomState(seed)
    out = {}
    train = []
    for i in range(1, 6):
        data = _cifar_rows(rng, per_batch)
        labels = [int(v) for v in rng.randint(0, 10, per_batch)]
        _dump(osp.join(folder, f'data_batch_{i}'),
              dict(batch_label=f'training batch {i} of 5', labels=labels,
                   data=data,
                   filenames=[f'img_{i}_{j}.png' for j in range(per_batch)]))
        train.append((data, labels))
    out['train'] = (np.concatenate([d for d, _ in train]),
                    sum((lb for _, lb in train), []))
    data = _cifar_rows(rng, per_batch)
    labels = [int(v) for v in rng.randint(0, 10, per_batch)]
    _dump(osp.join(folder, 'test_batch'),
          dict(batch_label='testing batch 1 of 1', labels=labels, data=data,
               filenames=[f'test_{j}.png' for j in range(per_batch)]))
    out['test'] = (data, labels)
    _dump(osp.join(folder, 'batches.meta'),
          dict(num_cases_per_batch=per_batch, num_vis=3072,
               label_names=[f'c{i}' for i in range(10)]))
    return out


def write_cifar100(root, num=3, seed=0):
    """Write ``root/cifar-100-python`` in the official pickle format."""
    folder = osp.join(root, 'cifar-100-python')
    os.makedirs(folder, exist_ok=True)
    rng = np.random.RandomState(seed)
    out = {}
    for split in ('train', 'test'):
        data = _cifar_rows(rng, num)
        fine = [int(v) for v in rng.randint(0, 100, num)]
        _dump(osp.join(folder, split),
              dict(filenames=[f'{split}_{j}.png' for j in range(num)],
                   batch_label=f'{split} batch 1 of 1', fine_labels=fine,
                   coarse_labels=[v // 5 for v in fine], data=data))
        out[split] = (data, fine)
    _dump(osp.join(folder, 'meta'),
          dict(fine_label_names=[f'f{i}' for i in range(100)],
               coarse_label_names=[f'k{i}' for i in range(20)]))
    return out


@pytest.fixture
def no_network(monkeypatch):
    """Make any attempt to open a URL fail loudly."""
    import urllib.request

    def _refuse(*args, **kwargs):
        raise AssertionError('a test tried to use the network')

    monkeypatch.setattr(urllib.request, 'urlopen', _refuse)


@pytest.fixture
def cifar_no_md5(monkeypatch, no_network):
    """Let mmpretrain's CIFAR classes accept generated files.

    mmpretrain checks each pickle against the official MD5 and, on a
    mismatch, downloads the archive (or raises with ``download=False``).
    The MD5s are dropped (existence is still checked) and the download
    helper is replaced by one that fails the test.
    """
    import mmpretrain.datasets.cifar as cifar_mod
    from mmpretrain.datasets import CIFAR10, CIFAR100

    for cls in (CIFAR10, CIFAR100):
        for attr in ('train_list', 'test_list'):
            no_md5 = [[name, None] for name, _ in getattr(cls, attr)]
            monkeypatch.setattr(cls, attr, no_md5)

    def _refuse(*args, **kwargs):
        raise AssertionError('CIFAR tried to download')

    monkeypatch.setattr(cifar_mod, 'download_and_extract_archive', _refuse)


@pytest.fixture
def make_stl10():
    """:func:`write_stl10`, as a fixture (conftest is not importable)."""
    return write_stl10


@pytest.fixture
def make_cifar10():
    """:func:`write_cifar10`, as a fixture."""
    return write_cifar10


@pytest.fixture
def make_cifar100():
    """:func:`write_cifar100`, as a fixture."""
    return write_cifar100
