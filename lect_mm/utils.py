"""Helpers shared by the blocks, the models and the engine, which import
nothing of each other's through it."""
import inspect
from typing import List

import torch.nn as nn


def init_arguments(cls: type) -> List[str]:
    """The keyword arguments a class's ``__init__`` accepts, in order.

    An ``__init__`` that takes ``**kwargs`` is taken to pass them to its
    base class (as CeiTLeFF to LeFFN, a backbone to ZooBackbone), whose
    named arguments then follow; ``nn.Module``'s accepts none.
    """
    names = []
    for klass in cls.__mro__:
        if klass in (nn.Module, object) or '__init__' not in vars(klass):
            continue
        params = inspect.signature(vars(klass)['__init__']).parameters
        names += [
            name for name, p in params.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and name != 'self' and name not in names
        ]
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return names
