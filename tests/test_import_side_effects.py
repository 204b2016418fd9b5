"""``import lect_mm`` adds components and changes nothing else.

A fresh interpreter imports the OpenMMLab stack, takes a snapshot of the
process-wide state a library could change, imports lect_mm and compares:
warning filters, mmengine's checkpoint loading functions and loader schemes,
every existing entry of every registry of mmengine's registry trees, the
weight initialisers, torch's ``weights_only`` safe globals, random states,
torch's global switches, signal handlers, logging and mmengine's
package table. New registry entries, new child registries, the
``lect_mm`` entry of mmengine's package table (for ``lect_mm::`` configs)
and the ``lect_mm+`` checkpoint scheme (the authors' weights, converted on
load) are what an import may add.
"""
import json
import os
import subprocess
import sys

SNAPSHOT = r'''
import json, logging, os, random, signal, sys, warnings

import numpy as np
import torch
bare_safe_globals = sorted(
    repr(g) for g in torch.serialization.get_safe_globals())
import mmengine.runner
import mmengine.runner.checkpoint as mm_checkpoint
import mmengine.registry as mm_registry
import mmpretrain.registry as mmpretrain_registry
# the stack lect_mm extends, imported as far as lect_mm imports it
import mmcv.cnn, mmcv.transforms  # noqa: E401,F401
import mmpretrain.apis, mmpretrain.datasets, mmpretrain.engine  # noqa
import mmpretrain.evaluation, mmpretrain.models  # noqa: E401,F401
import mmpretrain.visualization  # noqa: F401
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.registry import Registry


def registries():
    """Every registry of mmengine's and mmpretrain's trees, by name."""
    found = {}

    def visit(registry, path):
        found[path] = registry
        for scope, child in sorted(registry.children.items()):
            visit(child, f'{path}/{scope}')

    for module in (mm_registry, mmpretrain_registry):
        for name, value in vars(module).items():
            if isinstance(value, Registry):
                root = value
                while root.parent is not None:
                    root = root.parent
                visit(root, root.name)
    return found


def ident(obj):
    return f'{getattr(obj, "__module__", "?")}.' \
        f'{getattr(obj, "__qualname__", type(obj).__name__)}@{id(obj)}'


def snapshot():
    regs = registries()
    return dict(
        warning_filters=[repr(f) for f in warnings.filters],
        showwarning=ident(warnings.showwarning),
        load_checkpoint=ident(mmengine.runner.load_checkpoint),
        checkpoint_module=ident(mm_checkpoint.load_checkpoint),
        loader_schemes={k: ident(v) for k, v in
                        mm_checkpoint.CheckpointLoader._schemes.items()},
        registry_entries={path: {k: ident(v) for k, v in
                                 r._module_dict.items()}
                          for path, r in regs.items()},
        registry_children={path: sorted(r.children)
                           for path, r in regs.items()},
        safe_globals=sorted(
            repr(g) for g in torch.serialization.get_safe_globals()),
        module2package=dict(MODULE2PACKAGE),
        random_state=repr(random.getstate())[-200:],
        numpy_state=repr(np.random.get_state()[1][:8].tolist()),
        torch_state=torch.get_rng_state()[:64].tolist(),
        torch_switches=[torch.get_default_dtype().__repr__(),
                        torch.get_num_threads(), torch.is_grad_enabled(),
                        torch.are_deterministic_algorithms_enabled(),
                        torch.is_anomaly_enabled(),
                        torch.backends.cudnn.benchmark],
        signals={s.name: ident(signal.getsignal(s)) for s in
                 (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)},
        excepthook=ident(sys.excepthook),
        root_logging=[logging.getLogger().level,
                      [ident(h) for h in logging.getLogger().handlers],
                      [ident(f) for f in logging.getLogger().filters]],
        # the timm front door comes with `import lect_mm.timm` only
        optional_stacks=sorted(
            m for m in ('timm', 'segmentation_models_pytorch',
                        'lect_mm.timm') if m in sys.modules),
    )


before = snapshot()
import lect_mm  # noqa: E402,F401
from lect_mm.engine import workdir  # noqa: E402
after = snapshot()
after['fork_hook_registered'] = workdir.fork_hook_registered()
json.dump(dict(before=before, after=after,
               bare_safe_globals=bare_safe_globals), sys.stdout)
'''


def _snapshots():
    env = dict(os.environ, PYTHONWARNINGS='')
    out = subprocess.run([sys.executable, '-c', SNAPSHOT],
                         capture_output=True, text=True, env=env,
                         check=True).stdout
    result = json.loads(out)
    return result['before'], result['after'], result['bare_safe_globals']


def test_import_changes_nothing_but_adds_components():
    before, after, bare_safe_globals = _snapshots()
    assert not after.pop('fork_hook_registered')
    # torch's safe globals: lect_mm adds none (checked with everything else
    # at the end). The stack it extends does, by way of torch itself: torch
    # registers some of its own classes when torch._dynamo and
    # torch.distributed.tensor are imported, which mmengine.runner and
    # mmpretrain.models import, so `import lect_mm` from a bare interpreter
    # shows exactly those and nothing of lect_mm's.
    from_the_stack = set(before['safe_globals']) - set(bare_safe_globals)
    assert all(g.startswith("<class 'torch.") for g in from_the_stack), \
        from_the_stack
    # registries: every existing entry is the same object; lect_mm adds
    # its own entries and its child registries (scope 'lect_mm') only
    entries_before = before.pop('registry_entries')
    entries_after = after.pop('registry_entries')
    for path, entries in entries_before.items():
        changed = {k: (v, entries_after[path].get(k))
                   for k, v in entries.items()
                   if entries_after[path].get(k) != v}
        assert not changed, (path, changed)
    added = {path: sorted(set(e) - set(entries_before.get(path, {})))
             for path, e in entries_after.items()}
    assert 'LeCT' in added['model/mmpretrain']
    # nothing added shadows a name of the registry's ancestors, but for the
    # strict `Pretrained` of lect_mm's own scope (used by LectRunner only)
    assert added['weight initializer/mmpretrain/lect_mm'] == ['Pretrained']
    for path, names in added.items():
        if path.endswith('/lect_mm'):
            continue
        parts = path.split('/')
        for i in range(1, len(parts)):
            ancestor = '/'.join(parts[:i])
            shadowed = set(names) & set(entries_after.get(ancestor, {}))
            assert not shadowed, (path, ancestor, shadowed)
    children_before = before.pop('registry_children')
    children_after = after.pop('registry_children')
    for path, children in children_before.items():
        assert set(children_after[path]) - set(children) <= {'lect_mm'}
    # mmengine's package table: the `lect_mm::` prefix, nothing else
    table_before, table_after = (before.pop('module2package'),
                                 after.pop('module2package'))
    assert set(table_after) - set(table_before) == {'lect_mm'}
    assert {k: table_after[k] for k in table_before} == table_before
    # mmengine's checkpoint schemes: lect_mm's own prefix added, none changed
    schemes_before, schemes_after = (before.pop('loader_schemes'),
                                     after.pop('loader_schemes'))
    assert set(schemes_after) - set(schemes_before) == {r'lect_mm\+'}
    assert {k: schemes_after[k] for k in schemes_before} == schemes_before
    # everything else is exactly as before
    for key in before:
        assert after[key] == before[key], key
