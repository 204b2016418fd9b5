"""Silence the deprecation chatter of mmcv-lite / mmengine that users cannot act on.

Only warnings whose text is known are filtered; anything else still shows.
"""
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
