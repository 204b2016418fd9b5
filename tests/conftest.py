"""Fixtures shared by the whole suite.

Scripts (``tools/*.py``) and the reference model of ``tests/reference`` are
files, not modules of an importable package: :func:`load_script` imports
them by path, once per session. :func:`same_outputs_and_grads` checks a
model's gradient checkpointing. Fixtures of the data-set tests live in
``tests/test_datasets/conftest.py``.
"""
import gc
import importlib.util
import os
import struct
import zipfile
from pathlib import Path

# One intra-op thread in this process and in the tools it starts (set before
# torch starts its pool): the tests run small tensors, and the README's
# command runs them in one pytest worker per core (pytest-xdist), where more
# threads only contend. Subprocesses inherit it, so a run resumed here and
# its reference run in a child compute alike.
os.environ.setdefault('OMP_NUM_THREADS', '1')

import pytest  # noqa: E402

# torch and mmengine are imported where they are used: this file is also
# loaded by pytest-xdist's controller, which runs no test and should start
# its workers without first importing torch.

REPO = Path(__file__).resolve().parents[1]


def _import_file(relpath: str):
    path = REPO / relpath
    if not path.is_file():
        raise FileNotFoundError(f'{relpath} not found in {REPO}')
    # A name of its own: tools/test.py must not shadow the stdlib's ``test``.
    name = 'lect_mm_script_' + relpath.replace('/', '_').removesuffix('.py')
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='session')
def load_script():
    """``load_script('tools/train.py')``: the script as a module.

    Each file is executed once per session; later calls return the same
    module.
    """
    cache = {}

    def load(relpath: str):
        if relpath not in cache:
            cache[relpath] = _import_file(relpath)
        return cache[relpath]

    return load


@pytest.fixture(scope='session')
def lect_reference(load_script):
    """``tests/reference/lect_reference.py``: the reference-layout LeCT."""
    return load_script('tests/reference/lect_reference.py')


def _step_with_calls(model, x):
    """One training step of ``model`` from seed 0: its outputs, the input
    gradient, the parameter gradients and how often each submodule ran."""
    import torch
    calls = {}
    hooks = [
        m.register_forward_pre_hook(
            lambda *args, name=name: calls.update({name: calls.get(name, 0)
                                                   + 1}))
        for name, m in model.named_modules()
    ]
    model.train()
    inputs = x.clone().requires_grad_()
    torch.manual_seed(0)  # the same dropout masks, if any
    outs = model(inputs)
    weights = torch.Generator().manual_seed(1)
    loss = sum((out * torch.randn(out.shape, generator=weights)).sum()
               for out in outs)
    loss.backward()
    for hook in hooks:
        hook.remove()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return outs, inputs.grad, grads, calls


def _same_outputs_and_grads(plain, checkpointed, x):
    """Load ``plain``'s weights into ``checkpointed`` (the same model with
    ``with_cp=True``), run a training step of each from the same seed, and
    check that the outputs, the input gradient and every parameter
    gradient agree, that some submodules ran again in backward, and that
    none ran more than twice as often as without checkpointing (nothing is
    recomputed twice). Returns the submodules that ran again."""
    import torch
    checkpointed.load_state_dict(plain.state_dict())
    outs_a, x_grad_a, grads_a, calls_a = _step_with_calls(plain, x)
    outs_b, x_grad_b, grads_b, calls_b = _step_with_calls(checkpointed, x)
    assert calls_a.keys() == calls_b.keys()
    rerun = {n for n in calls_a if calls_b[n] > calls_a[n]}
    assert rerun, 'no checkpointing in backward'
    twice = {n: (calls_a[n], calls_b[n])
             for n in calls_a if calls_b[n] > 2 * calls_a[n]}
    assert not twice, f'recomputed more than once: {twice}'
    for out_a, out_b in zip(outs_a, outs_b):
        torch.testing.assert_close(out_b, out_a)
    torch.testing.assert_close(x_grad_b, x_grad_a)
    assert grads_a.keys() == grads_b.keys()
    for name, grad in grads_a.items():
        assert (grad is None) == (grads_b[name] is None), name
        if grad is not None:
            torch.testing.assert_close(grads_b[name], grad, msg=name)
    return rerun


@pytest.fixture(scope='session')
def same_outputs_and_grads():
    """``same_outputs_and_grads(plain, checkpointed, x)``: gradient
    checkpointing (``with_cp=True``) changes neither outputs nor gradients,
    reruns some submodules in backward and none more than once; returns
    the names of those it reran."""
    return _same_outputs_and_grads


