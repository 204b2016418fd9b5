"""docs/adding_a_block.md: its block file and config, run as written."""
import re
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import lect_mm  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / 'docs' / 'adding_a_block.md'


def doc_files():
    """``{file name: code}`` of the page's ``# file:`` code blocks."""
    blocks = re.findall(r'```python\n# file: (\S+)\n(.*?)```',
                        DOC.read_text(), flags=re.S)
    return dict(blocks)


def test_the_page_builds_and_trains_its_block(tmp_path, monkeypatch):
    files = doc_files()
    assert set(files) == {'my_blocks.py', 'lect_poolmixer_digits.py'}
    for name, code in files.items():
        (tmp_path / name).write_text(code.replace(
            "'../demo/lect_digits.py'",
            repr(str(REPO / 'configs' / 'demo' / 'lect_digits.py'))))
    monkeypatch.syspath_prepend(str(tmp_path))

    cfg = Config.fromfile(str(tmp_path / 'lect_poolmixer_digits.py'))
    model = MODELS.build(cfg.model)
    mixers = [b.attn for s in model.backbone.stages for b in s.blocks]
    assert mixers and all(type(m).__name__ == 'PoolMixer' for m in mixers)
    # LeMSA's arguments did not leak into the new block's config
    assert not any('sr_ratio' in repr(m) for m in mixers)

    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    g = torch.Generator().manual_seed(0)
    data = dict(
        inputs=[torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8,
                              generator=g) for _ in range(4)],
        data_samples=[DataSample().set_gt_label(i) for i in range(4)])
    before = [p.detach().clone() for p in model.parameters()]
    losses = model.train_step(data, optim_wrapper)
    assert torch.isfinite(losses['loss'])
    changed = sum(not torch.equal(a, b.detach())
                  for a, b in zip(before, model.parameters()))
    assert changed > 0
