"""Config mistakes named by their config path, from the registries and the
constructors' signatures (tools layer, docs/architecture.md):
:func:`explain_config_errors` after a failed build (at any depth, block
configs a backbone merges itself included), and the registry lookups that
``lect_mm.cli.check_config`` uses before it."""
import difflib
import inspect
import re
from contextlib import contextmanager
from typing import List, Optional

from mmengine.registry import Registry

from lect_mm.engine.checks import built_loaders, empty_epoch_problem
from lect_mm.engine.config_tree import (ConfigError, ConfigMismatchError,
                                        as_dict, join, walk)
from lect_mm.utils import init_arguments

_UNKNOWN_TYPE = re.compile(
    r"(?P<name>[\w.:]+)'? is not in the (?P<registry>[\w:.]+) registry")
_UNEXPECTED_ARG = re.compile(
    r"(?P<cls>\w+)(?:\.__init__)?\(\) got an unexpected keyword argument "
    r"'(?P<key>\w+)'")


def _registries() -> List[Registry]:
    """mmpretrain's registries, then mmengine's (as ``FUNCTIONS``)."""
    import mmengine.registry
    import mmpretrain.registry
    return [obj for module in (mmpretrain.registry, mmengine.registry)
            for obj in vars(module).values() if isinstance(obj, Registry)]


def find_class(name):
    """The class (or function) registered as ``name`` anywhere, or None."""
    if not isinstance(name, str):
        return name
    for registry in _registries():
        registry.import_from_location()  # what registers on first use
        try:  # with a scope ('mmpretrain.ResNet') or as a module path
            found = registry.get(name) if '.' in name else (
                registry.module_dict.get(name))
        except Exception:  # a malformed name: not registered
            found = None
        if found is not None:
            return found
    return None


def _is_named(obj, cls_name: str) -> bool:
    """Whether ``obj`` is, or inherits from, a class called ``cls_name``."""
    if inspect.isclass(obj):
        return any(c.__name__ == cls_name for c in inspect.getmro(obj))
    return getattr(obj, '__name__', None) == cls_name


def _name(type_) -> str:
    return type_ if isinstance(type_, str) else getattr(
        type_, '__name__', repr(type_))


def suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=3)
    return f' Did you mean {" or ".join(map(repr, close))}?' if close else ''


def _valid_arguments(cls) -> List[str]:
    try:
        if inspect.isclass(cls):
            return init_arguments(cls)  # with the base's, through **kwargs
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def unknown_type(cfg: dict, name: Optional[str] = None,
                 registry_name: Optional[str] = None,
                 misspelt: bool = False) -> Optional[str]:
    """A ``type`` no registry knows (``name``, or the first in the tree;
    with ``misspelt``, the first close to a registered name), named with
    its config paths."""
    wanted = registry_name.split('::')[-1] if registry_name else None
    candidates = {n for registry in _registries()  # and its parent's
                  if wanted in (None, registry.name)
                  for n in registry.module_dict}
    paths = {}
    for path, node in walk(cfg):
        type_ = node.get('type')
        if isinstance(type_, str) and (
                type_ == name if name else find_class(type_) is None and (
                    not misspelt or suggest(type_, candidates))):
            paths.setdefault(type_, []).append(join(path, 'type'))
    if not paths:
        return None
    name, where = next(iter(paths.items()))
    registered = (f'in the {registry_name} registry'
                  if registry_name else 'registered')
    return (f"type='{name}' (at {', '.join(where)}) is not {registered}."
            f'{suggest(name, candidates)} If it is your own class, check '
            'that the module that registers it is imported (config key '
            "'custom_imports').")


# ------------------------------------------------------------ after a build
def _unexpected_argument(cfg: dict, cls_name: str,
                         key: str) -> Optional[str]:
    """``key``, which class ``cls_name`` does not take, named with the config
    paths of the dicts that give it: those whose ``type`` is that class (or
    a subclass) and those without a ``type`` (block configs code merges);
    or, given by none, the code that passes it."""
    nodes = list(walk(cfg))
    typed = {p: find_class(n['type']) for p, n in nodes if 'type' in n}
    where = [p for p, found in typed.items() if _is_named(found, cls_name)]
    given = [p for p, n in nodes
             if key in n and (p not in typed or p in where)]
    cls = next((typed[p] for p in given if p in typed),
               None) or find_class(cls_name)
    # The class the config chose (the message may name the base class
    # that defines __init__, e.g. _BatchNorm for BatchNorm2d).
    shown = cls.__name__ if inspect.isclass(cls) and _is_named(
        cls, cls_name) else cls_name
    params = _valid_arguments(cls) if cls is not None else []
    close = difflib.get_close_matches(key, params, n=1)
    hint = (f' Did you mean {close[0]!r}?' if close else '') + (
        f' Valid arguments of {shown}: {", ".join(params)}.'
        if params else '')
    if given:
        also = ', '.join(join(p, key) for p in given[1:])
        return (f"{join(given[0], key)}: {shown} has no argument '{key}'."
                f'{hint}{f" Also given at {also}." if also else ""}')
    if not where:
        return None
    chain = [_name(n['type']) for p, n in nodes if p in typed and (
        not p or where[0] == p or where[0].startswith((f'{p}.', f'{p}[')))]
    return (f"{shown} has no argument '{key}', which the code that builds "
            f'it passes ({" > ".join(chain)}), not the config. The config '
            f'names {shown} at {", ".join(join(p, "type") for p in where)}; '
            f"choose a type there that takes '{key}'.{hint}")


def _explain(error: Exception, cfg) -> Optional[str]:
    """A build error in terms of ``cfg``, or None."""
    cfg, text = as_dict(cfg), str(error.args[0]) if error.args else ''
    match = _UNEXPECTED_ARG.search(text)
    if isinstance(error, TypeError) and match is not None:
        return _unexpected_argument(cfg, match['cls'], match['key'])
    match = _UNKNOWN_TYPE.search(text)
    if isinstance(error, KeyError) and match is not None:
        return unknown_type(cfg, match['name'], match['registry'])
    # a constructor that looked the type up itself and failed on None
    return unknown_type(cfg) if 'None' in text else None


def explain_empty_epoch(error: AssertionError, runner) -> Optional[str]:
    """mmengine's "`epoch_length` must be a positive integer, but got 0"
    (schedulers converted to iterations, built before any hook runs) in
    terms of the training loader; None for other errors."""
    if '`epoch_length` must be a positive integer' not in str(error):
        return None
    loaders = built_loaders(runner, ('train', ))
    problem = loaders and empty_epoch_problem(*loaders[0])
    return problem and (problem + ' (Found while building the parameter '
                        'schedulers, which convert epochs to iterations.)')


@contextmanager
def explain_config_errors(cfg):
    """Re-raise the misspelt types and unknown arguments of ``cfg`` (Config
    or dict) that the body's build fails on as :class:`ConfigError`."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        explanation = None if isinstance(error, (
            ConfigError, ConfigMismatchError)) else _explain(error, cfg)
        if explanation is None:
            raise
        raise ConfigError(explanation) from error
