"""Drop mmengine's deprecation chatter from a run's log.

mmengine's own ``CheckpointHook`` builds a ``FileClient`` for backward
compatibility on every run, which logs two deprecation lines a user cannot
act on. :class:`~lect_mm.engine.LectRunner` adds this filter to the logger of
its own run; nothing else is filtered, and nothing process-wide.
"""
import logging
import re

_QUIET_LOG = re.compile(
    r'^"FileClient" will be deprecated'
    r'|^"HardDiskBackend" is the alias of "LocalBackend"')


class _KnownDeprecationFilter(logging.Filter):

    def filter(self, record: logging.LogRecord) -> bool:
        return not _QUIET_LOG.search(record.getMessage())


def silence_known_log_messages(logger: logging.Logger) -> None:
    """Drop mmengine's FileClient deprecation lines from ``logger``."""
    if not any(isinstance(f, _KnownDeprecationFilter) for f in logger.filters):
        logger.addFilter(_KnownDeprecationFilter())
