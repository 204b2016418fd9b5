"""CIFAR-10/100 that name the damaged file instead of re-downloading.

mmpretrain's :class:`~mmpretrain.datasets.CIFAR10` and ``CIFAR100`` check the
MD5 of every pickle and, when one is missing or altered, either download the
archive again (``download=True``, its default) or say only "Cannot find
CIFAR10 dataset in ...". :class:`CheckedCIFAR10` and :class:`CheckedCIFAR100`
read the same files the same way but check each pickle of the split first
(present, official byte size, MD5, unpickles into the expected number of
images) and stop with an error naming the file, what is wrong with it and
what was expected, like :class:`~lect_mm.datasets.STL10`. They download only
with ``download=True``.

The pickles are read by :func:`load_cifar_pickle`, an unpickler that builds
only what the official files hold (dicts, lists, strings, bytes, numbers and
numpy arrays): a file that would call anything else (``os.system``,
``open``, ...) is refused before the call, whatever ``verify_md5``.
"""
import io
import os.path as osp
import pickle
from typing import List, Tuple

import mmengine.dist as dist
import numpy as np
from mmengine.fileio import LocalBackend, get_file_backend
from mmpretrain.datasets import CIFAR10, CIFAR100
from mmpretrain.datasets.utils import (calculate_md5,
                                       download_and_extract_archive)
from mmpretrain.registry import DATASETS

CIFAR_IMG_BYTES = 3 * 32 * 32

# The callables a CIFAR pickle may name: numpy's array reconstructors
# (numpy 1.x writes ``numpy.core``, 2.x ``numpy._core``; protocol 5 uses
# ``_frombuffer``) and ``_codecs.encode``, with which Python 3 writes bytes
# under protocol 2. The official files (Python 2, protocol 2) name only
# ``_reconstruct``, ``ndarray`` and ``dtype``.
_CIFAR_GLOBALS = frozenset([
    ('numpy', 'ndarray'),
    ('numpy', 'dtype'),
    ('numpy.core.multiarray', '_reconstruct'),
    ('numpy._core.multiarray', '_reconstruct'),
    ('numpy.core.numeric', '_frombuffer'),
    ('numpy._core.numeric', '_frombuffer'),
    ('_codecs', 'encode'),
])


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle names a callable that a CIFAR file never contains."""


class _CIFARUnpickler(pickle.Unpickler):
    """Builds dicts, lists, strings, bytes, numbers and numpy arrays only."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _CIFAR_GLOBALS:
            raise UnsafePickleError(
                f'refused to load {module}.{name}: a CIFAR pickle holds '
                'only dicts, lists, strings, bytes, numbers and numpy arrays')
        return super().find_class(module, name)


def load_cifar_pickle(raw: bytes):
    """Unpickle the bytes of a CIFAR python pickle without running code.

    Like ``pickle.loads(raw, encoding='latin1')`` (how mmpretrain and the
    CIFAR authors read them), but any global other than numpy's array
    reconstructors (``os.system``, ``builtins.open``, ``eval`` ...) raises
    :class:`UnsafePickleError` (a ``pickle.UnpicklingError``) before it is
    called.
    """
    return _CIFARUnpickler(io.BytesIO(raw), encoding='latin1').load()


