"""Checkpoint files written atomically with a digest, and verified on load.

Writing (:class:`AtomicLocalBackend`, mmengine file backend
``'lect_atomic_local'``, used by ``SafeCheckpointHook``): the bytes go to a
temporary file in the same directory (``.NAME.PID.tmp``), are flushed and
``fsync``-ed, then ``os.replace``-d onto the final name and the directory is
``fsync``-ed. A crash or ``kill -9`` at any moment leaves under the final
name either the previous file or the complete new one, never part of one; a
full disk raises :class:`~lect_mm.engine.write_errors.DiskFullError` naming
the file, the previous one left as it was.

The digest: before writing, a PyTorch checkpoint (a zip archive) gets one
more record, ``<archive>/lect_mm_sha256``, holding the SHA-256 of the name,
size and bytes of every other record (the pickled structure and every
tensor's storage). ``torch.load`` reads only the records the pickle refers
to, so the file still loads with plain ``torch.load(path,
weights_only=True)``, with or without lect_mm.

Reading (:func:`load_checkpoint_file`; :func:`load_checkpoint_verified`
for any path, the loader of :class:`~lect_mm.engine.LectRunner`'s
``--resume``, ``load_from`` and ``tools/test.py`` and of
``init_cfg=dict(type='StrictPretrained')``) stops with a
:class:`CheckpointError` naming the file and what is wrong when it is
missing, empty, truncated (no zip central directory), has a record whose
bytes fail the zip CRC-32 check, or does not match its digest. Files without
a digest (converted or third-party weights, or written by another tool)
still load, with their zip CRCs checked and an info line. The load itself is
``torch.load(..., weights_only=True)``, unless torch's own opt-out for
trusted files, ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, is set. mmengine's
loaders are left as they are: these functions are used where lect_mm's
runtime config selects them.

The latest checkpoint of a work dir (:func:`latest_checkpoint`: what
``--resume`` takes, what a failed run names) is the one answer to that
question in lect_mm; :func:`read_last_checkpoint` is the one reader of the
``last_checkpoint`` file, and follows no path outside the work dir (a copied
work dir's file names the original's checkpoint). "Newest" is newest in
training progress, the ``meta`` of the checkpoints themselves
(:func:`checkpoint_progress`), never a number from a file name.
"""
import hashlib
import io
import json
import logging
import os
import os.path as osp
import pickle
import re
import zipfile
from typing import List, Optional

import torch
from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import print_log
from mmengine.runner.checkpoint import _load_checkpoint

from .plain_state import from_plain
from .workdir import is_inside, own_file
from .write_errors import DiskFullError, is_disk_full

ATOMIC_BACKEND = 'lect_atomic_local'
"""Name of :class:`AtomicLocalBackend` in mmengine's file backends."""

DIGEST_RECORD = 'lect_mm_sha256'
"""The zip record (under the archive's folder) that holds the digest."""

_TMP_NAME = re.compile(r'^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$')
_CHUNK = 1 << 20


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, damaged or does not fit the model."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint file does not exist."""


# ----------------------------------------------------------------- writing
def temporary_path(path: str) -> str:
    """The temporary name :func:`atomic_write` writes ``path`` under."""
    directory, name = osp.split(osp.abspath(path))
    return osp.join(directory, f'.{name}.{os.getpid()}.tmp')


