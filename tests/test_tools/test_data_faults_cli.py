"""Faults of one's own data injected into tools/train.py runs: class folders
that differ between splits, a zero-byte image read by a loader worker, a
crafted CIFAR pickle, epochs of zero iterations and num_classes that do not
fit the data stop before the first iteration with the cause named; the
folder-dataset example trains on generated images."""
import os
import os.path as osp
import pickle

import numpy as np
import pytest

from lect_mm.datasets import ImageFileError
from lect_mm.engine import ConfigMismatchError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')
QUIET = ['log_level=WARNING', 'train_cfg.max_epochs=1']

# The tiny digits model on class folders, 8x8 input (serialize_data=False:
# mmengine's serialisation runs gc.collect(), slow in a test process).
TINY_FOLDER = '''
_base_ = '{tiny}'
model = dict(head=dict(num_classes={classes}))
data_preprocessor = dict(num_classes={classes})
pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=8),
            dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=2, num_workers={workers},
    dataset=dict(_delete_=True, type='CheckedCustomDataset',
                 data_root='{root}', data_prefix='train', pipeline=pipeline,
                 serialize_data=False))
val_dataloader = dict(
    batch_size=2,
    dataset=dict(_delete_=True, type='CheckedCustomDataset',
                 data_root='{root}', data_prefix='val', pipeline=pipeline,
                 serialize_data=False))
test_dataloader = val_dataloader
'''


def _train(train_tool, tmp_path, config, *options):
    """Run tools/train.py on ``config`` (a path, or the text of a config
    written to ``tmp_path``) in ``tmp_path/work``."""
    if '\n' in config:
        path = tmp_path / 'config.py'
        path.write_text(config)
        config = str(path)
    work_dir = tmp_path / 'work'
    return train_tool.main([
        config, '--work-dir',
        str(work_dir), '--cfg-options', *QUIET,
        f'experiment_name=data_faults_{tmp_path.name}', *options
    ])


def _checkpoints(tmp_path):
    work_dir = tmp_path / 'work'
    return sorted(p.name for p in work_dir.glob('*.pth'))


# ------------------------------------------------- class folders of splits
@pytest.mark.parametrize('classes', [3, 4])
def test_an_extra_empty_class_folder_stops_before_training(
        train_tool, tmp_path, write_image_folder, classes):
    """Before: train mapped class0 to 1, val class0 to 0, and the run
    validated against the wrong classes to exit 0 (val top-1 0.00 % in the
    issue's sweep); with num_classes=3 the check said "Set num_classes=4",
    which leads straight into it. Now both stop, showing the differing
    names."""
    root = tmp_path / 'data'
    write_image_folder(str(root / 'train'), ('class0', 'class1', 'class2'))
    write_image_folder(str(root / 'val'), ('class0', 'class1', 'class2'), 1)
    os.makedirs(root / 'train' / 'a_empty')
    config = TINY_FOLDER.format(tiny=TINY, classes=classes, workers=0,
                                root=root)
    with pytest.raises(ConfigMismatchError) as info:
        _train(train_tool, tmp_path, config)
    assert str(info.value).startswith(
        'train_dataloader.dataset (CheckedCustomDataset, 4 classes) and '
        'val_dataloader.dataset (CheckedCustomDataset, 3 classes) do not '
        "list the same classes in the same order: only in "
        "train_dataloader.dataset: 'a_empty' (no samples). A label is an "
        "index into the class list, so label 0 means 'a_empty' in "
        "train_dataloader.dataset but 'class0' in val_dataloader.dataset")
    assert 'Set ' not in str(info.value)
    assert _checkpoints(tmp_path) == []


