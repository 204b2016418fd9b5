"""One run per work dir (:class:`WorkDirLock`: an ``fcntl.flock``, dropped by
the OS when the process dies, ``kill -9`` included). Imports nothing heavy:
a bare process can take the lock (tests do).
"""
import os
import os.path as osp
import socket
import sys
import time

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None

LOCK_FILE = '.work_dir.lock'

#: Descriptors of this process's locks: a forked data loader worker inherits
#: them, and would keep a killed run's work dir locked.
_HELD_FDS = set()
_FORK_HOOK = []


def _drop_inherited_locks() -> None:
    """In a forked child, point the inherited lock descriptors at /dev/null:
    the child lets go of its share without unlocking the parent."""
    if _HELD_FDS:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in _HELD_FDS:
            os.dup2(null, fd)
        os.close(null)
        _HELD_FDS.clear()


def fork_hook_registered() -> bool:
    """Whether this process has installed the lock's fork hook."""
    return bool(_FORK_HOOK)


class WorkDirInUseError(RuntimeError):
    """Another live process is running in the same work directory."""


class WorkDirLock:
    """An exclusive, non-blocking lock on a work dir (created if missing);
    its file names the holder for the next comer's error."""

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
        file.truncate(0)
        file.write(f'pid {os.getpid()} on {socket.gethostname()}, started '
                   f'{time.strftime("%Y-%m-%d %H:%M:%S")}: '
                   f'{" ".join(sys.argv)}\n')
        file.flush()
        self._file = file
        if not _FORK_HOOK and hasattr(os, 'register_at_fork'):
            os.register_at_fork(after_in_child=_drop_inherited_locks)
            _FORK_HOOK.append(True)
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