@pytest.fixture(scope='session', autouse=True)
def config_text_without_yapf():
    """mmengine formats a config's whole text with yapf each time a run
    logs, dumps or checkpoints it, and nearly every run of the suite has a
    config of its own (its work dir), so the formatting cannot be cached:
    it was the largest single cost of the suite's tiny runs. Here a config
    gives mmengine's own unformatted text
    (what ``Config(format_python_code=False)`` gives), after the check that
    yapf's parse makes: text that is not Python raises mmengine's
    SyntaxError. Runs in fresh processes (the ranks of
    tools/dist_train.sh) still format with yapf."""
    from mmengine.config import Config
    text_of = Config.pretty_text.fget

    def pretty_text(self):
        formatted = self._format_python_code
        object.__setattr__(self, '_format_python_code', False)
        try:
            text = text_of(self)
        finally:
            object.__setattr__(self, '_format_python_code', formatted)
        if formatted:
            try:
                compile(text, '<config>', 'exec', dont_inherit=True)
            except SyntaxError:
                raise SyntaxError('Failed to format the config file, please '
                                  f'check the syntax of: \n{text}') from None
        return text

    Config.pretty_text = property(pretty_text)
    yield
    Config.pretty_text = property(text_of)


class _ReadEachConfigFileOnce:
    """Wraps mmengine's ``Config._file2dict`` (what ``Config.fromfile``
    runs for a file and, recursively, for each of its ``_base_`` files) so
    that each config file is read once per content.

    Each read copies the file into a fresh temporary folder, substitutes
    variables and runs the code: about 15 ms, for each base of each config,
    again for every config that inherits it (the suite reads the 87 leaf
    configs and their bases at collection in every pytest worker, and
    every tiny run reads its config again). The result depends only on the
    text of the file and of the files it inherits from; an entry is reused
    while all of those files hold the same bytes, and handed out as a deep
    copy. Files that read environment variables (``{{$VAR}}``) or carry a
    deprecation note (a warning on each read) are read every time, and a
    read that fails is not kept, so errors are mmengine's own each time.
    """

    def __init__(self):
        self.entries = {}
        self.reading = []  # the dependencies of the files being read

    @staticmethod
    def _content(path):
        try:
            with open(path, 'rb') as file:
                return file.read()
        except OSError:
            return None

    def install(self):
        import copy
        import hashlib

        from mmengine.config import Config
        self.read = read = Config._file2dict

        def file2dict(filename, *args, **kwargs):
            path = os.path.abspath(os.path.expanduser(filename))
            key = (path, args, tuple(sorted(kwargs.items())))
            entry = self.entries.get(key)
            if entry is not None and all(
                    hashlib.sha1(self._content(p) or b'').digest() == digest
                    for p, digest in entry[0]):
                if self.reading:
                    self.reading[-1].update(entry[0])
                return copy.deepcopy(entry[1])
            content = self._content(path)
            deps = set()
            self.reading.append(deps)
            try:
                result = read(filename, *args, **kwargs)
            finally:
                self.reading.pop()
            cacheable = content is not None and b'{{$' not in content \
                and b'_deprecation_' not in content and all(deps)
            deps.add((path, hashlib.sha1(content or b'').digest())
                     if cacheable else None)
            if self.reading:
                self.reading[-1].update(deps)
            if cacheable:
                self.entries[key] = (frozenset(deps), copy.deepcopy(result))
            return result

        Config._file2dict = staticmethod(file2dict)

    def uninstall(self):
        from mmengine.config import Config
        Config._file2dict = staticmethod(self.read)


_config_files = _ReadEachConfigFileOnce()


def pytest_collectstart(collector):
    """Before the first test module is imported: read each config file
    once (test_every_config reads every config at collection), and no
    garbage collection until collection ends (importing torch, mmengine
    and mmpretrain starts full collections of what is being imported;
    :func:`pytest_collection_finish` runs one). Only a process that
    collects (a pytest-xdist worker, not its controller) gets here, so the
    controller does not import mmengine."""
    if not hasattr(_config_files, 'read'):
        _config_files.install()
        gc.disable()


def pytest_unconfigure(config):
    if hasattr(_config_files, 'read'):
        _config_files.uninstall()


def _trained_norms(module):
    """Running statistics and affine parameters of every BatchNorm of
    ``module`` away from their initial values, as after training, so that
    folding them into the convolutions changes those."""
    import torch
    from torch.nn.modules.batchnorm import _BatchNorm
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, _BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.rand(n, generator=g) - 0.5)
    return module


@pytest.fixture(scope='session')
def trained_norms():
    """``trained_norms(module)``: ``module`` with every BatchNorm's
    statistics and affine parameters away from their initial values."""
    return _trained_norms


