from setuptools import find_packages, setup


def readme():
    with open('README.md', encoding='utf-8') as f:
        return f.read()


def version():
    scope = {}
    with open('lect_mm/version.py', encoding='utf-8') as f:
        exec(f.read(), scope)
    return scope['__version__']


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
        'tests': ['pytest>=7'],
        'mmcv-lite': ['mmcv-lite>=2.0,<2.4'],
    },
    license='Apache License 2.0',
    zip_safe=False,
)
