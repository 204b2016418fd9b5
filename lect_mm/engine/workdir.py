"""One run per work directory: an OS file lock held while a run uses it;
which recorded paths lie in a run's own folders.

:class:`WorkDirLock` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on
``WORK_DIR/.work_dir.lock`` and writes its holder (pid, host, start time,
command) into the file for the error message of the next comer. The OS
drops the lock when the process ends, ``kill -9`` included, so it is never
left stale (a forked data-loader worker holds it until it exits too).
Without ``fcntl`` (Windows) the lock is a no-op. This module imports
nothing heavy, so that a bare process can take the lock (tests do).

A run writes, renames and deletes files in its own work dir (and its
checkpoint hook's ``out_dir``) only. A work dir records absolute paths
(``last_checkpoint``; a checkpoint's message hub: the best, last and stop
checkpoints), which name another directory once the work dir is copied or
moved, or when a run resumes from another work dir's checkpoint:
:func:`is_inside` and :func:`own_file` tell such paths apart.
"""
import os
import os.path as osp
import socket
import sys
import time
from typing import Optional

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None

LOCK_FILE = '.work_dir.lock'


#: Descriptors of the locks this process holds. A forked child (a data
#: loader worker) inherits them, and a flock lives until every descriptor of
#: it is closed: without this, workers outliving a killed run would keep its
#: work dir locked.
_HELD_FDS = set()
_FORK_HOOK = []


def _drop_inherited_locks() -> None:
    """In a forked child, point the inherited lock descriptors at /dev/null
    (closing the child's share of the lock without unlocking the parent)."""
    if not _HELD_FDS:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in _HELD_FDS:
        os.dup2(null, fd)
    os.close(null)
    _HELD_FDS.clear()


def _register_fork_hook() -> None:
    """Install :func:`_drop_inherited_locks` for forked children, once, when
    this process first takes a lock (a process that never locks a work dir
    gets no fork hook)."""
    if not _FORK_HOOK and hasattr(os, 'register_at_fork'):
        os.register_at_fork(after_in_child=_drop_inherited_locks)
        _FORK_HOOK.append(True)


def fork_hook_registered() -> bool:
    """Whether this process has installed the lock's fork hook."""
    return bool(_FORK_HOOK)


def is_inside(path: str, directory: str) -> bool:
    """Whether ``path`` lies in ``directory`` (or below it).

    Local paths are compared with symbolic links resolved; URLs (``s3://``)
    as text.
    """
    path, directory = os.fspath(path), os.fspath(directory)
    if '://' in path or '://' in directory:
        return path.startswith(directory.rstrip('/') + '/')
    directory = osp.realpath(directory)
    return osp.commonpath([osp.realpath(path), directory]) == directory


def own_file(path: str, directory: str) -> Optional[str]:
    """``path`` as a file of ``directory``: ``path`` itself if it lies in
    ``directory``; else the file of the same name in ``directory`` if there
    is one (the work dir was copied or moved); else None."""
    if is_inside(path, directory):
        return path
    if '://' in os.fspath(directory):
        return None
    same_name = osp.join(directory, osp.basename(os.fspath(path)))
    return same_name if osp.isfile(same_name) else None


class WorkDirInUseError(RuntimeError):
    """Another live process is running in the same work directory."""


class WorkDirLock:
    """An exclusive, non-blocking lock on a work directory.

    Args:
        work_dir (str): The directory; created if missing.
    """

    def __init__(self, work_dir: str):
        self.work_dir = osp.abspath(work_dir)
        self.path = osp.join(self.work_dir, LOCK_FILE)
        self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> 'WorkDirLock':
        """Take the lock, or raise :class:`WorkDirInUseError` at once."""
        if self._file is not None or fcntl is None:
            return self
        os.makedirs(self.work_dir, exist_ok=True)
        file = open(self.path, 'a+')
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            file.seek(0)
            holder = file.read().strip() or 'a process that wrote no details'
            file.close()
            raise WorkDirInUseError(
                f'Work dir {self.work_dir} is in use by another run '
                f'({holder}). Two runs in one work dir overwrite each '
                "other's checkpoints and logs: wait for it to end, stop it, "
                'or pass another --work-dir.') from None
        file.seek(0)
        file.truncate()
        file.write(f'pid {os.getpid()} on {socket.gethostname()}, started '
                   f'{time.strftime("%Y-%m-%d %H:%M:%S")}: '
                   f'{" ".join(sys.argv)}\n')
        file.flush()
        self._file = file
        _register_fork_hook()
        _HELD_FDS.add(file.fileno())
        return self

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would race)."""
        if self._file is None:
            return
        _HELD_FDS.discard(self._file.fileno())
        try:
            self._file.truncate(0)
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
        finally:
            self._file.close()
            self._file = None

    def __enter__(self) -> 'WorkDirLock':
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()
