"""The embedded demo data: scikit-learn's bundled handwritten digits."""
import functools
import importlib.util
import os.path as osp
from typing import Optional, Tuple

import numpy as np
from mmpretrain.datasets import BaseDataset
from mmpretrain.registry import DATASETS


@functools.lru_cache(maxsize=1)
def load_digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
    """The images (1797, 8, 8; float64, 0..16) and labels (int64) of
    ``sklearn.datasets.load_digits()``, read-only.

    Read with numpy from the file scikit-learn ships, without importing
    scikit-learn (which takes about a second, in every training process and
    loader worker); if the file is not where scikit-learn keeps it, through
    ``load_digits``.
    """
    spec = importlib.util.find_spec('sklearn')
    path = osp.join(osp.dirname(spec.origin), 'datasets', 'data',
                    'digits.csv.gz') if spec and spec.origin else ''
    if osp.isfile(path):
        data = np.loadtxt(path, delimiter=',')
        images, labels = data[:, :-1].reshape(-1, 8, 8), data[:, -1]
    else:
        from sklearn.datasets import load_digits
        digits = load_digits()
        images, labels = digits.images, digits.target
    images, labels = np.array(images), labels.astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


@functools.lru_cache(maxsize=4)
def _resized_digits(image_size: int) -> np.ndarray:
    """All 1,797 images scaled to 0..255 and resized to ``image_size``
    (bilinear), as read-only ``(1797, image_size, image_size)`` uint8.

    Cached for the last four sizes: a run builds its train, val and test
    sets from the same resized images, and so does every data loader worker
    forked after the first build.
    """
    import torch
    import torch.nn.functional as F

    images, _ = load_digits_arrays()
    imgs = torch.from_numpy(images.astype(np.float32) * (255.0 / 16.0))
    if image_size != imgs.shape[-1]:
        imgs = F.interpolate(
            imgs[:, None], size=(image_size, image_size), mode='bilinear',
            align_corners=False)[:, 0]
    imgs = imgs.clamp(0, 255).round().to(torch.uint8).numpy()
    imgs.setflags(write=False)
    return imgs


@DATASETS.register_module()
class Digits(BaseDataset):
    """scikit-learn's 1,797 real 8×8 handwritten digits as small RGB images.

    Needs no download (the data ship inside scikit-learn), so it is the
    library's default demo and the data of its training tests. Each 8×8 grey
    image (values 0..16) is scaled to 0..255, resized to ``image_size`` with
    bilinear interpolation and repeated over three channels. The train/val
    split is a fixed, seeded, class-stratified permutation; each sample's
    ``source_idx`` is its index in ``sklearn.datasets.load_digits()``.

    Args:
        split (str): ``'train'`` or ``'val'``. Defaults to ``'train'``.
        image_size (int): Side of the produced square images. Defaults to 32.
        val_ratio (float): Share of each class held out for ``'val'``.
            Defaults to 0.2.
        seed (int): Seed of the split. Defaults to 0.
        **kwargs: Other arguments of :class:`mmpretrain.datasets.BaseDataset`
            (``pipeline``, ``indices``, ``test_mode`` ...). ``serialize_data``
            defaults to False: the data are small, and serialising them
            costs a full garbage collection per data set.
    """

    METAINFO = {'classes': tuple(str(i) for i in range(10))}
    SPLITS = ('train', 'val')

    def __init__(self,
                 split: str = 'train',
                 image_size: int = 32,
                 val_ratio: float = 0.2,
                 seed: int = 0,
                 metainfo: Optional[dict] = None,
                 **kwargs):
        if split not in self.SPLITS:
            raise ValueError(
                f'Digits: split={split!r} is not valid, choose from '
                f'{list(self.SPLITS)}')
        if not isinstance(image_size, int) or image_size < 8:
            raise ValueError(
                f'Digits: image_size must be an int >= 8, got {image_size!r}')
        if not 0 < val_ratio < 1:
            raise ValueError(
                f'Digits: val_ratio must be in (0, 1), got {val_ratio}')
        self.split = split
        self.image_size = image_size
        self.val_ratio = val_ratio
        self.seed = seed
        kwargs.setdefault('serialize_data', False)
        super().__init__(ann_file='', metainfo=metainfo, **kwargs)

    def load_data_list(self):
        _, labels = load_digits_arrays()
        rng = np.random.RandomState(self.seed)
        val_idx = []
        for c in range(10):
            idx = np.flatnonzero(labels == c)
            idx = idx[rng.permutation(len(idx))]
            val_idx.extend(idx[:int(round(len(idx) * self.val_ratio))])
        is_val = np.zeros(len(labels), dtype=bool)
        is_val[val_idx] = True
        keep = np.flatnonzero(is_val if self.split == 'val' else ~is_val)

        # (N, S, S, 3): the grey images repeated over three channels, one
        # copy; each sample's image is a contiguous view of it
        imgs = np.repeat(_resized_digits(self.image_size)[keep, :, :, None],
                         3, axis=3)
        return [
            dict(img=img, gt_label=lbl, source_idx=src) for img, lbl, src in
            zip(imgs, labels[keep].tolist(), keep.tolist())
        ]

    def extra_repr(self):
        return [f'Split: \t{self.split}', f'Image size: \t{self.image_size}']
