"""FashionMNISTIdx on tiny gzipped IDX files in the official layout."""
import gzip
import os.path as osp

import numpy as np
import pytest

from lect_mm.datasets import FashionMNISTIdx
from lect_mm.datasets.fashion_mnist import write_idx


def write_fashion_mnist(root, train=12, test=6, seed=0, gz=True):
    """Write ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``."""
    rng = np.random.RandomState(seed)
    ext = '.gz' if gz else ''
    out = {}
    for prefix, num in (('train', train), ('t10k', test)):
        images = rng.randint(0, 256, (num, 28, 28), dtype=np.uint8)
        labels = (np.arange(num) % 10).astype(np.uint8)
        write_idx(osp.join(root, f'{prefix}-images-idx3-ubyte{ext}'), images)
        write_idx(osp.join(root, f'{prefix}-labels-idx1-ubyte{ext}'), labels)
        out[prefix] = (images, labels)
    return out


@pytest.mark.parametrize('gz', [True, False])
def test_reads_images_and_labels(tmp_path, gz):
    data = write_fashion_mnist(str(tmp_path), gz=gz)
    ds = FashionMNISTIdx(data_root=str(tmp_path), split='train')
    assert len(ds) == 12
    images, labels = data['train']
    sample = ds.get_data_info(5)
    assert sample['img'].shape == (28, 28, 3)
    # three identical planes, equal to the stored grey image
    for c in range(3):
        np.testing.assert_array_equal(sample['img'][..., c], images[5])
    assert sample['gt_label'] == labels[5]
    test = FashionMNISTIdx(data_root=str(tmp_path), split='test', channels=1)
    assert len(test) == 6 and test.get_data_info(0)['img'].shape == (28, 28)
    assert test.CLASSES[0] == 'T-shirt/top' and len(test.CLASSES) == 10


def test_pipeline_and_subset(tmp_path):
    write_fashion_mnist(str(tmp_path))
    ds = FashionMNISTIdx(
        data_root=str(tmp_path), indices=4,
        pipeline=[dict(type='Resize', scale=64), dict(type='PackInputs')])
    assert len(ds) == 4
    assert tuple(ds[0]['inputs'].shape) == (3, 64, 64)


def test_missing_files_name_path_and_package(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        FashionMNISTIdx(data_root=str(tmp_path / 'nowhere'))
    msg = str(e.value)
    assert 'train-images-idx3-ubyte.gz' in msg
    assert 'apt-get install -y dataset-fashion-mnist' in msg


def _truncate(path, keep):
    with gzip.open(path, 'rb') as f:
        raw = f.read()
    with gzip.open(path, 'wb') as f:
        f.write(raw[:keep])


def test_truncated_file_names_file_and_expected_size(tmp_path):
    write_fashion_mnist(str(tmp_path))
    path = str(tmp_path / 'train-images-idx3-ubyte.gz')
    _truncate(path, 16 + 28 * 28 * 5)
    with pytest.raises(ValueError) as e:
        FashionMNISTIdx(data_root=str(tmp_path))
    msg = str(e.value)
    assert path in msg and 'truncated' in msg
    assert str(16 + 12 * 28 * 28) in msg  # expected size from the header


def test_cut_gzip_stream_is_reported(tmp_path):
    write_fashion_mnist(str(tmp_path))
    path = tmp_path / 'train-images-idx3-ubyte.gz'
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ValueError, match='truncated or damaged'):
        FashionMNISTIdx(data_root=str(tmp_path))


def test_empty_and_wrong_files(tmp_path):
    write_fashion_mnist(str(tmp_path))
    images = tmp_path / 'train-images-idx3-ubyte.gz'
    labels = tmp_path / 'train-labels-idx1-ubyte.gz'
    # labels and images swapped: the magic number tells
    images.write_bytes(labels.read_bytes())
    with pytest.raises(ValueError, match='magic number 0x0801'):
        FashionMNISTIdx(data_root=str(tmp_path))
    with gzip.open(images, 'wb'):
        pass
    with pytest.raises(ValueError, match='IDX header'):
        FashionMNISTIdx(data_root=str(tmp_path))


def test_inconsistent_counts_and_labels(tmp_path):
    write_fashion_mnist(str(tmp_path))
    write_idx(str(tmp_path / 'train-labels-idx1-ubyte.gz'), np.zeros(11))
    with pytest.raises(ValueError, match='12 images but .* 11 labels'):
        FashionMNISTIdx(data_root=str(tmp_path))
    write_idx(str(tmp_path / 'train-labels-idx1-ubyte.gz'), np.full(12, 10))
    with pytest.raises(ValueError, match='label 10 at index 0'):
        FashionMNISTIdx(data_root=str(tmp_path))


def test_bad_arguments():
    with pytest.raises(ValueError, match="split='val'"):
        FashionMNISTIdx(split='val')
    with pytest.raises(ValueError, match='channels must be 1 or 3'):
        FashionMNISTIdx(channels=2)
