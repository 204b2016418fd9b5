"""Training augmentation that is a function of (seed, epoch, sample index).

A loader's random augmentations normally draw from the random generators of
the process that runs the pipeline: a worker's running state. That state is
not in any checkpoint, so a run resumed with persistent workers (or with
another number of workers) augments differently from one that never
stopped. :class:`SeededSampler` tags every index it yields with the seed and
the epoch, and the dataset's pipeline then runs each sample with python's
``random``, ``numpy.random`` and torch's CPU generator seeded from
``(seed, epoch, index)``: the augmentation of a sample no longer depends on
which process runs it, on what ran before, nor on the loader settings.
"""
import random
from contextlib import contextmanager
from itertools import islice
from typing import Iterator, Optional, Sized

import numpy as np
import torch
from mmengine.dataset import Compose, DefaultSampler
from mmpretrain.registry import DATA_SAMPLERS
from torch.utils.data import get_worker_info

__all__ = ['SeededIndex', 'SeededPipeline', 'SeededSampler', 'seeded_rngs']


class SeededIndex(int):
    """A dataset index carrying the seed and epoch its sample is drawn in.

    It is an ``int`` everywhere (indexing, comparisons); mmengine's
    ``BaseDataset.get_data_info`` passes it on as ``data_info['sample_idx']``,
    where :class:`SeededPipeline` reads the tag.
    """

    def __new__(cls, index: int, seed: int, epoch: int) -> 'SeededIndex':
        obj = super().__new__(cls, index)
        obj.seed = seed
        obj.epoch = epoch
        return obj

    def __reduce__(self):
        # Sent to the worker processes through a pipe.
        return SeededIndex, (int(self), self.seed, self.epoch)


@contextmanager
def seeded_rngs(seed: int, epoch: int, index: int):
    """Seed ``random``, ``numpy.random`` and torch's CPU generator from
    ``(seed, epoch, index)`` for the ``with`` body.

    In the main process (``num_workers=0``) the generators are restored
    afterwards, so the caller's streams (the model's dropout) go on as if
    the body had drawn nothing. In a loader worker, where nothing else
    draws, they are left as they are (restoring numpy's state costs about
    as much as the rest together). Only the CPU generator of torch is
    touched (``torch.manual_seed`` would also reseed CUDA).
    """
    restore = get_worker_info() is None
    if restore:
        state = (random.getstate(), np.random.get_state(),
                 torch.get_rng_state())
    words = np.random.SeedSequence(
        seed % (1 << 64), spawn_key=(epoch, index)).generate_state(
            4, np.uint32).tolist()
    try:
        random.seed(words[0] | words[1] << 32)
        np.random.seed(words)
        torch.default_generator.manual_seed(words[2] | words[3] << 32)
        yield
    finally:
        if restore:
            random.setstate(state[0])
            np.random.set_state(state[1])
            torch.set_rng_state(state[2])


class SeededPipeline(Compose):
    """A ``Compose`` that runs each sample whose ``sample_idx`` is a
    :class:`SeededIndex` inside :func:`seeded_rngs`.

    Other samples (a refetch after a transform returned None, a dataset
    used without :class:`SeededSampler`) run as in ``Compose``.
    """

    def __call__(self, data: dict) -> Optional[dict]:
        index = data.get('sample_idx')
        if not isinstance(index, SeededIndex):
            return super().__call__(data)
        data['sample_idx'] = int(index)
        with seeded_rngs(index.seed, index.epoch, int(index)):
            return super().__call__(data)


def _unwrap(dataset):
    """The dataset behind mmengine's ``num_batch_per_epoch`` slice, which
    passes indices through unchanged."""
    try:
        from mmengine.runner.runner import _SlicedDataset
    except ImportError:  # pragma: no cover
        return dataset
    while isinstance(dataset, _SlicedDataset):
        dataset = dataset._dataset
    return dataset


def install_seeded_pipeline(dataset) -> None:
    """Make ``dataset.pipeline`` a :class:`SeededPipeline` (idempotent).

    Raises:
        TypeError: If the dataset has no ``pipeline`` or does not hand the
            index it is given to its pipeline as ``sample_idx`` (dataset
            wrappers such as ``ConcatDataset`` or ``RepeatDataset`` remap
            it), so the samples could not be seeded.
    """
    dataset = _unwrap(dataset)
    pipeline = getattr(dataset, 'pipeline', None)
    get_data_info = getattr(dataset, 'get_data_info', None)
    probe = None
    if pipeline is not None and get_data_info is not None and len(dataset):
        probe = get_data_info(SeededIndex(0, 0, 0)).get('sample_idx')
    if not isinstance(probe, SeededIndex):
        raise TypeError(
            f'SeededSampler: {type(dataset).__name__} does not pass the '
            'sampled index to its pipeline as data_info["sample_idx"] (an '
            'mmengine BaseDataset does; dataset wrappers remap it), so its '
            'augmentation cannot be seeded per sample. Use '
            "sampler=dict(type='DefaultSampler') for this loader.")
    if isinstance(pipeline, SeededPipeline):
        return
    transforms = pipeline.transforms if isinstance(pipeline,
                                                   Compose) else [pipeline]
    dataset.pipeline = SeededPipeline(transforms)


@DATA_SAMPLERS.register_module()
class SeededSampler(DefaultSampler):
    """mmengine's ``DefaultSampler`` (same order, same split across ranks)
    whose samples are augmented with generators seeded from
    ``(seed, epoch, index)``.

    So the augmentation of every sample is fixed by the run's seed, whatever
    the number of workers, whether they persist across epochs, and whether
    the run was resumed: together with ``RNGStateHook`` (the model's own
    randomness) a resumed run ends with the weights of an uninterrupted one.
    Building the sampler makes the dataset's pipeline a
    :class:`SeededPipeline`; the indices it yields are
    :class:`SeededIndex`. The seed is the sampler's (the runner's
    ``randomness.seed`` when built by the runner), the epoch the one set by
    ``DistSamplerSeedHook``.

    Args:
        dataset (Sized): An mmengine ``BaseDataset`` (or mmengine's
            ``num_batch_per_epoch`` slice of one).
        shuffle (bool): Whether to shuffle. Defaults to True.
        seed (int, optional): Seed of the order and the augmentation; None
            draws one, shared by all ranks. Defaults to None.
        round_up (bool): As in ``DefaultSampler``. Defaults to True.
    """

    def __init__(self,
                 dataset: Sized,
                 shuffle: bool = True,
                 seed: Optional[int] = None,
                 round_up: bool = True) -> None:
        super().__init__(dataset, shuffle=shuffle, seed=seed,
                         round_up=round_up)
        install_seeded_pipeline(dataset)
        self._skip = 0

    def skip(self, num_samples: int) -> None:
        """Start the next pass over this rank's indices after its first
        ``num_samples`` (once: the pass after it is whole again).

        Used to resume inside an epoch: the loader's batches then begin
        with the first batch not trained yet, and no skipped sample is
        loaded. The length of the sampler does not change.
        """
        if num_samples < 0:
            raise ValueError(f'num_samples must be >= 0, got {num_samples}')
        self._skip = int(num_samples)

    def __iter__(self) -> Iterator[int]:
        skip, self._skip = self._skip, 0
        for index in islice(super().__iter__(), skip, None):
            yield SeededIndex(index, self.seed, self.epoch)
