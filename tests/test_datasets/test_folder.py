"""CheckedCustomDataset: mmpretrain's CustomDataset whose unreadable images
are named with their paths, and its up-front scan."""
import os
import os.path as osp

import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmpretrain.datasets import CustomDataset
from mmpretrain.registry import DATASETS

from lect_mm.config_errors import explain_config_errors
from lect_mm.datasets import (CheckedCustomDataset, ImageFileError,
                              image_file_problem)
from lect_mm.datasets.folder import image_header_size
from lect_mm.engine import ConfigError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PIPELINE = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=8),
    dict(type='PackInputs')
]
# mmengine's serialisation (for loader workers) runs gc.collect(): slow in a
# test process, irrelevant here.
FAST = dict(serialize_data=False)


@pytest.fixture
def folder(tmp_path, write_image_folder):
    root = str(tmp_path / 'train')
    write_image_folder(root, per_class=3)
    return root


def test_registered_and_same_samples_as_custom_dataset(folder):
    assert DATASETS.get('CheckedCustomDataset') is CheckedCustomDataset
    ours = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE, **FAST)
    theirs = CustomDataset(data_root=folder, pipeline=PIPELINE, **FAST)
    assert ours.CLASSES == theirs.CLASSES == ('cat', 'dog')
    assert ours.data_list == theirs.data_list
    for i in range(len(theirs)):  # grey, RGBA and 16-bit load as 3 x 8 bit
        inputs = ours[i]['inputs']
        assert inputs.shape[0] == 3 and inputs.dtype.itemsize == 1
        np.testing.assert_array_equal(inputs, theirs[i]['inputs'])


def _damage(path, how):
    if how == 'empty':
        open(path, 'wb').close()
    elif how == 'text':
        with open(path, 'w') as f:
            f.write('not an image')
    elif how == 'truncated':
        with open(path, 'rb') as f:
            head = f.read(osp.getsize(path) // 2)
        with open(path, 'wb') as f:
            f.write(head)
    else:
        os.remove(path)


@pytest.mark.parametrize('how,problem', [
    ('empty', 'is empty (0 bytes)'),
    ('text', '(12 bytes) cannot be decoded as an image (truncated, damaged '
     'or not an image)'),
    ('truncated', 'bytes) cannot be decoded as an image (truncated, damaged '
     'or not an image)'),
    ('missing', 'does not exist'),
])
def test_a_bad_image_is_named_when_sampled(folder, how, problem):
    """Before: an empty file raised OpenCV's "!buf.empty()" without the
    path; now every kind of bad file is named."""
    dataset = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE, **FAST)
    path = dataset.get_data_info(4)['img_path']
    _damage(path, how)
    dataset[3]  # the others load
    with pytest.raises(ImageFileError) as info:
        dataset[4]
    message = str(info.value)
    assert message.startswith(f'CheckedCustomDataset: sample 4: {path} ')
    assert problem in message
    assert 'scan_images=True' in message
    assert image_file_problem(path) in message


def test_an_error_after_loading_is_kept_with_the_path_as_note(folder):
    def fails(results):
        raise KeyError('boom')

    dataset = CheckedCustomDataset(
        data_root=folder, pipeline=[dict(type='LoadImageFromFile'), fails],
        **FAST)
    with pytest.raises(KeyError, match='boom') as info:
        dataset[0]
    path = dataset.get_data_info(0)['img_path']
    assert info.value.__notes__ == [
        f'(sample 0 of CheckedCustomDataset: {path})']


def test_scan_names_every_bad_file_when_built(folder):
    dataset = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE, **FAST)
    paths = [dataset.get_data_info(i)['img_path'] for i in (1, 5)]
    _damage(paths[0], 'empty')
    _damage(paths[1], 'text')
    # by default, nothing is loaded when the data set is built
    CheckedCustomDataset(data_root=folder, pipeline=PIPELINE, **FAST)
    with pytest.raises(ImageFileError) as info:
        CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                             scan_images=True, scan_threads=2, **FAST)
    lines = str(info.value).splitlines()
    assert lines[0] == (f'CheckedCustomDataset ({dataset.img_prefix}): 2 of '
                        '6 images cannot be loaded (scan_images=True):')
    assert lines[1] == f'  {paths[0]} is empty (0 bytes)'
    assert lines[2].startswith(f'  {paths[1]} (12 bytes) cannot be decoded')


