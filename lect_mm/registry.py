"""The ``lect_mm`` scope: child registries of mmpretrain's, and the
``lect_mm::`` config prefix.

lect_mm registers its components into mmpretrain's registries, so configs
with ``default_scope = 'mmpretrain'`` (lect_mm's and mmpretrain's own) build
them. A config that inherits a lect_mm config through mmengine's package
prefix, ``_base_ = 'lect_mm::lect/lect_v1_cifar10.py'``, gets
``_scope_='lect_mm'`` on the dicts it inherits (mmengine's rule for external
bases), so mmengine looks for registries of that scope: the registries
below, one child of each of mmpretrain's. They hold nothing themselves; a
lookup falls through to mmpretrain's registry and on to mmengine's, as for
any OpenMMLab scope.

``MODULE2PACKAGE`` is mmengine's table of packages whose configs the
``package::`` prefix may name. Its value is what mmengine resolves to the
package's folder (``get_installed_path``) and looks for ``.mim/configs`` in.
lect_mm's entry names a module inside the package, not the distribution:
mmengine then finds the folder from the imported package (``importlib``)
rather than from pip's metadata, which points into ``site-packages`` even
for an editable install, where the package is not. ``lect_mm/.mim`` is a copy
of the configs in an installed wheel; in a checkout, ``pip install -e .``
makes it, with links to the checkout's ``configs/``, ``tools/`` and
``model-index.yml`` (``python setup.py link_mim`` makes only the links).
"""
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.registry import Registry
from mmpretrain import registry as mmpretrain_registry

SCOPE = 'lect_mm'

#: the module mmengine resolves to the package folder (see above)
MODULE2PACKAGE.setdefault(SCOPE, 'lect_mm.model_index')


def _child(parent: Registry) -> Registry:
    # The parent's locations too: a lookup that falls through to mmpretrain
    # must find what mmpretrain registers on first use.
    return Registry(parent.name, parent=parent, scope=SCOPE,
                    locations=['lect_mm', *parent._locations])


RUNNERS = _child(mmpretrain_registry.RUNNERS)
RUNNER_CONSTRUCTORS = _child(mmpretrain_registry.RUNNER_CONSTRUCTORS)
LOOPS = _child(mmpretrain_registry.LOOPS)
HOOKS = _child(mmpretrain_registry.HOOKS)
LOG_PROCESSORS = _child(mmpretrain_registry.LOG_PROCESSORS)
OPTIMIZERS = _child(mmpretrain_registry.OPTIMIZERS)
OPTIM_WRAPPERS = _child(mmpretrain_registry.OPTIM_WRAPPERS)
OPTIM_WRAPPER_CONSTRUCTORS = _child(
    mmpretrain_registry.OPTIM_WRAPPER_CONSTRUCTORS)
PARAM_SCHEDULERS = _child(mmpretrain_registry.PARAM_SCHEDULERS)
DATASETS = _child(mmpretrain_registry.DATASETS)
DATA_SAMPLERS = _child(mmpretrain_registry.DATA_SAMPLERS)
TRANSFORMS = _child(mmpretrain_registry.TRANSFORMS)
MODELS = _child(mmpretrain_registry.MODELS)
MODEL_WRAPPERS = _child(mmpretrain_registry.MODEL_WRAPPERS)
WEIGHT_INITIALIZERS = _child(mmpretrain_registry.WEIGHT_INITIALIZERS)
BATCH_AUGMENTS = _child(mmpretrain_registry.BATCH_AUGMENTS)
TASK_UTILS = _child(mmpretrain_registry.TASK_UTILS)
TOKENIZER = _child(mmpretrain_registry.TOKENIZER)
METRICS = _child(mmpretrain_registry.METRICS)
EVALUATORS = _child(mmpretrain_registry.EVALUATORS)
VISUALIZERS = _child(mmpretrain_registry.VISUALIZERS)
VISBACKENDS = _child(mmpretrain_registry.VISBACKENDS)
