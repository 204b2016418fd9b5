"""A classification data preprocessor that resizes the batch on the device.

The LeCT report (Appendix) trains on 32×32 CIFAR images resized to 224
after augmentation. Done in the CPU pipeline, the resize turns every sample
into a 224×224×3 array, 49× the bytes of the 32×32 original for the workers
to produce, collate and pass on and for the host to copy to the device, so
the CPU side can become the bottleneck of a small model. Resizing once the
batch is on the device replaces all that with one batched
``F.interpolate`` call (``benchmarks/data_pipeline.py`` measures both).
"""
from typing import Sequence, Union

import torch
import torch.nn.functional as F
from mmpretrain.models.utils.data_preprocessor import ClsDataPreprocessor
from mmpretrain.registry import MODELS

from lect_mm.blocks.utils import to_pair

_MODES = ('nearest', 'nearest-exact', 'bilinear', 'bicubic', 'area')
_ANTIALIAS_MODES = ('bilinear', 'bicubic')


@MODELS.register_module()
class ResizeClsDataPreprocessor(ClsDataPreprocessor):
    """:class:`ClsDataPreprocessor` that also resizes the batch on the device.

    The order is that of the CPU pipeline it replaces (LeCT report,
    Appendix: crop, flip, RandAugment, resize to 224, then normalise and
    batch-augment): the batch
    is stacked and normalised as in the parent class, resized to ``size``,
    and only then given to the batch augmentations (Mixup, CutMix), so a
    CutMix box is cut at the model's resolution as before. Normalisation is
    a per-channel affine map and interpolation weights sum to one, so
    normalise-then-resize equals resize-then-normalise up to float rounding;
    against a uint8 ``Resize(224, interpolation='bilinear')`` on the CPU the
    batch differs only by the CPU path's rounding to whole grey levels
    (bilinear, ``align_corners=False`` is the pixel-centre convention of
    OpenCV's ``INTER_LINEAR``).

    Use it with a pipeline that stops at the small image, e.g.
    ``configs/_base_/datasets/cifar10_device_resize.py``. Evaluation batches
    are resized too (the test pipeline drops its ``Resize`` as well).

    Args:
        size (int | tuple[int, int]): Output size, an int for a square or
            ``(height, width)``. Defaults to 224.
        mode (str): Interpolation of :func:`torch.nn.functional.interpolate`,
            one of ``'nearest'``, ``'nearest-exact'``, ``'bilinear'``,
            ``'bicubic'``, ``'area'``. Defaults to ``'bilinear'``.
        antialias (bool): Low-pass filter when shrinking (``'bilinear'`` and
            ``'bicubic'`` only; no effect when enlarging). Defaults to False.
        **kwargs: Arguments of :class:`ClsDataPreprocessor` (``mean``,
            ``std``, ``to_rgb``, ``num_classes``, ``batch_augments`` ...).
    """

    def __init__(self,
                 size: Union[int, Sequence[int]] = 224,
                 mode: str = 'bilinear',
                 antialias: bool = False,
                 **kwargs) -> None:
        self.size = to_pair(size, 'size')
        if mode not in _MODES:
            raise ValueError(f'mode must be one of {_MODES}, got {mode!r}')
        if antialias and mode not in _ANTIALIAS_MODES:
            raise ValueError('antialias=True needs mode in '
                             f'{_ANTIALIAS_MODES}, got {mode!r}')
        self.mode = mode
        self.antialias = bool(antialias)
        super().__init__(**kwargs)

    def resize(self, inputs: torch.Tensor) -> torch.Tensor:
        """Resize a float batch (B, C, H, W) to ``self.size``."""
        if tuple(inputs.shape[-2:]) == self.size:
            return inputs
        align = False if self.mode in ('bilinear', 'bicubic') else None
        return F.interpolate(
            inputs,
            size=self.size,
            mode=self.mode,
            align_corners=align,
            antialias=self.antialias)

    def forward(self, data: dict, training: bool = False) -> dict:
        """Stack, normalise, resize, then apply the batch augmentations.

        Args:
            data (dict): A batch from the dataloader (``inputs`` and
                ``data_samples``).
            training (bool): Whether batch augmentations apply.
                Defaults to False.

        Returns:
            dict: ``inputs`` of shape (B, C, *size) and ``data_samples``.
        """
        batch_augments, self.batch_augments = self.batch_augments, None
        try:
            data = super().forward(data, training)
        finally:
            self.batch_augments = batch_augments
        inputs = self.resize(data['inputs'])
        samples = data['data_samples']
        if (training and batch_augments is not None and samples
                and 'gt_score' in samples[0]):
            scores = torch.stack([s.gt_score for s in samples])
            inputs, scores = batch_augments(inputs, scores)
            for sample, score in zip(samples, scores):
                sample.set_gt_score(score)
        return {'inputs': inputs, 'data_samples': samples}


__all__ = ['ResizeClsDataPreprocessor']
