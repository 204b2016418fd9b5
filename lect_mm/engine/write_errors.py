"""A full disk stops a run at its first failed write with one error naming
the file (logging would print an error for every line and go on): the log
through :class:`GuardedFileHandler`, checkpoints through
``checkpoint_io.atomic_write``; both raise :class:`DiskFullError`."""
import errno
import logging
import os
import sys
from contextlib import suppress
from typing import Optional

#: No space left on device, quota exceeded (where the OS has EDQUOT).
DISK_FULL_ERRNOS = frozenset(
    (errno.ENOSPC, getattr(errno, 'EDQUOT', errno.ENOSPC)))


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says that the disk (or the user's quota) is full."""
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


class DiskFullError(OSError):
    """A write failed on a full disk (or quota): an ``OSError`` with the
    failed write's ``errno`` and the path as ``filename``."""

    def __init__(self, path: Optional[str], cause: OSError,
                 what: str = '') -> None:
        super().__init__(cause.errno, os.strerror(cause.errno), path)
        self.what = what

    def __str__(self) -> str:
        what = f'{self.what} ' if self.what else ''
        return (f'{self.strerror} (errno {self.errno}): could not write '
                f'{what}{self.filename}.')


class GuardedFileHandler(logging.FileHandler):
    """``logging.FileHandler`` whose first failed write raises (a full disk:
    :class:`DiskFullError`) to the code that logged, once, and is kept in
    ``error``; later records are dropped (the console still shows them)."""

    error: Optional[OSError] = None

    @classmethod
    def replacing(cls, handler: logging.FileHandler) -> 'GuardedFileHandler':
        """A handler appending to ``handler``'s file, with its level,
        formatter and filters (``handler`` is closed)."""
        guarded = cls(handler.baseFilename, encoding=handler.encoding,
                      errors=handler.errors)
        guarded.setLevel(handler.level)
        guarded.setFormatter(handler.formatter)
        guarded.filters = list(handler.filters)
        handler.close()
        return guarded

    def emit(self, record: logging.LogRecord) -> None:
        if self.error is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            return super().handleError(record)
        if is_disk_full(error):
            self.error = DiskFullError(self.baseFilename, error, 'the log')
        else:
            self.error = OSError(
                error.errno, f'{error.strerror}: could not write the log',
                self.baseFilename)
        stream, self.stream = self.stream, None
        with suppress(OSError):  # its buffer cannot be written either
            if stream is not None:
                stream.close()
        raise self.error from error