def _write_synced(file, data: bytes) -> None:
    """Write, flush and fsync (a separate function: tests kill in it)."""
    file.write(data)
    file.flush()
    os.fsync(file.fileno())


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (where the OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that the name never holds part of it.

    Args:
        path (str): The final file name; its directory is created.
        data (bytes): The whole content.

    Raises:
        DiskFullError: The disk (or quota) is full; ``path`` is left as it
            was and the temporary file is removed.
    """
    path = os.fspath(path)
    directory = osp.dirname(osp.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = temporary_path(path)
    try:
        with open(tmp, 'wb') as file:
            _write_synced(file, data)
        os.replace(tmp, path)
    except BaseException as error:
        try:
            os.remove(tmp)
        except OSError:
            pass
        if is_disk_full(error):
            raise DiskFullError(path, error) from error
        raise
    _fsync_dir(directory)


def remove_stale_temporaries(directory: str) -> List[str]:
    """Remove the temporary files that killed writers left in ``directory``.

    Only files named like :func:`temporary_path`'s whose process is gone.

    Returns:
        list[str]: The removed paths.
    """
    removed = []
    if not osp.isdir(directory):
        return removed
    for name in sorted(os.listdir(directory)):
        match = _TMP_NAME.match(name)
        if match is None or _process_alive(int(match['pid'])):
            continue
        path = osp.join(directory, name)
        try:
            os.remove(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------ digest
def _digest_record_name(archive: zipfile.ZipFile) -> Optional[str]:
    """``<archive>/lect_mm_sha256``, or None if it is no torch archive."""
    names = archive.namelist()
    if not names:
        return None
    folder = names[0].split('/', 1)[0]
    if f'{folder}/data.pkl' not in names:
        return None
    return f'{folder}/{DIGEST_RECORD}'


def _records_digest(archive: zipfile.ZipFile, skip: str) -> str:
    """SHA-256 over the name, size and bytes of every record but ``skip``.

    Reading a record also checks its CRC-32 (``zipfile.BadZipFile``).
    """
    sha = hashlib.sha256()
    for info in archive.infolist():
        if info.filename == skip:
            continue
        sha.update(f'{info.filename}\0{info.file_size}\0'.encode())
        with archive.open(info) as record:
            for chunk in iter(lambda: record.read(_CHUNK), b''):
                sha.update(chunk)
    return sha.hexdigest()


def add_digest(data: bytes) -> bytes:
    """``data`` (a ``torch.save`` output) with its digest record added.

    Bytes that are not a torch zip archive, or already carry a digest, are
    returned unchanged.
    """
    buffer = io.BytesIO(data)
    if not zipfile.is_zipfile(buffer):
        return data
    with zipfile.ZipFile(buffer, 'a') as archive:
        record = _digest_record_name(archive)
        if record is None or record in archive.namelist():
            return data
        digest = _records_digest(archive, skip=record)
        info = zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0))
        archive.writestr(
            info, json.dumps(dict(algorithm='sha256', digest=digest)))
    return buffer.getvalue()


@register_backend(ATOMIC_BACKEND)
class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend, but every ``put`` is atomic and a torch
    checkpoint gets its digest (see the module's documentation)."""

    def put(self, obj: bytes, filepath) -> None:
        atomic_write(filepath, add_digest(obj))

    def put_text(self, obj: str, filepath, encoding: str = 'utf-8') -> None:
        atomic_write(filepath, obj.encode(encoding))


# ----------------------------------------------------------------- reading
def verify_checkpoint_file(path: str) -> Optional[str]:
    """Check that ``path`` is a complete, unaltered checkpoint file.

    Args:
        path (str): A local file.

    Returns:
        str | None: The verified SHA-256, or None when the file carries no
        digest (then only its zip CRCs, if it is a zip, were checked).

    Raises:
        CheckpointNotFoundError: The file does not exist.
        CheckpointError: It is empty, truncated, fails a CRC or its digest.
    """
    path = os.fspath(path)
    if not osp.exists(path):
        raise CheckpointNotFoundError(f'Checkpoint {path} does not exist.')
    if osp.isdir(path):
        raise CheckpointError(f'Checkpoint {path} is a directory, not a '
                              'checkpoint file.')
    size = osp.getsize(path)
    if size == 0:
        raise CheckpointError(
            f'Checkpoint {path} is empty (0 bytes): its writing was '
            'interrupted or the file was truncated.')
    if not zipfile.is_zipfile(path):
        with open(path, 'rb') as file:
            head = file.read(4)
        if head == b'PK\x03\x04':
            raise CheckpointError(
                f'Checkpoint {path} is truncated or damaged ({size} bytes): '
                "it begins as a zip archive (PyTorch's format) but its end, "
                'the zip central directory, is missing or unreadable.')
        return None  # PyTorch's legacy format or not a checkpoint: torch says
    try:
        with zipfile.ZipFile(path) as archive:
            record = _digest_record_name(archive)
            expected = None
            if record is not None and record in archive.namelist():
                expected = json.loads(archive.read(record))['digest']
            digest = _records_digest(archive, skip=record)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError,
            KeyError) as error:
        raise CheckpointError(
            f'Checkpoint {path} is damaged ({size} bytes): '
            f'{type(error).__name__}: {error}.') from error
    if expected is None:
        return None
    if digest != expected:
        raise CheckpointError(
            f'Checkpoint {path} is damaged or was altered: the SHA-256 of its '
            f'contents is {digest[:16]}..., but it was written as '
            f'{str(expected)[:16]}...')
    return digest


def _weights_only() -> bool:
    """``weights_only`` for :func:`load_checkpoint_file`: True, unless torch's
    own opt-out for trusted files is set (as ``torch.load`` reads it)."""
    flag = os.getenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '')
    return flag.lower() not in ('1', 'y', 'yes', 'true')


_MMENGINE_PICKLED = (
    ' A checkpoint written by mmengine\'s own CheckpointHook pickles '
    'mmengine and numpy objects (its message hub), which torch >= 2.6 '
    'refuses to unpickle by default; lect_mm\'s runtime config writes '
    'plain-data checkpoints instead (SafeCheckpointHook). To load such a '
    'file that you trust, set TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1.')


