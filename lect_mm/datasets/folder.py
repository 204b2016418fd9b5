"""Folder data sets whose unreadable images are named with their paths.

mmcv's ``LoadImageFromFile`` names a file that decodes to nothing
(``failed to load image: <path>``: truncated, damaged or not an image), but
an empty (0-byte) file makes OpenCV raise ``!buf.empty()`` before that
check, without the path, in whichever loader worker sampled it.
:class:`CheckedCustomDataset` is mmpretrain's
:class:`~mmpretrain.datasets.CustomDataset` (same arguments, samples, labels
and classes) whose samples, when the pipeline fails on one, are looked at
again with the pipeline's own loading transform: a missing, empty or
undecodable file stops the run with an :class:`ImageFileError` naming its
path and what is wrong with it, from the main process or any worker. With
``scan_images=True`` every image is loaded once when the data set is built,
and all the bad files are named together, before the first iteration.
``metainfo=dict(classes=[...])`` naming the class folders in another order
labels each folder by its place in that list (e.g. the order a checkpoint
was trained with), where ``CustomDataset`` would keep the sorted order and
only rename the classes.

An image whose header gives more than ``max_image_pixels`` pixels (default:
Pillow's ``MAX_IMAGE_PIXELS``, 89,478,485, about 9459 x 9459) is refused
from its header, before a pixel is decoded: a PNG of a few hundred KB
can hold 20000 x 20000 pixels, gigabytes once decoded, in every scan thread
and loader worker that reaches it.
"""
import os
import os.path as osp
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Tuple

import mmengine.dist as dist
import numpy as np
from mmcv.transforms import LoadImageFromFile
from mmengine.dataset import Compose
from mmengine.logging import MMLogger
from mmpretrain.datasets import CustomDataset
from mmpretrain.datasets.custom import find_folders, get_samples
from mmpretrain.registry import DATASETS
from PIL import Image

__all__ = [
    'CheckedCustomDataset', 'ImageFileError', 'image_file_problem',
    'image_header_size', 'DEFAULT_MAX_IMAGE_PIXELS'
]

# At most this many bad files are listed in one error (the count is given).
_MAX_LISTED = 50

#: The default pixel limit: Pillow's default ``Image.MAX_IMAGE_PIXELS``
#: (``1024 ** 3 // 4 // 3``, about 9459 x 9459 pixels; 256 MB as 8-bit
#: RGB), above which Pillow itself warns of a decompression bomb.
DEFAULT_MAX_IMAGE_PIXELS = 1024**3 // 4 // 3


class ImageFileError(ValueError):
    """An image file of a data set that cannot be loaded: missing, empty,
    truncated, damaged or not an image. The message names the file."""


def _find_loader(pipeline) -> Optional[LoadImageFromFile]:
    for transform in getattr(pipeline, 'transforms', None) or []:
        if isinstance(transform, LoadImageFromFile):
            return transform
        if isinstance(transform, Compose):  # nested
            found = _find_loader(transform)
            if found is not None:
                return found
    return None


def _loader_of(pipeline) -> LoadImageFromFile:
    """The pipeline's ``LoadImageFromFile`` (or a subclass), else mmcv's
    default one."""
    return _find_loader(pipeline) or LoadImageFromFile()


def image_header_size(path: str) -> Optional[Tuple[int, int]]:
    """``(width, height)`` of a local image file, from its header alone.

    Pillow's format plugins read the header (as ``PIL.Image.open`` does,
    nothing is decoded), but without ``Image.open``'s decompression-bomb
    check, which would warn or raise by Pillow's process-wide
    ``MAX_IMAGE_PIXELS`` instead of the data set's ``max_image_pixels``.

    Args:
        path (str): A local file.

    Returns:
        tuple[int, int] | None: The size, or None if the file cannot be
        read or Pillow knows no format whose header it has (the decoder
        then reads it, and names what is wrong).
    """
    try:
        with open(path, 'rb') as fp:
            prefix = fp.read(16)
            # The common plugins first, then all, as Image.open tries them.
            for load_plugins in (Image.preinit, Image.init):
                load_plugins()
                for name in list(Image.ID):
                    factory, accept = Image.OPEN[name]
                    accepted = not accept or accept(prefix)
                    if isinstance(accepted, str) or not accepted:
                        continue
                    fp.seek(0)
                    try:
                        return tuple(factory(fp, path).size)
                    except (SyntaxError, IndexError, TypeError,
                            struct.error):  # not this format
                        continue
    except Exception:  # unreadable or a damaged header: the decoder says
        return None
    return None


def _too_large(path: str, max_image_pixels: Optional[int]) -> Optional[str]:
    """Why a local ``path`` is not decoded, if its header gives more than
    ``max_image_pixels`` pixels; None otherwise or without a limit."""
    if max_image_pixels is None or '://' in path:
        return None
    size = image_header_size(path)
    if size is None or size[0] * size[1] <= max_image_pixels:
        return None
    width, height = size
    return (f'{path} ({osp.getsize(path):,} bytes) is a {width}x{height} '
            f'image ({width * height:,} pixels), over max_image_pixels='
            f'{max_image_pixels:,}: it was not decoded (raise '
            'max_image_pixels to load it)')


