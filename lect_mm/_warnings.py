"""Silence mmcv-lite / mmengine deprecation chatter users cannot act on.

Only messages whose text is known are filtered; anything else still shows.
"""
import logging
import re
import warnings

_QUIET = (
    r'Fail to import ``MultiScaleDeformableAttention``',
    r'.*FileClient.*deprecated',
    r'.*"HardDiskBackend" is the alias of "LocalBackend"',
    r'.*`torch.cuda.amp.autocast\(args...\)` is deprecated',
    r'.*torch.cuda.amp.GradScaler\(args...\)` is deprecated',
)


def silence_known_warnings() -> None:
    for pattern in _QUIET:
        warnings.filterwarnings('ignore', message=pattern)


# mmengine prints these through its logger, not through ``warnings``: its own
# CheckpointHook builds a FileClient for backward compatibility on every run.
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
