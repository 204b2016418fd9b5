"""The checkpoint file format: written atomically with a SHA-256 digest
record over every other record of the torch zip archive (``torch.load``
reads only those its pickle names: ``torch.load(weights_only=True)`` loads
it without lect_mm), mmengine's runtime state as plain data, read once and
loaded from the bytes verified. A run's files: :mod:`.checkpoints`."""
import hashlib
import io
import json
import logging
import os
import os.path as osp
import pickle
import re
import zipfile
from collections import OrderedDict
from contextlib import suppress
from typing import List, Optional, Tuple

import numpy as np
import torch
from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner.checkpoint import _load_checkpoint

from .write_errors import DiskFullError, is_disk_full

ATOMIC_BACKEND = 'lect_atomic_local'  # AtomicLocalBackend's name
DIGEST_RECORD = 'lect_mm_sha256'  # the digest's record in the archive
_TMP_NAME = re.compile(r'^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$')


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, damaged or does not fit the model."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint file does not exist."""


# ----------------------------------------------------------------- writing
def _write_synced(file, data: bytes) -> None:
    """Write, flush and fsync (a separate function: tests kill in it)."""
    file.write(data)
    file.flush()
    os.fsync(file.fileno())


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (its folder created) so that the name never
    holds part of it; a full disk raises :class:`DiskFullError`."""
    path = os.fspath(path)
    directory, name = osp.split(osp.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = osp.join(directory, f'.{name}.{os.getpid()}.tmp')
    try:
        with open(tmp, 'wb') as file:
            _write_synced(file, data)
        os.replace(tmp, path)
    except BaseException as error:
        with suppress(OSError):
            os.remove(tmp)
        if is_disk_full(error):
            raise DiskFullError(path, error) from error
        raise
    with suppress(OSError):  # make the rename durable where the OS allows
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def remove_stale_temporaries(directory: str) -> List[str]:
    """Remove the temporary files of :func:`atomic_write` in ``directory``
    whose writer is gone (killed); return their paths."""
    if not osp.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        match = _TMP_NAME.match(name)
        if match and not _process_alive(int(match['pid'])):
            with suppress(OSError):
                os.remove(osp.join(directory, name))
                removed.append(osp.join(directory, name))
    return removed


# ------------------------------------------------------------------ digest
def _digest_record_name(archive: zipfile.ZipFile) -> Optional[str]:
    """``<archive>/lect_mm_sha256``, or None if it is no torch archive."""
    names = archive.namelist()
    folder = names[0].split('/', 1)[0] if names else ''
    return f'{folder}/{DIGEST_RECORD}' \
        if f'{folder}/data.pkl' in names else None


def _records_digest(archive: zipfile.ZipFile, skip: str) -> str:
    """SHA-256 over the name, size and bytes of every record but ``skip``;
    reading a record checks its CRC-32 (``zipfile.BadZipFile``)."""
    sha = hashlib.sha256()
    for info in archive.infolist():
        if info.filename != skip:
            sha.update(f'{info.filename}\0{info.file_size}\0'.encode())
            with archive.open(info) as record:
                for chunk in iter(lambda: record.read(1 << 20), b''):
                    sha.update(chunk)
    return sha.hexdigest()


def add_digest(data: bytes) -> bytes:
    """``data`` (a ``torch.save`` output) with its digest record added;
    other bytes, or a file that has one, are returned unchanged."""
    buffer = io.BytesIO(data)
    if not zipfile.is_zipfile(buffer):
        return data
    with zipfile.ZipFile(buffer, 'a') as archive:
        record = _digest_record_name(archive)
        if record is None or record in archive.namelist():
            return data
        digest = _records_digest(archive, skip=record)
        archive.writestr(
            zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0)),
            json.dumps(dict(algorithm='sha256', digest=digest)))
    return buffer.getvalue()


@register_backend(ATOMIC_BACKEND)
class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend whose ``put`` (how mmengine saves a
    checkpoint) is atomic and adds the digest."""

    def put(self, obj: bytes, filepath) -> None:
        atomic_write(filepath, add_digest(obj))