class _CheckedCIFARMixin:
    """The checks and the reading shared by the CIFAR-10 and -100 classes.

    A subclass sets ``file_sizes``: ``{file name: (bytes, images)}`` of the
    official python pickles.
    """

    file_sizes: dict = {}
    verify_md5 = True

    def __init__(self,
                 data_root: str = '',
                 split: str = 'train',
                 download: bool = False,
                 verify_md5: bool = True,
                 **kwargs):
        self.verify_md5 = verify_md5
        super().__init__(
            data_root=data_root, split=split, download=download, **kwargs)

    @property
    def _name(self) -> str:
        return type(self).__name__

    def _split_files(self) -> List[Tuple[str, str]]:
        entries = self.train_list if self.split == 'train' else self.test_list
        return [(name, md5) for name, md5 in entries]

    def _expected(self, name: str) -> str:
        size, images = self.file_sizes[name]
        return (f'{size:,} bytes: the official python pickle of '
                f'{images:,} images')

    def _where(self) -> str:
        return (f'extract {self.url} into {self.data_prefix["root"]!r} (it '
                f'creates {self.base_folder}/), or pass download=True')

    def _problem(self, path: str, name: str, md5: str) -> str:
        """What is wrong with one pickle, or '' when it passes the checks
        that need no unpickling."""
        if not osp.isfile(path):
            return f'missing {path} (expected {self._expected(name)})'
        size = osp.getsize(path)
        official, _ = self.file_sizes[name]
        if size == 0:
            return (f'{path} is empty (0 bytes; expected '
                    f'{self._expected(name)})')
        if not self.verify_md5:
            return ''
        if size < official:
            return (f'{path} is truncated: {size:,} bytes, expected '
                    f'{self._expected(name)}')
        if size != official:
            return (f'{path} has {size:,} bytes, expected '
                    f'{self._expected(name)}')
        actual = calculate_md5(path)
        if actual != md5:
            return (f'{path} is corrupted: MD5 {actual}, expected {md5} '
                    f'(size {size:,} bytes as expected)')
        return ''

    def _read(self, path: str, name: str) -> Tuple[np.ndarray, list]:
        """Unpickle one batch file and check its images and labels."""
        with open(path, 'rb') as f:
            raw = f.read()
        try:
            entry = load_cifar_pickle(raw)
        except UnsafePickleError as error:
            raise ValueError(
                f'{self._name}: {path} is not a CIFAR python pickle: it '
                f'would run code when unpickled ({error}). Nothing was run; '
                f'remove the file. Expected {self._expected(name)}; '
                f'{self._where()}.') from error
        except Exception as error:
            raise ValueError(
                f'{self._name}: {path} ({len(raw):,} bytes) cannot be '
                f'unpickled ({type(error).__name__}: {error}); the file is '
                'truncated or not a CIFAR python pickle. Expected '
                f'{self._expected(name)}; {self._where()}.') from error
        data = entry.get('data') if isinstance(entry, dict) else None
        labels = None
        if isinstance(entry, dict):
            labels = entry.get('labels', entry.get('fine_labels'))
        rows = -1 if data is None else len(data)
        if (not isinstance(data, np.ndarray) or data.dtype != np.uint8
                or data.ndim != 2 or data.shape[1] != CIFAR_IMG_BYTES
                or labels is None or len(labels) != rows):
            found = (f'data {getattr(data, "shape", None)} '
                     f'{getattr(data, "dtype", type(data).__name__)}, '
                     f'{"no" if labels is None else len(labels)} labels')
            raise ValueError(
                f'{self._name}: {path} does not hold CIFAR images: found '
                f'{found}, expected uint8 data of shape (N, '
                f'{CIFAR_IMG_BYTES}) and N labels.')
        expected_images = self.file_sizes[name][1]
        if self.verify_md5 and rows != expected_images:
            raise ValueError(
                f'{self._name}: {path} holds {rows:,} images, expected '
                f'{expected_images:,}.')
        return data, list(labels)

    def load_data_list(self) -> List[dict]:
        """Check the split's pickles, then read them like mmpretrain."""
        root = self.data_prefix['root']
        if not isinstance(
                get_file_backend(root, enable_singleton=True), LocalBackend):
            # Remote storage: mmpretrain's own checks and reading.
            return super().load_data_list()
        folder = osp.join(root, self.base_folder)
        files = [(osp.join(folder, name), name, md5)
                 for name, md5 in self._split_files()]
        if self.download and any(self._problem(*f) for f in files):
            if dist.is_main_process():
                download_and_extract_archive(
                    self.url, root, filename=self.filename, md5=self.tgz_md5)
            dist.barrier()
        if not osp.isdir(folder):
            missing = root if not osp.isdir(root) else folder
            raise FileNotFoundError(
                f'{self._name}: {missing!r} does not exist. Expected '
                f'{", ".join(name for _, name, _ in files)} in {folder!r}: '
                f'{self._where()}.')
        problems = [p for p in (self._problem(*f) for f in files) if p]
        if problems:
            error = FileNotFoundError if problems[0].startswith(
                'missing') else ValueError
            hint = ('' if self.verify_md5 else
                    ' (verify_md5=False: sizes and MD5s not checked)')
            raise error(f'{self._name}: ' + '; '.join(problems) +
                        f'{hint}. To get the official files, '
                        f'{self._where()}.')

        imgs, gt_labels = [], []
        for path, name, _ in files:
            data, labels = self._read(path, name)
            imgs.append(data)
            gt_labels.extend(labels)
        imgs = np.vstack(imgs).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))

        if self.CLASSES is None:
            self._load_meta()
        return [{
            'img': img,
            'gt_label': int(label)
        } for img, label in zip(imgs, gt_labels)]


