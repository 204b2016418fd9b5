"""STL-10 read from its official binary files (LeCT report, Appendix)."""
import os
import os.path as osp
import tarfile
from typing import List, Optional, Sequence, Union

import mmengine.dist as dist
import numpy as np
from mmengine.logging import MMLogger
from mmpretrain.datasets import BaseDataset
from mmpretrain.datasets.utils import calculate_md5, download_url_to_file
from mmpretrain.registry import DATASETS

STL10_CATEGORIES = ('airplane', 'bird', 'car', 'cat', 'deer', 'dog', 'horse',
                    'monkey', 'ship', 'truck')


@DATASETS.register_module()
class STL10(BaseDataset):
    """`STL-10 <https://cs.stanford.edu/~acoates/stl10/>`_ dataset, kept in
    memory as RGB arrays like :class:`mmpretrain.datasets.CIFAR10`.

    The report trains on the 5,000 labelled ``train`` images and validates
    on the 8,000 ``test`` images (96×96, 10 classes; LeCT report, Appendix).
    The official binaries are read from ``<data_root>/stl10_binary/``:

    - ``{split}_X.bin``: uint8, 3×96×96 bytes per image, channel-major and
      column-major inside each channel. Images come out as (96, 96, 3) RGB
      arrays with the same orientation as ``torchvision.datasets.STL10``.
    - ``{split}_y.bin``: one uint8 label per image in 1..10, mapped to 0..9.
    - ``class_names.txt`` (optional): one class name per line; when absent
      the standard ten names are used. ``metainfo=dict(classes=...)`` or
      ``classes=...`` take precedence over both.

    The ``unlabeled`` split (100,000 images, about 2.8 GB in memory) yields
    samples without ``gt_label``.

    Args:
        data_root (str): Folder holding ``stl10_binary/``, e.g.
            ``'data/stl10'``.
        split (str): ``'train'``, ``'test'`` or ``'unlabeled'``.
            Defaults to ``'train'``.
        metainfo (dict, optional): Meta information, e.g. ``classes``.
            Defaults to None.
        download (bool): If the binaries are missing, download the official
            archive into ``data_root``, verify its MD5 and only then extract
            it. Defaults to False.
        classes (str | Sequence[str], optional): Class names, or a file
            listing them; see :class:`mmpretrain.datasets.BaseDataset`.
            Defaults to None.
        **kwargs: Other arguments of :class:`mmpretrain.datasets.BaseDataset`
            (``pipeline``, ``indices``, ``test_mode`` ...).
    """

    base_folder = 'stl10_binary'
    url = 'http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz'
    filename = 'stl10_binary.tar.gz'
    tgz_md5 = '91f7769df0f17e558f3565bffb0c7dfb'
    class_names_file = 'class_names.txt'
    split_files = {
        'train': ('train_X.bin', 'train_y.bin'),
        'test': ('test_X.bin', 'test_y.bin'),
        'unlabeled': ('unlabeled_X.bin', None),
    }
    img_shape = (3, 96, 96)
    img_bytes = 3 * 96 * 96
    METAINFO = {'classes': STL10_CATEGORIES}

    def __init__(self,
                 data_root: str = '',
                 split: str = 'train',
                 metainfo: Optional[dict] = None,
                 download: bool = False,
                 classes: Union[str, Sequence[str], None] = None,
                 **kwargs):
        if split not in self.split_files:
            raise ValueError(f'STL10: split={split!r} is not valid, choose '
                             f'from {list(self.split_files)}')
        if not data_root:
            raise ValueError(
                'STL10: data_root must be set to the folder holding '
                f'{self.base_folder}/ (e.g. data_root="data/stl10")')
        data_root = osp.expanduser(data_root)
        self.split = split
        self.download = download
        self._classes_given = classes is not None or bool(
            metainfo and 'classes' in metainfo)
        super().__init__(
            ann_file='',
            metainfo=metainfo,
            data_root=data_root,
            classes=classes,
            **kwargs)

    @property
    def folder(self) -> str:
        """str: The folder holding the binary files."""
        return osp.join(self.data_root, self.base_folder)

    def _expected_files(self) -> List[str]:
        return [f for f in self.split_files[self.split] if f is not None]

    def _files_present(self) -> bool:
        return all(
            osp.isfile(osp.join(self.folder, f))
            for f in self._expected_files())

    def load_data_list(self) -> List[dict]:
        """Read the split's binaries into a list of ``img``/``gt_label``."""
        if self.download and not self._files_present():
            if dist.is_main_process():
                self.download_and_extract()
            dist.barrier()
        self._check_files()

        x_name, y_name = self.split_files[self.split]
        x_path = osp.join(self.folder, x_name)
        labels = None
        if y_name is not None:
            labels = self._read_labels(osp.join(self.folder, y_name))
        self._check_size(x_path, labels, y_name)

        raw = np.fromfile(x_path, dtype=np.uint8)
        # (N, C, W, H) on disk -> (N, H, W, C), as torchvision orients it.
        imgs = np.ascontiguousarray(
            raw.reshape(-1, *self.img_shape).transpose(0, 3, 2, 1))
        del raw

        if not self._classes_given:
            names_path = osp.join(self.folder, self.class_names_file)
            if osp.isfile(names_path):
                with open(names_path) as f:
                    names = tuple(line.strip() for line in f if line.strip())
                if len(names) != len(STL10_CATEGORIES):
                    raise ValueError(
                        f'STL10: {names_path} lists {len(names)} class '
                        f'names, expected {len(STL10_CATEGORIES)}')
                self._metainfo['classes'] = names

        if labels is None:
            return [dict(img=img) for img in imgs]
        return [
            dict(img=img, gt_label=int(label))
            for img, label in zip(imgs, labels)
        ]

    def _check_files(self):
        if not osp.isdir(self.data_root):
            raise FileNotFoundError(
                f'STL10: data_root {self.data_root!r} does not exist. '
                f'Expected {self.base_folder}/{{train,test}}_{{X,y}}.bin '
                f'from {self.url} extracted into it, or pass download=True.')
        missing = [
            osp.join(self.folder, f) for f in self._expected_files()
            if not osp.isfile(osp.join(self.folder, f))
        ]
        if missing:
            raise FileNotFoundError(
                f'STL10: missing {missing} for split {self.split!r}. '
                f'Expected files {self._expected_files()} in '
                f'{self.folder!r} (extract {self.url} into '
                f'{self.data_root!r}, or pass download=True).')

    def _check_size(self, x_path: str, labels: Optional[np.ndarray],
                    y_name: Optional[str]):
        size = osp.getsize(x_path)
        per_img = f'{self.img_bytes} bytes per 3x96x96 image'
        if labels is not None:
            expected = len(labels) * self.img_bytes
            if size != expected:
                raise ValueError(
                    f'STL10: {x_path} has {size} bytes, expected {expected} '
                    f'({len(labels)} labels in {y_name} x {per_img}); the '
                    'file is truncated or does not match its labels.')
        elif size == 0 or size % self.img_bytes:
            raise ValueError(
                f'STL10: {x_path} has {size} bytes, expected a positive '
                f'multiple of {self.img_bytes} ({per_img}); the file is '
                'truncated.')

    def _read_labels(self, y_path: str) -> np.ndarray:
        labels = np.fromfile(y_path, dtype=np.uint8)
        if len(labels) == 0:
            raise ValueError(f'STL10: {y_path} is empty (expected one uint8 '
                             'label in 1..10 per image)')
        bad = (labels < 1) | (labels > len(STL10_CATEGORIES))
        if bad.any():
            raise ValueError(
                f'STL10: {y_path} has labels outside 1..'
                f'{len(STL10_CATEGORIES)}: '
                f'{sorted(int(v) for v in set(labels[bad]))[:5]} (first at '
                f'index {int(np.flatnonzero(bad)[0])})')
        return labels.astype(np.int64) - 1

    def download_and_extract(self):
        """Fetch the official archive, verify its MD5, then extract it.

        An archive already in ``data_root`` with the right checksum is
        reused. A wrong checksum deletes the archive and raises before
        anything is extracted.
        """
        logger = MMLogger.get_current_instance()
        os.makedirs(self.data_root, exist_ok=True)
        archive = osp.join(self.data_root, self.filename)
        if osp.isfile(archive) and calculate_md5(archive) == self.tgz_md5:
            logger.info(f'Using the verified archive {archive}')
        else:
            logger.info(f'Downloading {self.url} to {archive}')
            download_url_to_file(self.url, archive)
            actual = calculate_md5(archive)
            if actual != self.tgz_md5:
                os.remove(archive)
                raise RuntimeError(
                    f'STL10: MD5 of the downloaded {archive} is {actual}, '
                    f'expected {self.tgz_md5}; the file was removed and '
                    'nothing was extracted. Retry, or download it manually.')
        logger.info(f'Extracting {archive} to {self.data_root}')
        with tarfile.open(archive, 'r:gz') as tar:
            tar.extractall(self.data_root, filter='data')

    def extra_repr(self) -> List[str]:
        """The extra repr information of the dataset."""
        return [f'Split: \t{self.split}', f'Data folder: \t{self.folder}']
