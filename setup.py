import os
import os.path as osp
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = osp.dirname(osp.abspath(__file__))
#: Copied into the installed package as ``lect_mm/.mim/``.
MIM_FILES = ('configs', 'tools', 'model-index.yml')


def readme():
    with open('README.md', encoding='utf-8') as f:
        return f.read()


def version():
    scope = {}
    with open('lect_mm/version.py', encoding='utf-8') as f:
        exec(f.read(), scope)
    return scope['__version__']


class BuildPyWithMim(build_py):
    """``build_py`` that also ships the configs, tools and model index.

    They are copied into ``lect_mm/.mim/`` of the build, as mmpretrain's
    ``add_mim_extension`` puts them into ``mmpretrain/.mim/``, so that a
    wheel finds its configs by name (``lect_mm.model_index``) and
    ``mim train lect_mm <config>`` finds both. Here the copy goes to the
    build folder only, never into the source tree, whose ``lect_mm/.mim`` is
    a link to the checkout itself (what an editable install reads, also for
    mmengine's ``lect_mm::`` config prefix).
    """

    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            return
        target = osp.join(self.build_lib, 'lect_mm', '.mim')
        if osp.exists(target):
            shutil.rmtree(target)
        os.makedirs(target)
        for name in MIM_FILES:
            src = osp.join(HERE, name)
            if osp.isdir(src):
                shutil.copytree(
                    src,
                    osp.join(target, name),
                    ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
            else:
                shutil.copyfile(src, osp.join(target, name))


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
    # runtime.txt pins the tested set.
    install_requires=[
        'torch>=2.0',
        'torchvision>=0.15',
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
    cmdclass={'build_py': BuildPyWithMim},
    license='Apache License 2.0',
    zip_safe=False,
)