# -------------------------------------------------------------- plain data
PLAIN_TAG = '__lect_mm_plain__'  # marks an encoded object; its value: the kind
_NUMERIC_KINDS = 'biuf'


def _map_container(obj, fn):
    """``fn`` applied to the items of a dict, list or tuple; ``obj`` itself
    when no item changed (nothing shared with the live run is copied)."""
    if type(obj) in (dict, OrderedDict):
        items = [(key, fn(value)) for key, value in obj.items()]
        changed = any(new is not obj[key] for key, new in items)
    elif type(obj) in (list, tuple):
        items = [fn(value) for value in obj]
        changed = any(new is not old for new, old in zip(items, obj))
    else:
        return obj
    return type(obj)(items) if changed else obj


def to_plain(obj):
    """``obj`` with HistoryBuffers and numeric numpy values as tagged dicts
    of Python numbers (bit-exact): no safe globals needed to load them."""
    if isinstance(obj, HistoryBuffer):
        log_history, count_history = obj.data
        return {PLAIN_TAG: 'HistoryBuffer',
                'log_history': to_plain(log_history),
                'count_history': to_plain(count_history),
                'max_length': int(obj.max_length)}
    if isinstance(obj, (np.ndarray, np.generic)) and \
            obj.dtype.kind in _NUMERIC_KINDS:
        kind = 'ndarray' if isinstance(obj, np.ndarray) else 'scalar'
        return {PLAIN_TAG: kind, 'dtype': obj.dtype.str, 'data': obj.tolist()}
    return _map_container(obj, to_plain)


def has_plain(obj) -> bool:
    """Whether ``obj`` holds anything :func:`to_plain` encoded (mmengine's
    own loader leaves it so; lect_mm's decodes it)."""
    if isinstance(obj, dict):
        return PLAIN_TAG in obj or any(map(has_plain, obj.values()))
    return isinstance(obj, (list, tuple)) and any(map(has_plain, obj))


def from_plain(obj):
    """Undo :func:`to_plain`; anything else is returned unchanged."""
    if not (isinstance(obj, dict) and PLAIN_TAG in obj):
        return _map_container(obj, from_plain)
    kind = obj[PLAIN_TAG]
    if kind == 'HistoryBuffer':
        return HistoryBuffer(
            from_plain(obj['log_history']),
            from_plain(obj['count_history']), obj['max_length'])
    if kind not in ('ndarray', 'scalar'):
        raise ValueError(f'unknown {PLAIN_TAG} kind {kind!r}')
    dtype = np.dtype(obj['dtype'])
    if dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f'not a numeric numpy dtype: {dtype}')
    array = np.array(obj['data'], dtype=dtype)
    return array if kind == 'ndarray' else array[()]


# ----------------------------------------------------------------- reading
def verify_checkpoint_bytes(data: bytes, path: str) -> Optional[str]:
    """Raise :class:`CheckpointError` naming ``path`` if ``data`` (its
    bytes) are empty, truncated, fail a zip CRC or their digest; return the
    verified SHA-256, or None without a digest (converted weights)."""
    if not data:
        raise CheckpointError(
            f'Checkpoint {path} is empty (0 bytes): its writing was '
            'interrupted or the file was truncated.')
    buffer = io.BytesIO(data)
    if not zipfile.is_zipfile(buffer):
        if data[:4] == b'PK\x03\x04':
            raise CheckpointError(
                f'Checkpoint {path} is truncated or damaged ({len(data)} '
                "bytes): it begins as a zip archive (PyTorch's format) but "
                'its end, the zip central directory, is missing.')
        return None  # PyTorch's legacy format or not a checkpoint: torch says
    try:
        with zipfile.ZipFile(buffer) as archive:
            record = _digest_record_name(archive)
            expected = json.loads(archive.read(record))['digest'] \
                if record in archive.namelist() else None
            digest = _records_digest(archive, skip=record)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError,
            KeyError) as error:
        raise CheckpointError(
            f'Checkpoint {path} is damaged ({len(data)} bytes): '
            f'{type(error).__name__}: {error}.') from error
    if expected is not None and digest != expected:
        raise CheckpointError(
            f'Checkpoint {path} is damaged or was altered: the SHA-256 of its '
            f'contents is {digest[:16]}..., but it was written as '
            f'{str(expected)[:16]}...')
    return None if expected is None else digest


