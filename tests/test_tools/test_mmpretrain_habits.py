"""mmpretrain's habits work with lect_mm: every option of mmpretrain's own
``tools/train.py`` and ``tools/test.py``, and a user's config outside the
checkout that inherits ``_base_ = 'lect_mm::...'``."""
import os
import re
from pathlib import Path

import mmpretrain
import pytest

MMPRETRAIN_TOOLS = Path(mmpretrain.__file__).parent / '.mim' / 'tools'

# A user's config in a folder of its own: LeCT v1 of lect_mm's CIFAR-10
# config, on the embedded digits at 32x32 (LeCT takes any input size).
USER_CONFIG = '''
_base_ = 'lect_mm::lect/lect_v1_cifar10.py'
digits = dict(type='Digits', image_size=32, pipeline=[dict(type='PackInputs')])
train_dataloader = dict(
    _delete_=True, batch_size=8, num_workers=0,
    dataset=dict(digits, split='train', indices=16),
    sampler=dict(type='SeededSampler', shuffle=True))
val_dataloader = dict(
    _delete_=True, batch_size=8, num_workers=0,
    dataset=dict(digits, split='val', indices=8),
    sampler=dict(type='DefaultSampler', shuffle=False))
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=1)
'''


def _options(script: Path):
    return set(re.findall(r"'(--[a-z][a-z_-]*)'", script.read_text()))


@pytest.mark.parametrize('name', ['train', 'test'])
def test_every_mmpretrain_option_is_accepted(load_script, name,
                                             monkeypatch):
    mmpretrain_options = _options(MMPRETRAIN_TOOLS / f'{name}.py')
    assert '--work-dir' in mmpretrain_options
    tool = load_script(f'tools/{name}.py')
    parsed = []

    def capture(parser, argv=None):
        parsed.append(parser)
        return parser.parse_args(argv)

    monkeypatch.setattr(tool, 'parse_launcher_args', capture)
    tool.parse_args(['config.py'] + (['ckpt.pth'] if name == 'test' else []))
    ours = set(parsed[0]._option_string_actions) | {
        '--launcher', '--local_rank', '--local-rank'
    }
    assert mmpretrain_options <= ours, mmpretrain_options - ours


@pytest.mark.heavy
def test_lect_mm_base_from_outside_trains_and_tests_with_pictures(
        load_script, tmp_path, monkeypatch):
    user = tmp_path / 'my_project'
    user.mkdir()
    (user / 'my_lect.py').write_text(USER_CONFIG)
    monkeypatch.chdir(user)
    runner = load_script('tools/train.py').main(
        ['my_lect.py', '--work-dir', 'run'])
    assert type(runner.model.backbone).__name__ == 'LeCT'
    checkpoint = (user / 'run' / 'last_checkpoint').read_text().strip()

    test = load_script('tools/test.py')
    metrics = test.main(['my_lect.py', checkpoint, '--work-dir', 'test',
                         '--show-dir', 'pictures', '--interval', '3'])
    assert 'accuracy/top1' in metrics
    pictures = sorted(p.name for p in (user / 'pictures').iterdir())
    # 8 validation images, one picture every third
    assert len(pictures) == 3 and all(p.endswith('.png') for p in pictures)
    # flip TTA, averaging the scores of both views
    tta = test.main(['my_lect.py', checkpoint, '--work-dir', 'tta', '--tta'])
    assert 'accuracy/top1' in tta
    assert os.path.isdir(user / 'tta')


MMPRETRAIN_MODEL_CONFIG = '''
_base_ = ['mmpretrain::_base_/models/resnet18.py',
          'lect_mm::_base_/schedules/report_60e.py',
          'lect_mm::_base_/default_runtime.py']
# ResNet-18's depth at 1/8 of its widths: the claim is about the config
# and the runtime, and the narrow model saves its checkpoints fast
model = dict(backbone=dict(stem_channels=8, base_channels=8),
             head=dict(num_classes=10, in_channels=64))
data_preprocessor = dict(num_classes=10, mean=[127.5] * 3, std=[127.5] * 3)
digits = dict(type='Digits', image_size=32, pipeline=[dict(type='PackInputs')])
train_dataloader = dict(
    batch_size=8, num_workers=0, dataset=dict(digits, split='train',
                                              indices=16),
    sampler=dict(type='SeededSampler', shuffle=True))
val_dataloader = dict(
    batch_size=8, num_workers=0, dataset=dict(digits, split='val', indices=8),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
train_cfg = dict(max_epochs=1)
'''


@pytest.mark.heavy
def test_mmpretrain_model_on_lect_mm_runtime(load_script, tmp_path,
                                             monkeypatch):
    """mmpretrain's own ResNet-18 with lect_mm's runtime base, from a folder
    outside the checkout: the run is LectRunner's, its checkpoint carries
    the digest."""
    from lect_mm.engine import LectRunner, verify_checkpoint_file
    (tmp_path / 'resnet.py').write_text(MMPRETRAIN_MODEL_CONFIG)
    monkeypatch.chdir(tmp_path)
    runner = load_script('tools/train.py').main(
        ['resnet.py', '--work-dir', 'run'])
    assert isinstance(runner, LectRunner)
    assert type(runner.model.backbone).__name__ == 'ResNet'
    assert verify_checkpoint_file(str(tmp_path / 'run' / 'epoch_1.pth'))
