"""Command-line arguments shared by the benchmark scripts."""
import argparse
import os.path as osp
from typing import Dict, List, Optional, Sequence

import torch

from .models import MODEL_CONFIGS, QUICK_MODELS


def new_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser: its docstring's first paragraph as description,
    the docstring's layout kept, and the common arguments added."""
    parser = argparse.ArgumentParser(
        description=doc.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    return parser


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--device``, ``--quick``, ``--out``, ``--threads``, ``--seed``."""
    parser.add_argument(
        '--device',
        default='auto',
        help="'auto' (CUDA if available, else CPU), 'cpu', 'cuda' or "
        "'cuda:N'. Defaults to auto.")
    parser.add_argument(
        '--quick',
        action='store_true',
        help='smoke-test mode: tiny sizes and counts, numbers meaningless')
    parser.add_argument(
        '--out',
        default=None,
        help='folder for the markdown report and PNG plots '
        '(created if missing); without it results are only printed')
    parser.add_argument(
        '--threads',
        type=int,
        default=None,
        help='torch.set_num_threads for CPU runs (default: torch default)')
    parser.add_argument('--seed', type=int, default=0)


def add_model_args(parser: argparse.ArgumentParser,
                   default: Sequence[str] = tuple(MODEL_CONFIGS)) -> None:
    """Add ``--models``: report names (see ``MODEL_CONFIGS``) or paths."""
    parser.add_argument(
        '--models',
        nargs='+',
        default=None,
        metavar='MODEL',
        help='report model names (' + ', '.join(
            f"'{m}'" for m in MODEL_CONFIGS) + ') or config paths; '
        f'default: {", ".join(default)} (--quick: '
        f'{", ".join(QUICK_MODELS)})')


def layout_flags(args: argparse.Namespace) -> List[str]:
    """``'channels_last'`` and ``'torch.compile'`` where the run set them
    (``--channels-last``, ``--compile``; a mode other than the default in
    parentheses), for a table's settings line."""
    compiled = 'torch.compile'
    if isinstance(args.compile, str) and args.compile != 'default':
        compiled += f' ({args.compile})'
    return [
        flag for flag, on in (('channels_last', args.channels_last),
                              (compiled, args.compile)) if on
    ]


def setup(args: argparse.Namespace) -> torch.device:
    """Seed, thread count and device of a parsed command line."""
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    return resolve_device(args.device)


def resolve_device(name: str) -> torch.device:
    """``'auto'`` → CUDA if available else CPU; validate the rest."""
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f'--device: invalid device {name!r}: {err}') from err
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'--device {name}: CUDA is not available here')
    if device.type not in ('cpu', 'cuda'):
        raise ValueError(f"--device must be 'auto', 'cpu' or 'cuda[:N]', "
                         f'got {name!r}')
    return device


def resolve_models(names: Optional[Sequence[str]], quick: bool,
                   default: Sequence[str] = tuple(MODEL_CONFIGS),
                   timm_models: bool = False) -> Dict[str, str]:
    """Map the ``--models`` selection to ``{display name: config path}``:
    report names, config paths, ``NAME=PATH`` (a config under a name of
    one's own) and, with ``timm_models``, ``timm/NAME`` (kept as it is)."""
    if not names:
        names = QUICK_MODELS if quick else default
    selected = {}
    for name in names:
        label, _, path = name.rpartition('=')
        if name in MODEL_CONFIGS:
            selected[name] = MODEL_CONFIGS[name]
        elif path.endswith('.py'):
            selected[label or osp.splitext(osp.basename(path))[0]] = path
        elif name.startswith('timm/') and timm_models:
            selected[name] = name
        else:
            raise ValueError(
                f'--models: unknown model {name!r}; choose from '
                f'{list(MODEL_CONFIGS)}, a config path or NAME=PATH' +
                (', or timm/NAME for a timm model' if timm_models else ''))
    return selected
