"""Fashion-MNIST read from its IDX files, gzipped or not, without download."""
import gzip
import os.path as osp
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
from mmpretrain.datasets import BaseDataset
from mmpretrain.datasets.categories import FASHIONMNIST_CATEGORITES
from mmpretrain.registry import DATASETS

#: Where Debian's ``dataset-fashion-mnist`` package puts the files.
DEBIAN_FASHION_MNIST = '/usr/share/datasets/fashion-mnist'
#: IDX magic numbers: unsigned bytes, 3 dimensions (images) / 1 (labels).
IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 0x0803, 0x0801


def _open(path: str):
    return gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')


def read_idx(path: str, magic: int, ndim: int) -> np.ndarray:
    """Read one IDX file of unsigned bytes (``.gz`` or raw).

    Args:
        path (str): The file.
        magic (int): The expected magic number (type code 0x08 and the
            number of dimensions).
        ndim (int): The expected number of dimensions.

    Returns:
        np.ndarray: uint8 array of the shape the header declares.

    Raises:
        ValueError: naming the file when the header is not the expected one,
            the file is truncated (with the expected size) or too long.
    """
    try:
        with _open(path) as f:
            header = f.read(4 + 4 * ndim)
            if len(header) < 4 + 4 * ndim:
                raise ValueError(
                    f'{path}: {len(header)} bytes, shorter than the '
                    f'{4 + 4 * ndim}-byte IDX header; the file is empty or '
                    'truncated.')
            found = int.from_bytes(header[:4], 'big')
            if found != magic:
                raise ValueError(
                    f'{path}: IDX magic number {found:#06x}, expected '
                    f'{magic:#06x} (uint8, {ndim}-d); not the expected '
                    'IDX file.')
            shape = tuple(
                int.from_bytes(header[4 + 4 * i:8 + 4 * i], 'big')
                for i in range(ndim))
            count = int(np.prod(shape))
            data = f.read(count + 1)
    except (EOFError, OSError, gzip.BadGzipFile) as e:
        raise ValueError(
            f'{path}: cannot be read to the end ({type(e).__name__}: {e}); '
            'the file is truncated or damaged.') from e
    expected = 4 + 4 * ndim + count
    if len(data) < count:
        raise ValueError(
            f'{path}: {4 + 4 * ndim + len(data)} bytes of IDX data, expected '
            f'{expected} (header shape {shape}); the file is truncated.')
    if len(data) > count:
        raise ValueError(
            f'{path}: more than the {expected} bytes its header {shape} '
            'declares; the file is damaged.')
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


@DATASETS.register_module()
class FashionMNISTIdx(BaseDataset):
    """`Fashion-MNIST <https://github.com/zalandoresearch/fashion-mnist>`_
    from its official IDX files, gzipped or not; never downloads.

    70,000 grey 28×28 images of 10 clothing classes: ``train`` (60,000) and
    ``test`` (10,000). By default the files are read where Debian's
    ``dataset-fashion-mnist`` package installs them
    (``apt-get install -y dataset-fashion-mnist``):
    ``/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,
    labels-idx1}-ubyte.gz``. mmpretrain's ``FashionMNIST`` wants them
    un-gzipped and otherwise downloads them.

    The models of this library take three channels: with ``channels=3``
    (default) the grey plane is repeated into an ``(H, W, 3)`` array, so a
    model config is used unchanged and the first convolution sees three
    identical planes; ``channels=1`` yields ``(H, W)`` arrays.

    Args:
        data_root (str): Folder holding the files. Defaults to
            :data:`DEBIAN_FASHION_MNIST`.
        split (str): ``'train'`` or ``'test'``. Defaults to ``'train'``.
        channels (int): 3 (grey repeated) or 1. Defaults to 3.
        metainfo (dict, optional): Meta information, e.g. ``classes``.
        **kwargs: Other arguments of :class:`mmpretrain.datasets.BaseDataset`
            (``pipeline``, ``indices``, ``test_mode`` ...).
    """

    METAINFO = {'classes': FASHIONMNIST_CATEGORITES}
    split_prefix = {'train': 'train', 'test': 't10k'}

    def __init__(self,
                 data_root: str = DEBIAN_FASHION_MNIST,
                 split: str = 'train',
                 channels: int = 3,
                 metainfo: Optional[dict] = None,
                 **kwargs):
        if split not in self.split_prefix:
            raise ValueError(f'FashionMNISTIdx: split={split!r} is not '
                             f'valid, choose from {list(self.split_prefix)}')
        if channels not in (1, 3):
            raise ValueError('FashionMNISTIdx: channels must be 1 or 3, got '
                             f'{channels!r}')
        self.split = split
        self.channels = channels
        super().__init__(
            ann_file='',
            metainfo=metainfo,
            data_root=osp.expanduser(data_root),
            **kwargs)

    def files(self) -> Tuple[str, str]:
        """The (images, labels) files of the split, ``.gz`` preferred."""
        prefix = self.split_prefix[self.split]
        found = []
        for kind in ('images-idx3', 'labels-idx1'):
            name = osp.join(self.data_root, f'{prefix}-{kind}-ubyte')
            candidates = [name + '.gz', name]
            path = next((p for p in candidates if osp.isfile(p)), None)
            if path is None:
                raise FileNotFoundError(
                    f'FashionMNISTIdx: neither {candidates[0]} nor '
                    f'{candidates[1]} exists. Install the data set with '
                    '`apt-get install -y dataset-fashion-mnist` (files in '
                    f'{DEBIAN_FASHION_MNIST}) or set data_root to the '
                    'folder holding the official IDX files.')
            found.append(path)
        return tuple(found)

    def load_data_list(self) -> List[dict]:
        """Read the split into ``img`` (uint8 array) / ``gt_label`` dicts."""
        images_path, labels_path = self.files()
        images = read_idx(images_path, IDX_IMAGES_MAGIC, 3)
        labels = read_idx(labels_path, IDX_LABELS_MAGIC, 1)
        if len(images) != len(labels):
            raise ValueError(
                f'FashionMNISTIdx: {images_path} holds {len(images)} images '
                f'but {labels_path} {len(labels)} labels; the files do not '
                'belong together.')
        num_classes = len(self.metainfo['classes'])
        if labels.size and labels.max() >= num_classes:
            bad = int(np.flatnonzero(labels >= num_classes)[0])
            raise ValueError(
                f'FashionMNISTIdx: {labels_path} has label '
                f'{int(labels[bad])} at index {bad}, outside 0..'
                f'{num_classes - 1}.')
        if self.channels == 3:
            images = np.repeat(images[..., None], 3, axis=-1)
        return [
            dict(img=img, gt_label=int(label))
            for img, label in zip(images, labels)
        ]

    def extra_repr(self) -> List[str]:
        """The extra repr information of the dataset."""
        return [f'Split: \t{self.split}', f'Data folder: \t{self.data_root}']


def write_idx(path: str, array: Union[np.ndarray, Sequence]) -> None:
    """Write a uint8 array as an IDX file (gzipped when ``path`` ends with
    ``.gz``); the inverse of :func:`read_idx`, for tests and subsets."""
    array = np.asarray(array, dtype=np.uint8)
    magic = 0x0800 | array.ndim
    header = magic.to_bytes(4, 'big') + b''.join(
        int(d).to_bytes(4, 'big') for d in array.shape)
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'wb') as f:
        f.write(header + array.tobytes())