# ------------------------------------------------------- too many pixels
@pytest.fixture
def decoded(monkeypatch):
    """The byte counts of the files mmcv's decoder is given."""
    import mmcv
    sizes, decode = [], mmcv.imfrombytes

    def spy(content, *args, **kwargs):
        sizes.append(len(content))
        return decode(content, *args, **kwargs)

    monkeypatch.setattr(mmcv, 'imfrombytes', spy)
    return sizes


def _bomb_message(path, limit='89,478,485'):
    return (f'{path} ({osp.getsize(path):,} bytes) is a 20000x20000 image '
            f'(400,000,000 pixels), over max_image_pixels={limit}: it was '
            'not decoded (raise max_image_pixels to load it)')


def test_a_huge_image_is_refused_from_its_header(folder, png_bomb, decoded):
    """Before: a 20000x20000 PNG of a few hundred KB was decoded in full
    (gigabytes) by the scan's threads and by every loader that sampled it.
    Now its header is read and it is named, never decoded."""
    bomb = osp.join(folder, 'dog', 'huge.png')
    with open(bomb, 'wb') as f:
        f.write(png_bomb)
    with pytest.raises(ImageFileError) as info:
        CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                             scan_images=True, scan_threads=2, **FAST)
    lines = str(info.value).splitlines()
    assert lines[0].endswith('1 of 7 images cannot be loaded '
                             '(scan_images=True):')
    assert lines[1] == '  ' + _bomb_message(bomb)
    assert len(decoded) == 6 and len(png_bomb) not in decoded

    dataset = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                                   **FAST)
    idx = [dataset.get_data_info(i)['img_path']
           for i in range(len(dataset))].index(bomb)
    with pytest.raises(ImageFileError) as info:
        dataset[idx]
    assert str(info.value) == (f'CheckedCustomDataset: sample {idx}: '
                               f'{_bomb_message(bomb)}.')
    assert image_file_problem(bomb) == _bomb_message(bomb)
    assert len(png_bomb) not in decoded


def test_max_image_pixels_is_the_limit_in_scan_and_training(
        folder, decoded):
    """A limit under the written images' sizes (60 to 66 pixels) refuses
    the larger ones, sampled or scanned; None lifts it."""
    dataset = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                                   max_image_pixels=63, **FAST)
    sizes = {dataset.get_data_info(i)['img_path']: image_header_size(
        dataset.get_data_info(i)['img_path']) for i in range(len(dataset))}
    assert sorted(w * h for w, h in sizes.values()) == [60, 63, 63, 63, 64,
                                                        66]
    too_large = [i for i, (w, h) in enumerate(sizes.values()) if w * h > 63]
    for i in range(len(dataset)):
        if i in too_large:
            with pytest.raises(ImageFileError,
                               match='over max_image_pixels=63: it was not '
                               'decoded'):
                dataset[i]
        else:
            assert dataset[i]['inputs'].shape[0] == 3
    assert len(decoded) == len(dataset) - len(too_large)
    with pytest.raises(ImageFileError,
                       match='2 of 6 images cannot be loaded') as info:
        CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                             max_image_pixels=63, scan_images=True, **FAST)
    assert 'is a 11x6 image (66 pixels)' in str(info.value)
    # None: no limit
    unlimited = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                                     max_image_pixels=None, scan_images=True,
                                     **FAST)
    assert all(unlimited[i] for i in too_large)
    for bad in (0, -1, 2.5, True, '100'):
        with pytest.raises(ValueError, match='max_image_pixels must be a '
                           r'positive int or None \(no limit\), got '):
            CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                                 max_image_pixels=bad, **FAST)


