"""A checkpoint against the run that loads it, through tools/test.py and
tools/train.py: class folders that sort in another order than the
checkpoint's classes stop the test; --resume with a longer schedule goes on
with the config's schedule (or, on request, the checkpoint's), with a
warning either way."""
import json
import math
import os
import os.path as osp
import pickle

import pytest
from cli_utils import log_text

from lect_mm.engine import ConfigMismatchError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')
TRAINED_ORDER = ['cow', 'ant', 'bee']  # not the folders' sorted order

# The tiny model on class folders, 8x8 input; {metainfo} for the training
# splits, the test split as it comes.
FOLDER = '''
_base_ = '{tiny}'
model = dict(head=dict(num_classes=3))
data_preprocessor = dict(num_classes=3)
pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=8),
            dict(type='PackInputs')]
split = dict(type='CheckedCustomDataset', data_root='{root}',
             pipeline=pipeline, serialize_data=False)
train_dataloader = dict(batch_size=3, dataset=dict(
    _delete_=True, data_prefix='train', metainfo={metainfo}, **split))
val_dataloader = dict(batch_size=3, dataset=dict(
    _delete_=True, data_prefix='train', metainfo={metainfo}, **split))
test_dataloader = dict(batch_size=3, dataset=dict(
    _delete_=True, data_prefix='test', **split))
'''


def _lrs(work_dir):
    """{step: lr} of every logged training iteration under ``work_dir``."""
    found = {}
    for root, _, files in os.walk(work_dir):
        if 'scalars.json' in files:
            with open(osp.join(root, 'scalars.json')) as f:
                for line in f:
                    record = json.loads(line)
                    if 'lr' in record:
                        found[record['step']] = record['lr']
    return found


# ------------------------------------------------------------- classes
@pytest.fixture(scope='module')
def folder_run(train_tool, tmp_path_factory, write_image_folder):
    """A checkpoint trained with the classes in TRAINED_ORDER."""
    tmp = tmp_path_factory.mktemp('classes')
    root = tmp / 'data'
    write_image_folder(str(root / 'train'), ('ant', 'bee', 'cow'), 1)
    config = tmp / 'folder.py'
    config.write_text(FOLDER.format(tiny=TINY, root=root,
                                    metainfo=dict(classes=TRAINED_ORDER)))
    train_tool.main([
        str(config), '--work-dir', str(tmp / 'work'), '--no-validate',
        '--cfg-options', 'train_cfg.max_epochs=1', 'log_level=WARNING',
        'experiment_name=classes_train'
    ])
    return tmp, str(config), str(tmp / 'work' / 'epoch_1.pth')


@pytest.mark.parametrize('folders', [('ant', 'bee', 'cow'),
                                     ('ant', 'bee', 'dog')])
def test_tools_test_stops_on_classes_the_checkpoint_does_not_list(
        test_tool, folder_run, write_image_folder, tmp_path, folders):
    """Before: the test ran and scored the model against the sorted folders
    (17.83 % top-1 where the right order gives 58.77 % in the issue). Now it
    stops before anything is evaluated, naming the checkpoint and showing
    both class lists."""
    _, config, checkpoint = folder_run
    write_image_folder(str(tmp_path / 'test'), folders, 1)
    work_dir = tmp_path / 'work'
    with pytest.raises(ConfigMismatchError) as info:
        test_tool.main([
            config, checkpoint, '--work-dir', str(work_dir), '--cfg-options',
            f'test_dataloader.dataset.data_root={tmp_path}',
            'experiment_name=classes_test'])
    message = str(info.value)
    assert message.startswith(
        f'Checkpoint {checkpoint} was trained on 3 classes (its meta['
        "'dataset_meta']['classes']): ['cow', 'ant', 'bee']; "
        'test_dataloader.dataset (CheckedCustomDataset) has 3: '
        f'{list(folders)}: ')
    if folders[-1] == 'cow':
        assert "the same names in another order. A label is an index into " \
            "the class list, so output 0 of the model means 'cow' but label " \
            "0 of the data means 'ant'" in message
    else:
        assert "only in the checkpoint: ['cow']; only in test_dataloader." \
            "dataset (CheckedCustomDataset): ['dog']. " in message
    assert 'test_dataloader.dataset.metainfo = dict(classes=[...])' in message
    assert not any(f.endswith('.json') for _, _, files in os.walk(work_dir)
                   for f in files)  # no metrics


def test_the_classes_in_the_checkpoints_order_label_the_folders_by_it(
        test_tool, folder_run, write_image_folder, tmp_path):
    """The way out the error gives: the test split's metainfo lists the
    folders in the checkpoint's order, and each folder gets that label
    (mmpretrain's CustomDataset would keep the sorted order and only
    rename the classes)."""
    _, config, checkpoint = folder_run
    write_image_folder(str(tmp_path / 'test'), ('ant', 'bee', 'cow'), 1)
    out = tmp_path / 'preds.pkl'
    test_tool.main([
        config, checkpoint, '--work-dir', str(tmp_path / 'work'), '--out',
        str(out), '--cfg-options', 'experiment_name=classes_test_ok',
        f'test_dataloader.dataset.data_root={tmp_path}',
        'test_dataloader.dataset.metainfo.classes=[cow,ant,bee]'
    ])
    with open(out, 'rb') as f:
        preds = pickle.load(f)
    labels = {osp.basename(osp.dirname(p['img_path'])): int(p['gt_label'])
              for p in preds}
    assert labels == {'cow': 0, 'ant': 1, 'bee': 2}