@DATASETS.register_module()
class CheckedCIFAR10(_CheckedCIFARMixin, CIFAR10):
    """CIFAR-10 from its official python pickles, each one checked.

    Reads ``<data_root>/cifar-10-batches-py/`` as
    :class:`mmpretrain.datasets.CIFAR10` does (same images, labels and
    classes), but first checks each pickle of the split: ``data_batch_1`` ...
    ``data_batch_5`` for ``'train'``, ``test_batch`` for ``'test'``, each
    10,000 images. A missing, empty, truncated, resized or altered file stops
    with an error naming it, what is wrong and the expected size (or MD5);
    nothing is downloaded unless ``download=True``.

    Args:
        data_root (str): Folder holding ``cifar-10-batches-py/``.
        split (str): ``'train'`` or ``'test'``. Defaults to ``'train'``.
        download (bool): When a file of the split fails the checks, download
            and extract the official archive (MD5-checked) first. Defaults
            to False (unlike mmpretrain's True).
        verify_md5 (bool): Check each file's byte size, MD5 and image count
            against the official release. False accepts other copies in the
            same format (e.g. the tests' tiny files): they are then only
            checked to be present, non-empty and to unpickle into uint8
            images with one label each. Defaults to True.
        **kwargs: Other arguments of :class:`mmpretrain.datasets.CIFAR10`
            (``metainfo``, ``pipeline``, ``indices``, ``test_mode`` ...).
    """

    # bytes and images of the official python pickles (cifar-10-python.tar.gz)
    file_sizes = {
        'data_batch_1': (31035704, 10000),
        'data_batch_2': (31035320, 10000),
        'data_batch_3': (31035999, 10000),
        'data_batch_4': (31035696, 10000),
        'data_batch_5': (31035623, 10000),
        'test_batch': (31035526, 10000),
    }


@DATASETS.register_module()
class CheckedCIFAR100(_CheckedCIFARMixin, CIFAR100):
    """CIFAR-100 from its official python pickles, each one checked.

    As :class:`CheckedCIFAR10` for ``<data_root>/cifar-100-python/``:
    ``train`` (50,000 images) and ``test`` (10,000 images), fine labels.

    Args:
        data_root (str): Folder holding ``cifar-100-python/``.
        split (str): ``'train'`` or ``'test'``. Defaults to ``'train'``.
        download (bool): See :class:`CheckedCIFAR10`. Defaults to False.
        verify_md5 (bool): See :class:`CheckedCIFAR10`. Defaults to True.
        **kwargs: Other arguments of :class:`mmpretrain.datasets.CIFAR100`.
    """

    # bytes and images of the official python pickles
    # (cifar-100-python.tar.gz)
    file_sizes = {
        'train': (155249918, 50000),
        'test': (31049707, 10000),
    }
