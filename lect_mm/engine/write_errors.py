"""A full disk stops a run at its first failed write, with one error that
names the file.

Python's logging reports a failed write of a log file on stderr
("--- Logging error ---" and a traceback) and goes on, for every later line
too; mmengine's ``FileHandler`` is such a handler, so a run on a full disk
floods its output and trains until a checkpoint write fails. A
:class:`~lect_mm.engine.LectRunner` logs to its file through
:class:`GuardedFileHandler` instead, and checkpoints are written by
:func:`~lect_mm.engine.checkpoint_io.atomic_write`; both raise
:class:`DiskFullError`.
"""
import errno
import logging
import os
import sys
from typing import Optional

DISK_FULL_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, 'EDQUOT', None))
    if code is not None)
"""``ENOSPC`` (no space left on device) and ``EDQUOT`` (quota exceeded)."""


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says that the disk (or the user's quota) is full."""
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


class DiskFullError(OSError):
    """A write failed because the disk (or the quota) is full.

    An ``OSError`` with the ``errno`` of the failed write and the path as
    ``filename``.
    """

    def __init__(self, path: Optional[str], cause: Optional[OSError] = None,
                 what: str = '') -> None:
        code = cause.errno if isinstance(cause, OSError) and \
            cause.errno in DISK_FULL_ERRNOS else errno.ENOSPC
        super().__init__(code, os.strerror(code), path)
        self.what = what

    def __str__(self) -> str:
        what = f'{self.what} ' if self.what else ''
        return (f'{self.strerror} (errno {self.errno}): could not write '
                f'{what}{self.filename}.')


class GuardedFileHandler(logging.FileHandler):
    """``logging.FileHandler`` whose first failed write raises, once.

    A failed write (any ``OSError``: :class:`DiskFullError` for a full
    disk) is raised to the code that logged; the handler then writes no
    more and drops its records quietly (the console still shows them), so
    the failure is reported once. The error stays in :attr:`error`.
    """

    def __init__(self, *args, **kwargs) -> None:
        self.error: Optional[OSError] = None
        super().__init__(*args, **kwargs)

    @classmethod
    def replacing(cls, handler: logging.FileHandler) -> 'GuardedFileHandler':
        """A handler appending to ``handler``'s file, with its level,
        formatter and filters (``handler`` is closed)."""
        guarded = cls(handler.baseFilename, mode='a',
                      encoding=handler.encoding, errors=handler.errors)
        guarded.setLevel(handler.level)
        guarded.setFormatter(handler.formatter)
        for log_filter in handler.filters:
            guarded.addFilter(log_filter)
        handler.close()
        return guarded

    def emit(self, record: logging.LogRecord) -> None:
        if self.error is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError) or self.error is not None:
            super().handleError(record)
            return
        if is_disk_full(error):
            self.error = DiskFullError(self.baseFilename, error, 'the log')
        else:
            self.error = OSError(
                error.errno, f'{error.strerror}: could not write the log',
                self.baseFilename)
        stream, self.stream = self.stream, None
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass  # its buffer cannot be written either
        raise self.error from error