def test_resume_on_other_classes_stops_and_load_from_warns(
        train_tool, folder_run, tmp_path):
    tmp, config, checkpoint = folder_run
    sorted_classes = FOLDER.format(tiny=TINY, root=tmp / 'data',
                                   metainfo=None)
    other = tmp_path / 'sorted.py'
    other.write_text(sorted_classes)
    common = [str(other), '--work-dir', str(tmp_path / 'work'),
              '--no-validate']
    with pytest.raises(ConfigMismatchError) as info:
        train_tool.main(common + [
            '--resume', checkpoint, '--cfg-options', 'train_cfg.max_epochs=2',
            'experiment_name=classes_resume'])
    assert str(info.value).startswith(f'Checkpoint {checkpoint} was trained')
    assert not (tmp_path / 'work' / 'epoch_2.pth').exists()
    # Fine-tuning on other classes is legitimate: a warning.
    runner = train_tool.main(common + [
        '--cfg-options', f'load_from={checkpoint}', 'train_cfg.max_epochs=1',
        'experiment_name=classes_load_from'])
    assert runner.epoch == 1
    assert "load_from: Checkpoint" in log_text(tmp_path / 'work')


# ------------------------------------------------------------ schedule
# The user's schedule: a linear warm-up over the first epoch, then a cosine
# to eta_min, epoch-based and converted to iterations (2 per epoch here).
TWO_SCHEDULERS = '''
_base_ = '{tiny}'
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=1, {end}
         eta_min=1e-5, convert_to_iter_based=True),
]
'''
FAST = ['train_dataloader.dataset.indices=32', 'log_level=WARNING']


@pytest.mark.parametrize('end, longer', [
    ('end=2,', ['train_cfg.max_epochs=4', 'param_scheduler.1.end=4']),
    ('', ['train_cfg.max_epochs=4']),  # end: max_epochs
])
def test_resume_with_a_longer_schedule_follows_the_config(
        train_tool, tmp_path, end, longer):
    """Before: the checkpoint's schedulers were restored over the config's,
    silently: the cosine had ended, and the lr stayed at its last value for
    the 4 new iterations. Now the run goes on where a 4-epoch run would be:
    the cosine over iterations 2 to 8, with a warning naming the
    differences; resume_schedule='checkpoint' keeps the old behaviour,
    with a warning too."""
    config = tmp_path / 'two.py'
    config.write_text(TWO_SCHEDULERS.format(tiny=TINY, end=end))
    work_dir = tmp_path / 'work'

    def train(*options):
        return train_tool.main([
            str(config), '--work-dir', str(work_dir), '--no-validate',
            '--cfg-options', *FAST, f'experiment_name={tmp_path.name}',
            *options])

    train('train_cfg.max_epochs=2')
    checkpoint = str(work_dir / 'epoch_2.pth')
    runner = train(*longer, 'resume=True')
    assert runner.epoch == 4
    lrs = _lrs(work_dir)
    for step in range(5, 9):  # T_max = 6 iterations from iteration 2
        expected = 1e-5 + (1e-3 - 1e-5) * (
            1 + math.cos(math.pi * (step - 3) / 6)) / 2
        assert lrs[step] == pytest.approx(expected, rel=1e-9), step
    log = log_text(work_dir)
    assert (f"Resuming from {checkpoint}: the config's parameter schedule "
            'differs from the one the checkpoint holds (checkpoint -> '
            'config): param_scheduler[1] (CosineAnnealingLR): T_max 2 -> 6, '
            'end 4 -> 8 (begin, end and T_max of a scheduler with '
            'by_epoch=False count iterations, 2 per epoch). The run goes on '
            "with the config's schedule") in log
    assert "resume_schedule='checkpoint'" in log
    if end:
        return
    # The checkpoint's schedule on request: the ended cosine's last lr.
    other = tmp_path / 'checkpoint_schedule'
    runner = train_tool.main([
        str(config), '--work-dir', str(other), '--no-validate', '--resume',
        checkpoint, '--cfg-options', *FAST, *longer,
        'resume_schedule=checkpoint', f'experiment_name={tmp_path.name}_c'])
    assert runner.epoch == 4
    resumed = _lrs(other)
    assert sorted(resumed) == [5, 6, 7, 8]
    assert len(set(resumed.values())) == 1
    assert "resume_schedule='checkpoint': the checkpoint's schedule goes " \
        'on' in log_text(other)
    with pytest.raises(ConfigMismatchError) as info:
        train_tool.main([
            str(config), '--work-dir', str(other), '--no-validate',
            '--resume', checkpoint, '--cfg-options', *FAST,
            'resume_schedule=conf', f'experiment_name={tmp_path.name}_x'])
    assert str(info.value).startswith(
        "resume_schedule='conf': choose one of 'config', 'checkpoint'")