# ------------------------------------------------------- unreadable images
def test_a_zero_byte_image_is_named_from_a_loader_worker(
        train_tool, tmp_path, write_image_folder):
    """Before: cv2.error "!buf.empty()" from a worker, the file never
    named. Now the path, from the worker's error."""
    root = tmp_path / 'data'
    write_image_folder(str(root / 'train'), ('a', 'b'))
    write_image_folder(str(root / 'val'), ('a', 'b'), 1)
    empty = root / 'train' / 'b' / '1.jpg'
    empty.write_bytes(b'')
    config = TINY_FOLDER.format(tiny=TINY, classes=2, workers=2, root=root)
    with pytest.raises(ImageFileError) as info:
        _train(train_tool, tmp_path, config)
    message = str(info.value)
    assert 'in DataLoader worker process' in message
    assert f'CheckedCustomDataset: sample 3: {empty} is empty (0 bytes)' in (
        message)
    assert _checkpoints(tmp_path) == []
    # The scan finds it (and a non-image file) before anything is trained.
    (root / 'val' / 'a' / '0.png').write_text('not an image')
    with pytest.raises(ImageFileError) as info:
        _train(train_tool, tmp_path, config,
               'train_dataloader.dataset.scan_images=True',
               'val_dataloader.dataset.scan_images=True')
    assert f'\n  {empty} is empty (0 bytes)\n' in str(info.value)
    assert 'in DataLoader worker' not in str(info.value)


def test_a_huge_png_is_refused_from_its_header(train_tool, tmp_path,
                                               write_image_folder, png_bomb):
    """Before: a 20000x20000 PNG of a few hundred KB was decoded in full
    (gigabytes, seconds) by a loader worker, or by up to 8 scan threads at
    once. Now its header names it, with its size, and nothing decodes it;
    max_image_pixels sets the limit."""
    root = tmp_path / 'data'
    write_image_folder(str(root / 'train'), ('a', 'b'))
    write_image_folder(str(root / 'val'), ('a', 'b'), 1)
    bomb = root / 'train' / 'b' / '1.png'
    bomb.write_bytes(png_bomb)
    config = TINY_FOLDER.format(tiny=TINY, classes=2, workers=2, root=root)
    huge = (f'{bomb} ({len(png_bomb):,} bytes) is a 20000x20000 image '
            '(400,000,000 pixels), over max_image_pixels=89,478,485: it was '
            'not decoded (raise max_image_pixels to load it)')
    with pytest.raises(ImageFileError) as info:
        _train(train_tool, tmp_path, config)
    assert 'in DataLoader worker process' in str(info.value)
    assert f'CheckedCustomDataset: sample 3: {huge}.' in str(info.value)
    assert _checkpoints(tmp_path) == []
    with pytest.raises(ImageFileError) as info:
        _train(train_tool, tmp_path, config,
               'train_dataloader.dataset.scan_images=True',
               'train_dataloader.dataset.max_image_pixels=100000000')
    assert f'\n  {huge.replace("89,478,485", "100,000,000")}\n' in str(
        info.value)
    assert 'in DataLoader worker' not in str(info.value)


# ------------------------------------------------------------ CIFAR pickle
class _WritesMarker:

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


def test_a_crafted_cifar_pickle_runs_no_code(train_tool, tmp_path):
    """Before: the pickle's code ran (the marker file appeared), then "does
    not hold CIFAR images". Now it is refused before it runs."""
    folder = tmp_path / 'cifar' / 'cifar-10-batches-py'
    folder.mkdir(parents=True)
    marker = tmp_path / 'MARKER'
    for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        data = np.zeros((2, 3072), np.uint8)
        if name == 'data_batch_1':
            data = _WritesMarker(str(marker))
        with open(folder / name, 'wb') as f:
            pickle.dump(dict(data=data, labels=[0, 1]), f, protocol=2)
    with pytest.raises(ValueError) as info:
        _train(train_tool, tmp_path,
               osp.join(REPO, 'configs', 'lect', 'lect_v1_cifar10.py'),
               f'train_dataloader.dataset.data_root={tmp_path / "cifar"}',
               'train_dataloader.dataset.verify_md5=False',
               'train_dataloader.num_workers=0',
               'train_dataloader.persistent_workers=False')
    assert (f'{folder / "data_batch_1"} is not a CIFAR python pickle: it '
            'would run code when unpickled') in str(info.value)
    assert not marker.exists()


