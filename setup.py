import os
import os.path as osp
import shutil
import warnings

from setuptools import Command, find_packages, setup
from setuptools.command.build_py import build_py

HERE = osp.dirname(osp.abspath(__file__))
#: Copied into a wheel's ``lect_mm/.mim/``, linked there by ``pip install -e``.
MIM_FILES = ('configs', 'tools', 'model-index.yml')


def readme():
    with open('README.md', encoding='utf-8') as f:
        return f.read()


def version():
    scope = {}
    with open('lect_mm/version.py', encoding='utf-8') as f:
        exec(f.read(), scope)
    return scope['__version__']


def _remove(path):
    if osp.islink(path) or osp.isfile(path):
        os.remove(path)
    elif osp.isdir(path):
        shutil.rmtree(path)  # removes links inside, never follows them


def _copy(src, dst):
    if osp.isdir(src):
        shutil.copytree(
            src, dst, ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
    else:
        shutil.copyfile(src, dst)


def copy_mim(target):
    """Copy the configs, tools and model index into ``target``."""
    _remove(target)
    os.makedirs(target)
    for name in MIM_FILES:
        _copy(osp.join(HERE, name), osp.join(target, name))


def link_mim(target=osp.join(HERE, 'lect_mm', '.mim')):
    """Link ``target`` (the checkout's ``lect_mm/.mim``) to the configs.

    ``lect_mm/.mim/configs``, ``tools`` and ``model-index.yml`` become
    relative links to the checkout's own, as mmpretrain's
    ``add_mim_extension`` does for ``pip install -e .``: mmengine's
    ``lect_mm::`` prefix reads ``<package>/.mim/configs``. The folder is
    git-ignored and holds no link to an ancestor, so copying or walking the
    checkout terminates. Where links cannot be made (Windows without the
    privilege), the files are copied instead, with a warning: an edited
    config then needs the command again.
    """
    _remove(target)  # also a link or text file left by an older checkout
    os.makedirs(target)
    for name in MIM_FILES:
        src = osp.join(HERE, name)
        dst = osp.join(target, name)
        try:
            os.symlink(
                osp.relpath(src, target), dst,
                target_is_directory=osp.isdir(src))
        except OSError as e:
            warnings.warn(f'cannot link {dst} to {src} ({e}); copying it: '
                          'run `pip install -e .` again after editing it')
            _copy(src, dst)


class BuildPyWithMim(build_py):
    """``build_py`` that also provides ``lect_mm/.mim``.

    A wheel (``pip install .``) gets a copy of the configs, tools and model
    index in ``lect_mm/.mim/`` of the build folder, as mmpretrain ships
    ``mmpretrain/.mim/``, so that it finds its configs by name
    (``lect_mm.model_index``), through the ``lect_mm::`` prefix and through
    ``mim train lect_mm <config>``. An editable install (``pip install -e
    .``) reads the checkout in place: ``lect_mm/.mim`` of the checkout gets
    links to its files (:func:`link_mim`).
    """

    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            link_mim()
        else:
            copy_mim(osp.join(self.build_lib, 'lect_mm', '.mim'))


class LinkMim(Command):
    """``python setup.py link_mim``: what ``pip install -e .`` does to the
    checkout, for a checkout used through ``PYTHONPATH`` only."""

    description = 'link the configs, tools and model index into lect_mm/.mim'
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        link_mim()


setup(
    name='lect_mm',
    version=version(),
    description='LeCT and hybrid CNN/Transformer blocks (CeiT, ViTAE, CCT, '
    'LeViT) for OpenMMLab / mmpretrain',
    long_description=readme(),
    long_description_content_type='text/markdown',
    packages=find_packages(
        exclude=('configs', 'tools', 'tests', 'benchmarks')),
    python_requires='>=3.8',
    # Ranges, not pins: a user with their own torch or the full ``mmcv``
    # keeps it. ``mmcv`` itself is not listed because either ``mmcv-lite``
    # or ``mmcv`` (2.x < 2.4) provides the ``mmcv`` module; requirements/
    # runtime.txt pins the tested set. torch 2.6 is the first whose
    # ``torch.load`` defaults to ``weights_only=True``, which checkpoint
    # loading relies on (lect_mm.engine.checkpoint_io).
    install_requires=[
        'torch>=2.6',
        'torchvision>=0.21',
        'mmengine>=0.10,<1.0',
        'mmpretrain>=1.1,<1.3',
        'einops>=0.6',
        'setuptools<81',
        'scikit-learn>=1.0',
        'matplotlib>=3.5',
    ],
    extras_require={
        # onnx, onnxruntime and onnxscript: the export round trips.
        'tests': [
            'pytest>=7', 'pytest-xdist>=3', 'onnx>=1.23', 'onnxruntime>=1.32',
            'onnxscript>=0.7', 'timm>=1.0.31', 'safetensors>=0.4',
            'segmentation-models-pytorch>=0.6'
        ],
        # `import lect_mm.timm`: the zoo as timm models (docs/timm.md);
        # safetensors for the Hugging Face layout, segmentation-models-
        # pytorch for its timm encoders. timm 1.0.31 is the oldest tested:
        # the models take its device/dtype arguments and traits.
        'timm': [
            'timm>=1.0.31', 'safetensors>=0.4',
            'segmentation-models-pytorch>=0.6'
        ],
        'mmcv-lite': ['mmcv-lite>=2.0,<2.4'],
    },
    cmdclass={'build_py': BuildPyWithMim, 'link_mim': LinkMim},
    license='Apache License 2.0',
    zip_safe=False,
)
