"""``LectEpochBasedTrainLoop``: mmengine's epoch-based training loop that
can resume inside an epoch."""
from itertools import islice

from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop
from mmpretrain.registry import LOOPS
from torch.utils.data import BatchSampler


@LOOPS.register_module()
class LectEpochBasedTrainLoop(EpochBasedTrainLoop):
    """mmengine's ``EpochBasedTrainLoop`` that can begin an epoch after its
    first iterations (:meth:`start_epoch_at`, for ``PreemptionHook``): a
    :class:`~lect_mm.datasets.SeededSampler` skips their samples without
    loading them (another sampler's batches are loaded and dropped).
    ``LectRunner`` builds it for ``train_cfg = dict(by_epoch=True, ...)``.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._start_at = 0

    def start_epoch_at(self, inner_iter: int) -> None:
        """Begin the next epoch after its first ``inner_iter`` iterations
        (all of them: the epoch only ends, with its checkpoint...)."""
        if not 0 <= inner_iter <= len(self.dataloader):
            raise ValueError(
                f'inner_iter must be in [0, {len(self.dataloader)}] (the '
                f'iterations of an epoch), got {inner_iter}')
        self._start_at = int(inner_iter)

    def run_epoch(self) -> None:
        start, self._start_at = self._start_at, 0
        self.runner.call_hook('before_train_epoch')
        self.runner.model.train()
        batches = self.dataloader
        if start:
            batch_sampler = getattr(batches, 'batch_sampler', None)
            sampler = getattr(batch_sampler, 'sampler', None)
            if start >= len(batches):
                batches = ()  # an iterator would draw from torch's RNG
            elif isinstance(batch_sampler, BatchSampler) and hasattr(
                    sampler, 'skip'):
                sampler.skip(start * batch_sampler.batch_size)
            else:
                print_log(
                    f'{type(sampler).__name__} cannot skip samples: the '
                    f'first {start} batches of this epoch are loaded and '
                    'dropped.', logger='current')
                batches = islice(batches, start, None)
        for idx, data_batch in enumerate(batches, start):
            self.run_iter(idx, data_batch)
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1
