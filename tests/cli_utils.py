"""What the command-line tests share: the text a run logged."""
import os
import os.path as osp


def log_text(work_dir):
    """Every ``*.log`` under ``work_dir``, concatenated."""
    return ''.join(
        open(osp.join(root, f)).read()
        for root, _, files in os.walk(work_dir) for f in sorted(files)
        if f.endswith('.log'))
