"""Config mistakes explained in terms of the config the user wrote.

When a registry build fails because of a misspelt ``type`` or an argument the
class does not take, mmengine raises a ``KeyError`` / ``TypeError`` from deep
inside the nested builds, without saying where in the config the culprit
is. :func:`explain_config_errors` re-raises such an error as a
:class:`ConfigError` whose message names the config path, the bad type or
argument, close registered names and the class's valid arguments. Errors it
cannot trace back to the config pass through unchanged.
"""
import difflib
import inspect
import re
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple

from mmengine.registry import Registry

_UNKNOWN_TYPE = re.compile(
    r'^(?P<name>[\w.:]+) is not in the (?P<registry>[\w:.]+) registry')
_UNEXPECTED_ARG = re.compile(
    r"^(?P<cls>\w+)\.__init__\(\) got an unexpected keyword argument "
    r"'(?P<key>\w+)'")


class ConfigError(KeyError, TypeError):
    """A config names a type or an argument that does not exist.

    Subclasses both ``KeyError`` and ``TypeError`` (the errors mmengine
    raises for the same mistakes), so existing handlers still catch it.
    """

    def __str__(self) -> str:
        return str(self.args[0])


def _walk(node, path: str = '') -> Iterator[Tuple[str, dict]]:
    """Yield ``(dotted path, dict)`` for every dict in a nested config."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f'{path}.{key}' if path else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _walk(value, f'{path}[{i}]')


def _type_name(type_) -> str:
    return type_ if isinstance(type_, str) else getattr(
        type_, '__name__', repr(type_))


def _registries() -> List[Registry]:
    import mmpretrain.registry as registry_module
    return [
        obj for obj in vars(registry_module).values()
        if isinstance(obj, Registry)
    ]


def _names_in(registry: Registry) -> set:
    names = set()
    while registry is not None:
        names |= set(registry.module_dict)
        registry = registry.parent
    return names


def _find_class(name: str):
    for registry in _registries():
        while registry is not None:
            if name in registry.module_dict:
                return registry.module_dict[name]
            registry = registry.parent
    return None


def _explain_unknown_type(message: str, cfg: dict) -> Optional[str]:
    match = _UNKNOWN_TYPE.match(message)
    if match is None:
        return None
    name, registry_name = match['name'], match['registry']
    paths = [
        f'{path}.type' if path else 'type' for path, node in _walk(cfg)
        if _type_name(node.get('type')) == name
    ]
    if not paths:
        return None
    text = (f"type='{name}' (at {', '.join(paths)}) is not in the "
            f'{registry_name} registry.')
    candidates = set()
    for registry in _registries():
        if f'{registry.scope}::{registry.name}' == registry_name:
            candidates |= _names_in(registry)
    close = difflib.get_close_matches(name, sorted(candidates), n=3)
    if close:
        text += f' Did you mean {" or ".join(map(repr, close))}?'
    return text + (" If it is your own class, check that the module that "
                   "registers it is imported (config key 'custom_imports').")


def _explain_unexpected_argument(message: str, cfg: dict) -> Optional[str]:
    match = _UNEXPECTED_ARG.search(message)
    if match is None:
        return None
    cls_name, key = match['cls'], match['key']
    paths = [
        f'{path}.{key}' if path else key for path, node in _walk(cfg)
        if _type_name(node.get('type')) == cls_name and key in node
    ]
    if not paths:
        return None
    text = (f"{', '.join(paths)}: {cls_name} has no argument '{key}'.")
    cls = _find_class(cls_name)
    if cls is not None:
        params = [
            p.name for p in inspect.signature(cls).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        close = difflib.get_close_matches(key, params, n=1)
        if close:
            text += f' Did you mean {close[0]!r}?'
        text += f' Valid arguments of {cls_name}: {", ".join(params)}.'
    return text


def explain_config_error(error: Exception, cfg) -> Optional[str]:
    """Explain a build error in terms of ``cfg``, or return None.

    Args:
        error (Exception): The error raised while building from ``cfg``.
        cfg (Config | dict): The config that was being built.

    Returns:
        str | None: The explanation, or None when the error is not a
        misspelt type / unknown argument found in ``cfg``.
    """
    if not isinstance(error, (KeyError, TypeError)) or not error.args:
        return None
    message = str(error.args[0])
    cfg = cfg.to_dict() if hasattr(cfg, 'to_dict') else cfg
    if isinstance(error, KeyError):
        return _explain_unknown_type(message, cfg)
    return _explain_unexpected_argument(message, cfg)


@contextmanager
def explain_config_errors(cfg):
    """Re-raise config mistakes from the body as :class:`ConfigError`.

    Example:
        >>> with explain_config_errors(cfg):
        ...     runner = Runner.from_cfg(cfg)
        ...     runner.train()

    Args:
        cfg (Config | dict): The config the body builds from.
    """
    try:
        yield
    except (KeyError, TypeError) as error:
        if isinstance(error, ConfigError):
            raise
        explanation = explain_config_error(error, cfg)
        if explanation is None:
            raise
        raise ConfigError(explanation) from error