# ------------------------------------------------------------ empty epochs
@pytest.mark.parametrize('scheduler', ['shipped', 'by_epoch'])
def test_an_epoch_of_zero_iterations_stops_before_training(
        train_tool, tmp_path, scheduler):
    """batch_size above the data set's 64 samples with drop_last. Before:
    with the shipped schedulers mmengine's "epoch_length must be a positive
    integer, but got 0"; with an epoch-based one two empty epochs, an
    untrained model saved as best, exit 0."""
    config = TINY
    if scheduler == 'by_epoch':
        config = open(TINY).read().replace(
            "'../../../configs/", f"'{REPO}/configs/") + (
                "param_scheduler = dict(_delete_=True, "
                "type='CosineAnnealingLR', by_epoch=True)\n")
    with pytest.raises(ConfigMismatchError) as info:
        _train(train_tool, tmp_path, config,
               'train_dataloader.batch_size=128',
               'train_dataloader.drop_last=True')
    assert str(info.value).startswith(
        'train_dataloader gives 0 iterations per epoch: '
        'train_dataloader.dataset (Digits) has 64 samples (64 per rank, 1 '
        'rank), batch_size=128, drop_last=True, so nothing would be '
        'trained. Set train_dataloader.batch_size to at most 64, or '
        'train_dataloader.drop_last=False')
    assert _checkpoints(tmp_path) == []


# ------------------------------------------------------------- num_classes
def test_a_head_wider_than_the_classes_stops_before_training(
        train_tool, tmp_path):
    """Before: passed the early check silently and trained."""
    with pytest.raises(ConfigMismatchError) as info:
        _train(train_tool, tmp_path, TINY, 'model.head.num_classes=12',
               'data_preprocessor.num_classes=12')
    assert str(info.value).startswith(
        'model.head.num_classes=12 and data_preprocessor.num_classes=12, '
        'but train_dataloader.dataset (Digits: 10 classes, labels up to 9) '
        'needs 10')
    assert str(info.value).endswith(
        'outputs 10 to 11 would stand for no class. Set '
        'model.head.num_classes=10 and data_preprocessor.num_classes=10.')
    assert _checkpoints(tmp_path) == []


def test_mixup_targets_wider_than_the_head_stop_before_training(
        train_tool, tmp_path):
    """data_preprocessor.num_classes (Mixup's targets) above the head's.
    Before: an assertion inside LabelSmoothLoss at the first iteration."""
    config = open(TINY).read().replace(
        "'../../../configs/", f"'{REPO}/configs/") + '''
model['head']['loss'] = dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                             mode='original')
data_preprocessor['batch_augments'] = dict(
    augments=[dict(type='Mixup', alpha=0.8)])
'''
    with pytest.raises(ConfigMismatchError) as info:
        _train(train_tool, tmp_path, config,
               'data_preprocessor.num_classes=12')
    assert str(info.value).endswith(
        'their outputs, targets (Mixup/CutMix) and loss would have different '
        'widths. Set data_preprocessor.num_classes=10.')


# ----------------------------------------------------- the folder example
@pytest.mark.heavy
def test_the_folder_example_trains_on_generated_images(
        train_tool, tmp_path, write_image_folder):
    """configs/lect/lect_v1_folder.py as docs/custom_dataset.md uses it:
    data_root and num_classes set, at its 224x224 input (one step, smaller
    batches)."""
    classes = ('ant', 'bee', 'cow')
    write_image_folder(str(tmp_path / 'images' / 'train'), classes, 1)
    write_image_folder(str(tmp_path / 'images' / 'val'), classes, 1)
    config = f'''
_base_ = 'lect_mm::lect/lect_v1_folder.py'
data_root = '{tmp_path / "images"}'
num_classes = 3
model = dict(head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
'''
    loader = {'batch_size': 3, 'num_workers': 0, 'persistent_workers': False,
              'dataset.serialize_data': False}
    runner = _train(
        train_tool, tmp_path, config,
        *[f'{split}_dataloader.{k}={v}' for split in ('train', 'val')
          for k, v in loader.items()])
    assert runner.epoch == 1 and runner.iter == 1
    assert runner.train_dataloader.dataset.CLASSES == classes
    assert 'best_accuracy_top1_epoch_1.pth' in _checkpoints(tmp_path)