def image_file_problem(
        path: str,
        loader: Optional[LoadImageFromFile] = None,
        max_image_pixels: Optional[int] = DEFAULT_MAX_IMAGE_PIXELS
) -> Optional[str]:
    """What keeps ``loader`` from loading ``path``, or None if it loads.

    A local file whose header (:func:`image_header_size`) gives more than
    ``max_image_pixels`` pixels is refused without decoding it. Any other
    file is loaded with ``loader`` (mmcv's ``LoadImageFromFile``: the same
    file backend, decoder and colour type as the training pipeline; its
    ``ignore_empty`` is not applied), so a file passes exactly when the
    pipeline would read it.

    Args:
        path (str): The image file.
        loader (LoadImageFromFile, optional): The loading transform.
            Defaults to mmcv's default ``LoadImageFromFile()``.
        max_image_pixels (int, optional): The pixel limit; None for none.
            Defaults to :data:`DEFAULT_MAX_IMAGE_PIXELS`.

    Returns:
        str | None: e.g. ``'<path> is empty (0 bytes)'``.
    """
    too_large = _too_large(path, max_image_pixels)
    if too_large is not None:
        return too_large
    loader = loader or LoadImageFromFile()
    # A copy with the same settings that does not return None for a bad
    # file (ignore_empty) and that threads can use at once.
    checker = object.__new__(type(loader))
    checker.__dict__.update(vars(loader))
    checker.ignore_empty = False
    try:
        result = checker.transform({'img_path': path})
        if result is not None and result.get('img') is not None:
            return None
        failure = 'no image was decoded'
    except Exception as error:  # what the decoder or the backend raised
        failure = f'{type(error).__name__}: {error}'.strip()
    if '://' not in path:  # a local file: say what is wrong with it
        if not osp.exists(path):
            return f'{path} does not exist'
        if osp.isdir(path):
            return f'{path} is a folder, not an image file'
        if not os.access(path, os.R_OK):
            return f'{path} cannot be read (permission denied)'
        size = osp.getsize(path)
        if size == 0:
            return f'{path} is empty (0 bytes)'
        if 'failed to load image' in failure:  # mmcv's: decoded to None
            failure = ''
        return (f'{path} ({size:,} bytes) cannot be decoded as an image '
                '(truncated, damaged or not an image'
                + (f'; {failure})' if failure else ')'))
    return f'{path} cannot be loaded ({failure})'


