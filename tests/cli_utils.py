"""What the command-line tests share: the text a run logged, the digests
of a work dir's files."""
import hashlib
import os
import os.path as osp


def log_text(work_dir):
    """Every ``*.log`` under ``work_dir``, concatenated."""
    return ''.join(
        open(osp.join(root, f)).read()
        for root, _, files in os.walk(work_dir) for f in sorted(files)
        if f.endswith('.log'))


def snapshot(work_dir):
    """{file name: SHA-256} of the files of ``work_dir`` (checkpoints,
    last_checkpoint, the config copy; not the logs and the lock)."""
    return {
        name: hashlib.sha256(open(osp.join(work_dir, name), 'rb').read()
                             ).hexdigest()
        for name in os.listdir(work_dir)
        if osp.isfile(osp.join(work_dir, name))
        and not name.startswith('.work_dir')
    }