def read_verified(path: str) -> Tuple[bytes, Optional[str]]:
    """The bytes of the local file ``path``, read once, and their verified
    digest (:func:`verify_checkpoint_bytes`); a missing file, a folder and
    a file that changes while it is read (written to in place) raise
    :class:`CheckpointError` naming it."""
    path = os.fspath(path)
    if not osp.exists(path):
        raise CheckpointNotFoundError(f'Checkpoint {path} does not exist.')
    if osp.isdir(path):
        raise CheckpointError(f'Checkpoint {path} is a directory, not a '
                              'checkpoint file.')
    with open(path, 'rb') as file:
        before = os.fstat(file.fileno())
        data = file.read()
        after = os.fstat(file.fileno())
    stamp = ('st_ino', 'st_size', 'st_mtime_ns', 'st_ctime_ns')
    if len(data) != after.st_size or any(
            getattr(before, k) != getattr(after, k) for k in stamp):
        raise CheckpointError(
            f'Checkpoint {path} changed while it was read ({len(data)} bytes '
            f'read, {after.st_size} now): another process writes to it. Read '
            'it once that write is done, or copy it aside first.')
    return data, verify_checkpoint_bytes(data, path)


def verify_checkpoint_file(path: str) -> Optional[str]:
    """:func:`read_verified`'s digest of the local file ``path``."""
    return read_verified(path)[1]


def read_checkpoint(filename: str, map_location=None,
                    verified: Optional[tuple] = None) -> dict:
    """The checkpoint dict at any path, plain data decoded: a local file
    read once, verified and loaded from those bytes (``verified``: its
    :func:`read_verified`); an ``http(s)://`` URL with torch's
    ``weights_only`` too (mmengine's unpickles anything); ``s3://``...
    with mmengine's loader. Anything but a dict raises."""
    filename = osp.expanduser(os.fspath(filename))
    if filename.startswith(('http://', 'https://')):
        checkpoint = torch.hub.load_state_dict_from_url(
            filename, map_location=map_location, weights_only=None)
    elif '://' in filename:
        checkpoint = _load_checkpoint(filename, map_location=map_location)
    else:
        data, digest = verified or read_verified(filename)
        try:
            checkpoint = torch.load(io.BytesIO(data),
                                    map_location=map_location)
        except pickle.UnpicklingError as error:
            hint = (" mmengine's own CheckpointHook pickles objects that "
                    "torch >= 2.6 refuses (lect_mm's SafeCheckpointHook "
                    'writes plain data); to load such a file that you trust, '
                    'set TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1.'
                    ) if 'mmengine' in str(error) else ''
            raise pickle.UnpicklingError(
                f'Checkpoint {filename}: {error}{hint}') from error
        except Exception as error:
            raise CheckpointError(
                f'Checkpoint {filename} could not be loaded: '
                f'{type(error).__name__}: {error}') from error
        if digest is None:
            print_log(
                f'Checkpoint {filename} carries no lect_mm digest (converted '
                'or third-party weights, or written by another tool); its '
                'content is loaded unverified.', logger='current',
                level=logging.INFO)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f'Checkpoint {filename} holds a {type(checkpoint).__name__}, '
            'not a dict of weights.')
    return from_plain(checkpoint)