@DATASETS.register_module()
class CheckedCustomDataset(CustomDataset):
    """mmpretrain's ``CustomDataset`` that names every image it cannot load.

    The same samples, labels and classes as
    :class:`mmpretrain.datasets.CustomDataset` (class folders under
    ``data_root/data_prefix``, or an ``ann_file``). Three additions:

    - When the pipeline fails on a sample, its file is loaded again with the
      pipeline's ``LoadImageFromFile``; if that fails too, an
      :class:`ImageFileError` names the path and what is wrong (does not
      exist, empty, cannot be decoded), whichever process (main or loader
      worker) ran the pipeline. An error of a later transform on a readable
      file (or of a pipeline without ``LoadImageFromFile``) is re-raised
      unchanged, with the path added as a note (Python >= 3.11).
    - ``scan_images=True`` loads every image once when the data set is
      built (threads; in DDP each rank loads its share) and raises one
      :class:`ImageFileError` naming every file that fails, before anything
      is trained. It decodes the whole data set, so it is off by default:
      then a bad file stops the run when a loader first reaches it.
    - ``metainfo=dict(classes=[...])`` that lists the class folders' names
      (all of them, in any order) labels each folder by its place in that
      list: ``CustomDataset`` numbers the folders in sorted order whatever
      the list says, so a list in another order named every label wrongly.
      A list of other names renames the sorted folders, as there.

    Both, and every sample the pipeline's ``LoadImageFromFile`` loads,
    refuse a local image whose header gives more than ``max_image_pixels``
    pixels, before decoding it (an :class:`ImageFileError` naming the file,
    its size and the limit).

    Args:
        scan_images (bool): Load every image when the data set is built.
            Defaults to False.
        scan_threads (int, optional): Threads for the scan. Defaults to
            ``min(8, os.cpu_count())``.
        max_image_pixels (int, optional): The most pixels (width x height)
            an image may have; None for no limit. Defaults to
            :data:`DEFAULT_MAX_IMAGE_PIXELS` (Pillow's default
            ``MAX_IMAGE_PIXELS``, 89,478,485).
        **kwargs: The arguments of ``CustomDataset`` (``data_root``,
            ``data_prefix``, ``ann_file``, ``extensions``, ``metainfo``,
            ``pipeline`` ...).
    """

    def __init__(self,
                 *args,
                 scan_images: bool = False,
                 scan_threads: Optional[int] = None,
                 max_image_pixels: Optional[int] = DEFAULT_MAX_IMAGE_PIXELS,
                 **kwargs):
        if max_image_pixels is not None and (
                not isinstance(max_image_pixels, int)
                or isinstance(max_image_pixels, bool)
                or max_image_pixels < 1):
            raise ValueError('max_image_pixels must be a positive int or '
                             f'None (no limit), got {max_image_pixels!r}.')
        self.scan_images = scan_images
        self.scan_threads = scan_threads
        self.max_image_pixels = max_image_pixels
        # Per process: the samples whose header passed the pixel limit.
        self._header_checked: Optional[np.ndarray] = None
        super().__init__(*args, **kwargs)

    def _find_samples(self):
        classes = self.CLASSES
        if self.with_label and classes is not None:
            folders, _ = find_folders(self.img_prefix)
            if sorted(folders) == sorted(classes) and \
                    list(folders) != list(classes):
                self.folder_to_idx = {c: i for i, c in enumerate(classes)}
                samples, empty = get_samples(
                    self.img_prefix, self.folder_to_idx,
                    is_valid_file=self.is_valid_file)
                if not samples:
                    raise RuntimeError(
                        f'Found 0 files in subfolders of: {self.data_prefix}'
                        f'. Supported extensions are: '
                        f'{",".join(self.extensions)}')
                if empty:
                    MMLogger.get_current_instance().warning(
                        'Found no valid file in the folder '
                        f'{", ".join(sorted(empty))}. Supported extensions '
                        f'are: {", ".join(self.extensions)}')
                return samples
        return super()._find_samples()

    def full_init(self):
        if self._fully_initialized:
            return
        super().full_init()
        if self.scan_images:
            problems = self.find_unreadable_images()
            if problems:
                raise ImageFileError(self._describe(problems))

    def _describe(self, problems: List[str]) -> str:
        listed = problems[:_MAX_LISTED]
        more = len(problems) - len(listed)
        return (f'{type(self).__name__} ({self.img_prefix}): '
                f'{len(problems)} of {len(self)} images cannot be loaded '
                '(scan_images=True):\n  ' + '\n  '.join(listed) +
                (f'\n  ... and {more} more' if more > 0 else '') +
                '\nRemove or replace these files.')

    def find_unreadable_images(self) -> List[str]:
        """Load every image with the pipeline's loading transform.

        In DDP each rank loads every ``world_size``-th image and the ranks
        exchange what they found, so every rank returns the same list.

        Returns:
            list[str]: One line per file that fails, in data set order.
        """
        rank, world_size = dist.get_dist_info()
        loader = _loader_of(self.pipeline)
        paths = [(i, self.get_data_info(i)['img_path'])
                 for i in range(rank, len(self), world_size)]
        threads = self.scan_threads or min(8, os.cpu_count() or 1)
        with ThreadPoolExecutor(max(1, threads)) as pool:
            found = list(
                pool.map(
                    lambda item: (item[0],
                                  image_file_problem(item[1], loader,
                                                     self.max_image_pixels)),
                    paths))
        found = [(i, p) for i, p in found if p is not None]
        if world_size > 1:
            found = sum(dist.all_gather_object(found), [])
        return [p for _, p in sorted(found)]

    def _check_header(self, idx) -> None:
        """Refuse sample ``idx`` if its image header gives more than
        ``max_image_pixels`` pixels. The header is read (some tens of
        microseconds) once per sample and process."""
        if self._header_checked is None:
            self._header_checked = np.zeros(len(self), dtype=bool)
        if self._header_checked[idx]:
            return
        path = self.get_data_info(idx).get('img_path')
        problem = None if path is None else _too_large(
            path, self.max_image_pixels)
        if problem is not None:
            raise ImageFileError(
                f'{type(self).__name__}: sample {int(idx)}: {problem}.')
        self._header_checked[idx] = True

    def prepare_data(self, idx):
        loader = _find_loader(self.pipeline)
        if loader is not None and self.max_image_pixels is not None:
            self._check_header(idx)
        try:
            return super().prepare_data(idx)
        except Exception as error:
            path = self.get_data_info(idx).get('img_path')
            if path is None:
                raise
            # A pipeline that loads the image its own way is not second-
            # guessed: its error only gets the path.
            problem = (image_file_problem(path, loader, self.max_image_pixels)
                       if loader is not None else None)
            if problem is None:
                if hasattr(error, 'add_note'):  # Python >= 3.11
                    error.add_note(f'(sample {int(idx)} of '
                                   f'{type(self).__name__}: {path})')
                raise
            raise ImageFileError(
                f'{type(self).__name__}: sample {int(idx)}: {problem}. '
                'Remove or replace the file (scan_images=True finds every '
                'such file when the data set is built).') from error
