"""SeededSampler: every training sample's augmentation is a function of
(seed, epoch, index), whatever the loader's workers."""
import copy
import os.path as osp
import pickle
import random

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import ConcatDataset
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from lect_mm.datasets import (Digits, SeededIndex, SeededPipeline,
                              SeededSampler, seeded_rngs)

CIFAR10 = osp.join(
    osp.dirname(__file__), '..', '..', 'configs', '_base_', 'datasets',
    'cifar10.py')


def _loader(num_workers, seed=0):
    """The shipped CIFAR-10 training augmentation (crop, flip, RandAugment;
    not the resize) on 24 Digits images."""
    init_default_scope('mmpretrain')
    cfg = copy.deepcopy(Config.fromfile(CIFAR10).train_dataloader.to_dict())
    pipeline = [t for t in cfg['dataset']['pipeline'] if t['type'] != 'Resize']
    cfg.update(
        batch_size=8, num_workers=num_workers,
        persistent_workers=num_workers > 0,
        collate_fn=dict(type='default_collate'),
        dataset=dict(type='Digits', split='train', image_size=32,
                     indices=24, pipeline=pipeline))
    assert cfg['sampler']['type'] == 'SeededSampler'
    return Runner.build_dataloader(cfg, seed=seed)


def _epochs(loader, epochs=(0, 1)):
    out = []
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        out.append(torch.cat([b['inputs'] for b in loader]))
    return out


def test_augmentation_does_not_depend_on_the_workers():
    state = (random.getstate(), np.random.get_state())
    in_main = _epochs(_loader(0))
    # The main process's generators are left as they were (torch's draws
    # the base seed of each loader iterator, as without SeededSampler).
    assert random.getstate() == state[0]
    assert np.array_equal(np.random.get_state()[1], state[1][1])
    # Two persistent workers (the shipped setting) draw the same crops,
    # flips and RandAugment operations for every sample of every epoch.
    in_workers = _epochs(_loader(2))
    for a, b in zip(in_main, in_workers):
        assert torch.equal(a, b)
    # ... and they are random: they change with the epoch and the seed.
    assert not torch.equal(in_main[0], in_main[1])
    assert not torch.equal(in_main[0], _epochs(_loader(0, seed=1), (0, ))[0])


def test_sampler_order_and_tags():
    dataset = Digits(split='val', image_size=8, indices=10, pipeline=[])
    sampler = SeededSampler(dataset, shuffle=True, seed=3)
    sampler.set_epoch(2)
    indices = list(sampler)
    reference = SeededSampler.__mro__[1](dataset, shuffle=True, seed=3)
    reference.set_epoch(2)
    assert indices == list(reference)  # DefaultSampler's order
    assert {(i.seed, i.epoch) for i in indices} == {(3, 2)}
    assert isinstance(dataset.pipeline, SeededPipeline)
    assert dataset[indices[0]]['sample_idx'] == int(indices[0])
    copied = pickle.loads(pickle.dumps(indices[0]))
    assert (copied, copied.seed, copied.epoch) == (indices[0], 3, 2)


def test_skip_starts_one_pass_later():
    """Resuming inside an epoch: the next pass starts after the skipped
    samples (same indices, same tags, same length), the one after is whole;
    a loader built on it starts with the batch that comes next."""
    dataset = Digits(split='val', image_size=8, indices=10, pipeline=[])
    sampler = SeededSampler(dataset, shuffle=True, seed=3)
    sampler.set_epoch(1)
    whole = list(sampler)
    sampler.skip(4)
    assert len(sampler) == 10
    rest = list(sampler)
    assert rest == whole[4:]
    assert {(i.seed, i.epoch) for i in rest} == {(3, 1)}
    assert list(sampler) == whole
    loader = torch.utils.data.DataLoader(dataset, batch_size=2,
                                         sampler=sampler,
                                         collate_fn=lambda batch: batch)
    sampler.skip(4)
    assert [[d['sample_idx'] for d in b] for b in loader] == [
        whole[i:i + 2] for i in range(4, 10, 2)]
    with pytest.raises(ValueError):
        sampler.skip(-1)


def test_seeded_rngs_is_a_function_of_its_key():

    def draws(*key):
        with seeded_rngs(*key):
            return random.random(), np.random.rand(), torch.rand(1).item()

    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    assert draws(0, 1, 2) == draws(0, 1, 2)
    # In the main process the caller's streams are restored.
    assert random.getstate() == state[0]
    assert np.array_equal(np.random.get_state()[1], state[1][1])
    assert torch.equal(torch.get_rng_state(), state[2])
    assert len({draws(0, 1, 2), draws(0, 1, 3), draws(0, 2, 2),
                draws(1, 1, 2)}) == 4


def test_a_dataset_that_remaps_indices_is_refused():
    parts = [Digits(split='val', image_size=8, indices=4) for _ in range(2)]
    with pytest.raises(TypeError, match="Use sampler=dict.*DefaultSampler"):
        SeededSampler(ConcatDataset(parts), seed=0)
    assert isinstance(SeededIndex(5, 0, 0) + 1, int)