def load_checkpoint_file(filename: str, map_location=None,
                         verified: Optional[dict] = None):
    """:func:`verify_checkpoint_file`, then ``torch.load(weights_only=True)``.

    Encoded runtime state (:mod:`lect_mm.engine.plain_state`) is decoded.

    Args:
        filename (str): A local file (``~`` is expanded).
        map_location: As for ``torch.load``.
        verified (dict, optional): ``{path: (file_identity, digest)}`` of
            files verified a moment ago (:func:`latest_checkpoint`): such a
            file, unchanged since, is not read twice to verify it again.

    Returns:
        The loaded object (a dict for checkpoints).
    """
    filename = osp.expanduser(os.fspath(filename))
    known = (verified or {}).get(filename)
    if known is not None and osp.isfile(filename) and \
            file_identity(filename) == known[0]:
        digest = known[1]
    else:
        digest = verify_checkpoint_file(filename)
    try:
        checkpoint = torch.load(
            filename, map_location=map_location, weights_only=_weights_only())
    except pickle.UnpicklingError as error:
        # weights_only refused a class (or a damaged pickle): keep the type.
        hint = _MMENGINE_PICKLED if 'mmengine' in str(error) else ''
        raise pickle.UnpicklingError(
            f'Checkpoint {filename}: {error}{hint}') from error
    except Exception as error:
        raise CheckpointError(
            f'Checkpoint {filename} could not be loaded: '
            f'{type(error).__name__}: {error}') from error
    if digest is None:
        print_log(
            f'Checkpoint {filename} carries no lect_mm digest (converted or '
            'third-party weights, or written by another tool); its content '
            'is loaded unverified.',
            logger='current',
            level=logging.INFO)
    return from_plain(checkpoint)


def load_checkpoint_verified(filename: str, map_location=None,
                             verified: Optional[dict] = None):
    """Load a checkpoint from any path: a local file with
    :func:`load_checkpoint_file`; an ``http(s)://`` URL downloaded into
    torch's hub cache and loaded with ``weights_only=True`` as well
    (mmengine's HTTP loader unpickles anything); other prefixes
    (``s3://``, ``open-mmlab://``...) with mmengine's loader for them.
    ``verified``: as for :func:`load_checkpoint_file`."""
    filename = os.fspath(filename)
    if filename.startswith(('http://', 'https://')):
        return from_plain(
            torch.hub.load_state_dict_from_url(
                filename, map_location=map_location,
                weights_only=_weights_only()))
    if '://' in filename:
        return _load_checkpoint(filename, map_location=map_location)
    return load_checkpoint_file(filename, map_location, verified)


# ------------------------------------------- the latest checkpoint of a run
LAST_CHECKPOINT = 'last_checkpoint'
"""The file in a work dir that names its latest checkpoint (mmengine's)."""

_RESUMABLE = re.compile(r'^(?:epoch|iter)_\d+\.pth$')


