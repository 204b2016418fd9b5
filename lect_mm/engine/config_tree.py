"""What a run raises for a config's mistakes (:class:`ConfigError`,
:class:`ConfigMismatchError`) and the config tree's helpers (dotted paths,
lookups). Naming a mistake by its config path, from the registries and the
constructors' signatures, is the tools' (``lect_mm.config_errors``)."""
from typing import Iterator, Tuple

MISSING = object()


class ConfigError(KeyError, TypeError, ValueError):
    """A config names a type or argument that does not exist, or gives an
    argument a value it cannot take; subclasses the errors mmengine and the
    constructors raise for these, so existing handlers still catch it."""

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigMismatchError(ValueError):
    """Config values that do not fit the data, the checkpoint or each other
    (a ``ValueError``: mmengine re-wraps a ``TypeError`` raised in a hook)."""


def walk(node, path: str = '') -> Iterator[Tuple[str, dict]]:
    """Yield ``(dotted path, dict)`` for every dict in a nested config."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, join(path, str(key)))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from walk(value, f'{path}[{i}]')


def join(path: str, key: str) -> str:
    return f'{path}.{key}' if path else key


def as_dict(cfg):
    return cfg.to_dict() if hasattr(cfg, 'to_dict') else cfg


def lookup(cfg, dotted: str):
    """The value at ``a.b.c`` in ``cfg``, or ``MISSING``."""
    for key in dotted.split('.'):
        if not isinstance(cfg, dict) or key not in cfg:
            return MISSING
        cfg = cfg[key]
    return cfg


def names(items, limit: int = 8, fmt=repr) -> str:
    """``'a', 'b', ... (N in all)``: at most ``limit`` items shown."""
    shown = ', '.join(map(fmt, items[:limit]))
    return shown + (f', ... ({len(items)} in all)'
                    if len(items) > limit else '')