def test_image_header_size(tmp_path, folder):
    import cv2
    for ext in ('png', 'jpg', 'bmp', 'tif', 'webp'):
        path = str(tmp_path / f'img.{ext}')
        cv2.imwrite(path, np.zeros((5, 13, 3), np.uint8))
        assert image_header_size(path) == (13, 5), ext
    text = tmp_path / 'text.png'
    text.write_text('not an image')
    assert image_header_size(str(text)) is None
    assert image_header_size(str(tmp_path / 'missing.png')) is None


IMAGENET_BASE = '''
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs32.py',
          '{repo}/configs/_base_/default_runtime.py']
train_dataloader = dict(dataset=dict({delete}type='CheckedCustomDataset',
    data_root='{root}', data_prefix='', {pipeline}))
'''


def test_mmpretrain_imagenet_base_needs_delete_for_a_folder(tmp_path,
                                                            folder):
    """mmpretrain's imagenet_bs32.py sets ImageNet's split='train', which a
    folder data set does not take: merged into another type it is named;
    `_delete_=True` (giving the pipeline again) replaces the dict."""
    init_default_scope('mmpretrain')
    path = tmp_path / 'cfg.py'
    path.write_text(IMAGENET_BASE.format(
        repo=REPO, root=folder, delete='', pipeline=''))
    cfg = Config.fromfile(str(path))
    with pytest.raises(ConfigError) as info:
        with explain_config_errors(cfg):
            DATASETS.build(cfg.train_dataloader.dataset)
    assert str(info.value).startswith('train_dataloader.dataset.split: ')
    assert "CustomDataset has no argument 'split'" in str(info.value)
    path.write_text(IMAGENET_BASE.format(
        repo=REPO, root=folder, delete='_delete_=True, ',
        pipeline='pipeline={{_base_.train_pipeline}}, serialize_data=False'))
    cfg = Config.fromfile(str(path))
    dataset = DATASETS.build(cfg.train_dataloader.dataset)
    assert dataset[0]['inputs'].shape == (3, 224, 224)


def test_mmpretrain_verify_dataset_lists_bad_files_of_the_folder_base(
        tmp_path, folder, monkeypatch, capsys):
    """docs/custom_dataset.md: mmpretrain's own scan tool reads the folder
    base's configs."""
    import importlib.util
    import sys

    import mmpretrain
    script = osp.join(osp.dirname(mmpretrain.__file__), '.mim', 'tools',
                      'misc', 'verify_dataset.py')
    if not osp.isfile(script):
        pytest.skip('mmpretrain installed without its tools')
    bad = osp.join(folder, 'dog', '9.png')
    open(bad, 'wb').close()
    config = tmp_path / 'folder.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/_base_/datasets/folder.py'\n"
        f"train_dataloader = dict(dataset=dict(data_root='{folder}', "
        "data_prefix=''))\n")
    out = tmp_path / 'broken.log'
    monkeypatch.setattr(sys, 'argv', [
        script, str(config), '--out-path', str(out), '--phase', 'train'])
    spec = importlib.util.spec_from_file_location('verify_dataset', script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    assert out.read_text().split() == [bad]


def test_classes_in_another_order_label_the_folders_by_it(folder):
    """metainfo classes naming the folders in another order: each folder is
    labelled by its place in the list (CustomDataset keeps the sorted order,
    so every name would be wrong); other names only rename, as there."""
    ours = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                                metainfo=dict(classes=['dog', 'cat']), **FAST)
    theirs = CustomDataset(data_root=folder, pipeline=PIPELINE,
                           metainfo=dict(classes=['dog', 'cat']), **FAST)
    assert ours.CLASSES == theirs.CLASSES == ['dog', 'cat']

    def labels(dataset):
        return {(osp.basename(osp.dirname(info['img_path'])),
                 info['gt_label']) for info in dataset.data_list}

    assert labels(ours) == {('dog', 0), ('cat', 1)}
    assert labels(theirs) == {('cat', 0), ('dog', 1)}
    renamed = CheckedCustomDataset(data_root=folder, pipeline=PIPELINE,
                                   metainfo=dict(classes=['Cat', 'Dog']),
                                   **FAST)
    assert labels(renamed) == {('cat', 0), ('dog', 1)}