def file_identity(path: str) -> tuple:
    """What changes when a file is replaced or written to (device, inode,
    size, modification and change times)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def checkpoint_progress(path: str) -> Optional[tuple]:
    """How far the training of a checkpoint had gone: ``(iterations,
    epochs)`` done, from its own ``meta``; None when it has none or cannot
    be read (damaged, not a checkpoint).

    Cheap: the file is memory-mapped, so only its pickled structure is
    read, not its tensors' bytes; nothing is verified.
    """
    try:
        checkpoint = torch.load(
            path, map_location='cpu', weights_only=_weights_only(),
            mmap=True)
        meta = checkpoint['meta']
        return int(meta['iter']), int(meta['epoch'])
    except Exception:
        return None


def resumable_checkpoints(checkpoint_dir: str) -> List[str]:
    """The ``epoch_N.pth``/``iter_N.pth`` files of ``checkpoint_dir``
    (best checkpoints hold no optimizer state: not resumable), newest in
    training progress first (:func:`checkpoint_progress`: an ``iter_N``
    and an ``epoch_N`` count different things, and a work dir may hold
    checkpoints of several runs); unreadable ones last."""
    if not osp.isdir(checkpoint_dir):
        return []
    found = []
    for name in sorted(os.listdir(checkpoint_dir)):
        if _RESUMABLE.match(name):
            path = osp.join(checkpoint_dir, name)
            progress = checkpoint_progress(path)
            found.append((progress is not None, progress or (0, 0), path))
    found.sort(key=lambda item: item[:2], reverse=True)
    return [path for _, _, path in found]


def read_last_checkpoint(work_dir: str,
                         checkpoint_dir: Optional[str] = None,
                         logger='current') -> Optional[str]:
    """The checkpoint that ``work_dir/last_checkpoint`` names, as a file of
    this run's own folders.

    A path outside ``work_dir`` and ``checkpoint_dir`` (the work dir was
    copied or moved, or the file was edited) is not followed: it is named
    in a warning, and the file of the same name in ``checkpoint_dir`` is
    taken if there is one.

    Args:
        work_dir (str): The work dir (it holds ``last_checkpoint``).
        checkpoint_dir (str, optional): Where the run's checkpoints are (the
            checkpoint hook's ``out_dir``); defaults to ``work_dir``.
        logger: Where the warning goes (``print_log``'s argument).

    Returns:
        str | None: The path; None without ``last_checkpoint``, or when it
        names a file outside this run's folders and none of that name is
        in ``checkpoint_dir``.

    Raises:
        CheckpointError: ``last_checkpoint`` is empty.
    """
    checkpoint_dir = checkpoint_dir or work_dir
    pointer = osp.join(work_dir, LAST_CHECKPOINT)
    if not osp.isfile(pointer):
        return None
    with open(pointer) as file:
        recorded = file.read().strip()
    if not recorded:
        raise CheckpointError(f'The file {pointer} is empty.')
    if is_inside(recorded, work_dir):
        return recorded
    path = own_file(recorded, checkpoint_dir)
    if path == recorded:
        return recorded
    where = f'outside this work dir, {work_dir}' + (
        '' if checkpoint_dir == work_dir else
        f', and its checkpoint folder, {checkpoint_dir}')
    if path is not None:
        message = (f'{pointer} names {recorded}, {where} (a copied or '
                   f'moved work dir?): not followed; taking {path}, the '
                   'file of that name in this work dir.')
    else:
        message = (f'{pointer} names {recorded}, {where}, and this work dir '
                   f'has no {osp.basename(recorded)}: not followed (to '
                   f'resume from it, pass --resume {recorded}).')
    print_log(message, logger=logger, level=logging.WARNING)
    return path


def latest_checkpoint(work_dir: str,
                      take_intact: bool = False,
                      logger='current',
                      checkpoint_dir: Optional[str] = None,
                      verified: Optional[dict] = None) -> Optional[str]:
    """The latest intact checkpoint of a work dir: the one ``--resume``
    (without a path) resumes from, and the one a stopped run names.

    The one ``last_checkpoint`` names (:func:`read_last_checkpoint`; without
    that file, the newest of :func:`resumable_checkpoints`), if it is intact.
    If it is missing or damaged, the newest intact one (in training
    progress) is named in the error, or taken with ``take_intact``.

    Args:
        work_dir (str): The work dir.
        take_intact (bool): Take the newest intact checkpoint when the
            latest one is damaged (``--resume-intact``), with a warning.
        logger: Where the warnings go (``print_log``'s argument).
        checkpoint_dir (str, optional): Where the run's checkpoints are (the
            checkpoint hook's ``out_dir``); defaults to ``work_dir``.
        verified (dict, optional): Gets ``{path: (file_identity, digest)}``
            of the returned checkpoint, which :func:`load_checkpoint_file`
            then does not verify again.

    Returns:
        str | None: The path; None when the work dir holds no checkpoint.

    Raises:
        CheckpointError: The latest checkpoint is damaged and
            ``take_intact`` is False, or no checkpoint is intact.
    """
    checkpoint_dir = checkpoint_dir or work_dir
    problem = None
    try:
        latest = read_last_checkpoint(work_dir, checkpoint_dir, logger)
    except CheckpointError as error:
        latest, problem = None, str(error)
    if latest is not None and '://' in latest:
        return latest  # a remote out_dir: its loader checks the file
    candidates = None
    if latest is None and problem is None:
        candidates = resumable_checkpoints(checkpoint_dir)
        if not candidates:
            return None
        latest = candidates[0]

    def intact(path) -> None:
        digest = verify_checkpoint_file(path)  # raises if it is not
        if verified is not None:
            verified[path] = (file_identity(path), digest)

    if latest is not None:
        try:
            intact(latest)
            return latest
        except CheckpointError as error:
            problem = f'The latest checkpoint is unusable: {error}'
    newest = None
    if candidates is None:
        candidates = resumable_checkpoints(checkpoint_dir)
    for path in candidates:
        if latest is not None and osp.abspath(path) == osp.abspath(latest):
            continue
        try:
            intact(path)
        except CheckpointError:
            continue
        newest = path
        break
    if newest is None:
        raise CheckpointError(
            f'Cannot resume in {work_dir}. {problem} No other intact '
            'checkpoint (epoch_*.pth, iter_*.pth) is there.')
    if not take_intact:
        raise CheckpointError(
            f'Cannot resume in {work_dir}. {problem} The newest intact '
            f'checkpoint is {newest}: resume from it with --resume-intact '
            f'(config: resume_intact = True) or --resume {newest}.')
    print_log(
        f'{problem} Resuming from the newest intact checkpoint, {newest} '
        '(--resume-intact).', logger=logger, level=logging.WARNING)
    return newest