def _write_image_folder(root, classes=('cat', 'dog'), per_class=2, seed=0):
    """Class folders of small random images under ``root``: colour PNG and
    JPEG, grey, RGBA and 16-bit PNG, of different sizes (what
    mmpretrain's ``CustomDataset`` reads)."""
    import cv2
    import numpy as np
    rng = np.random.RandomState(seed)
    kinds = [((9, 7, 3), np.uint8, 'png'), ((6, 11, 3), np.uint8, 'jpg'),
             ((8, 8), np.uint8, 'png'), ((7, 9, 4), np.uint8, 'png'),
             ((10, 6, 3), np.uint16, 'png')]
    for c, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            shape, dtype, ext = kinds[(c * per_class + i) % len(kinds)]
            img = rng.randint(0, np.iinfo(dtype).max, shape).astype(dtype)
            cv2.imwrite(os.path.join(root, name, f'{i}.{ext}'), img)


@pytest.fixture(scope='session')
def write_image_folder():
    """``write_image_folder(root, classes=('cat', 'dog'), per_class=2)``:
    generated class folders of small images."""
    return _write_image_folder


def _png_bomb_bytes(side=20000):
    """A valid 1-bit grey PNG of ``side`` x ``side`` black pixels: a few
    hundred KB that decode to ``side ** 2`` pixels (gigabytes as BGR)."""
    import struct
    import zlib

    def chunk(kind, data):
        return (struct.pack('>I', len(data)) + kind + data +
                struct.pack('>I', zlib.crc32(kind + data)))

    rows = bytes(1 + (side + 7) // 8) * 1000  # filter byte + packed bits
    deflate = zlib.compressobj(1)
    idat = b''.join([deflate.compress(rows) for _ in range(side // 1000)] +
                    [deflate.flush()])
    return (b'\x89PNG\r\n\x1a\n' +
            chunk(b'IHDR', struct.pack('>IIBBBBB', side, side, 1, 0, 0, 0,
                                       0)) + chunk(b'IDAT', idat) +
            chunk(b'IEND', b''))


@pytest.fixture(scope='session')
def png_bomb():
    """The bytes of a 20000 x 20000 PNG of a few hundred KB (built once:
    about half a second)."""
    return _png_bomb_bytes()


def pytest_collection_finish(session):
    """Move what collection imported out of the garbage collector's reach.

    mmengine's ``BaseDataset`` runs ``gc.collect()`` for every data set it
    serialises; in a pytest worker that has imported the whole suite each
    such call walks millions of objects (a few tenths of a second each, a
    few seconds per run). ``gc.freeze()`` leaves the modules, classes and
    constants collection created to the permanent generation; everything a
    test creates is still collected as usual.
    """
    gc.collect()
    gc.freeze()
    gc.enable()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test, as after collection: collect its garbage and move
    what outlives it (modules imported on first use such as torch._dynamo,
    matplotlib and scipy, caches, session fixtures) to the permanent
    generation. Otherwise those pile up, and every full collection of a
    later test (mmengine's, or Python's own) walks them again: a seventh of
    the suite's time went to such collections. What a test creates is
    collected as usual while it runs, and this collection walks only what
    the test left behind."""
    yield
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items):
    """Tests marked ``heavy`` run first: pytest-xdist hands out tests in
    order, and a multi-second test handed out last keeps one worker busy
    after the others are done."""
    items.sort(key=lambda item: item.get_closest_marker('heavy') is None)


def _largest_tensor_record(path):
    """``(offset, info)`` of the biggest tensor record of a torch.save zip:
    the offset of its first data byte and its ``zipfile.ZipInfo``."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist()
                    if '/data/' in i.filename),
                   key=lambda i: i.file_size)
    with open(path, 'rb') as file:
        file.seek(info.header_offset)
        header = file.read(30)
    name_len, extra_len = struct.unpack('<HH', header[26:30])
    return info.header_offset + 30 + name_len + extra_len, info


@pytest.fixture(scope='session')
def largest_tensor_record():
    """``largest_tensor_record(path)``: where a checkpoint's biggest tensor
    lies in the file, for tests that damage it."""
    return _largest_tensor_record


@pytest.fixture(scope='session')
def train_tool(load_script):
    """``tools/train.py`` as a module (its ``main(argv)``)."""
    return load_script('tools/train.py')


@pytest.fixture(scope='session')
def test_tool(load_script):
    """``tools/test.py`` as a module (its ``main(argv)``)."""
    return load_script('tools/test.py')
