"""Overlay the attention maps of a LeCT (or MSA / CeiT) model on an image.

For LeMSA (LeCT report §3.3) a query is one cell of the pooled
``h' x w'`` grid, and its attention is the softmax over the full-resolution
keys (the key-upsampled axis): one ``H x W`` map per head, which this tool
resizes to the input image and overlays, one panel per head. Rows are the
chosen (stage, block, query) combinations; the first column shows the input
with the query's pooled cell outlined.

The maps come from the blocks' opt-in recording (``return_attn_map = True``
on LeMSA, LeMSAv2 and MultiheadSelfAttention: the fused path computes the
map only while the switch is on, and the tool turns it off again). Attention
modules without that switch but with an ``scaled_dot_product_attention``
attribute (mmpretrain's ``MultiheadAttention``, used by the CeiT blocks) are
recorded by wrapping that attribute for the one forward; their leading extra
tokens (the class token) are dropped from both axes.

A "stage" is a group of consecutive attention calls on the same token grid,
in forward order: LeCT's stages 0, 1, 2; a single-resolution model such as
CeiT has one stage whose blocks are its layers.

Queries (``--queries``), each ``Y,X``:

* with a decimal point, a position relative to the image (``0.25,0.5`` is a
  quarter down, half across), mapped to the query cell that contains it;
* integers, a (row, column) index of the query grid (LeMSA's pooled grid,
  the token grid for plain MSA / CeiT), negative values counting from the
  end.

Example::

    python tools/visualization/vis_attention.py digit.png \\
        configs/demo/lect_digits.py work_dirs/lect_digits/epoch_12.pth \\
        --stage 0 1 2 --queries 0.25,0.5 0.75,0.75 --out attn.png
"""
import argparse
import copy
import math
import os
import os.path as osp
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.config import Config, DictAction
from mmengine.dataset import default_collate

SWITCH = 'return_attn_map'
SDPA_ATTR = 'scaled_dot_product_attention'


# --------------------------------------------------------------------------
# Model and input
# --------------------------------------------------------------------------
def load_model(cfg: Config,
               checkpoint: Optional[str] = None,
               device: str = 'cpu') -> nn.Module:
    """Build the classifier of ``cfg``; load ``checkpoint`` or initialise.

    The checkpoint is loaded strictly: a missing, unexpected or differently
    shaped weight is an error naming it (``get_model(pretrained=...)`` only
    warns, and the maps would then show partly untrained weights). Without
    a checkpoint the model's ``init_weights()`` runs, so the maps show the
    initialised (untrained) network.
    """
    from mmpretrain.apis import get_model

    from lect_mm.analysis import init_weights_quietly
    from lect_mm.engine import load_weights

    model = get_model(cfg, device=device)
    if checkpoint is not None:
        try:
            ckpt = load_weights(model, checkpoint, map_location='cpu',
                                strict=True)
        except RuntimeError as e:
            raise RuntimeError(
                f'checkpoint {checkpoint} does not fit the model of config '
                f'{cfg.filename}: {e}') from None
        meta = ckpt.get('meta', {}) if isinstance(ckpt, dict) else {}
        if 'dataset_meta' in meta:
            model._dataset_meta = meta['dataset_meta']
    else:
        init_weights_quietly(model)
    return model.eval()


def prepare_input(model: nn.Module,
                  cfg: Config,
                  img_path: str,
                  img_size: Optional[Sequence[int]] = None):
    """Run the config's test pipeline and the model's data preprocessor.

    The image is read with ``mmcv.imread`` (BGR, as mmpretrain's
    inferencers do) when the pipeline does not load files itself.

    Returns:
        tuple: ``(inputs, display)``: the preprocessed ``(1, C, H, W)``
        batch, and the ``(H, W, 3)`` uint8 RGB picture of the same pixels.
    """
    import mmcv
    from mmcv.transforms import Compose
    from mmpretrain.registry import TRANSFORMS

    pipeline_cfg = copy.deepcopy(cfg.test_dataloader.dataset.pipeline)
    if pipeline_cfg and pipeline_cfg[0]['type'] == 'LoadImageFromFile':
        data = dict(img_path=img_path)
    else:
        img = mmcv.imread(img_path)
        if img is None:
            raise FileNotFoundError(f'cannot read image {img_path!r}')
        data = dict(img=img, img_shape=img.shape[:2], ori_shape=img.shape[:2])
    pipeline = Compose([TRANSFORMS.build(t) for t in pipeline_cfg])
    data = pipeline(data)
    packed = data['inputs']
    if img_size is not None:
        packed = F.interpolate(
            packed[None].float(), size=tuple(img_size), mode='bilinear',
            align_corners=False)[0].round().clamp(0, 255).to(packed.dtype)
        data['inputs'] = packed
    pic = packed.cpu().numpy().transpose(1, 2, 0)
    pic = pic[..., ::-1] if pic.shape[-1] == 3 else np.repeat(
        pic[..., :1], 3, axis=-1)
    display = np.ascontiguousarray(pic).clip(0, 255).astype(np.uint8)
    batch = model.data_preprocessor(default_collate([data]), False)
    return batch['inputs'], display


# --------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------
def _as_hw(value) -> Optional[Tuple[int, int]]:
    if isinstance(value, (tuple, list, torch.Size)) and len(value) == 2 and \
            all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    return None


def _hw_from_call(args, kwargs) -> Optional[Tuple[int, int]]:
    if 'hw_shape' in kwargs:
        return _as_hw(kwargs['hw_shape'])
    return _as_hw(args[1]) if len(args) > 1 else None


def attention_modules(model: nn.Module) -> Dict[str, nn.Module]:
    """Attention modules whose maps can be recorded, by name."""
    found = {}
    for name, module in model.named_modules():
        if hasattr(module, SWITCH) or callable(
                module.__dict__.get(SDPA_ATTR)):
            found[name] = module
    return found


def _recording_sdpa(sdpa, store: list):
    """Wrap an SDPA callable so that it also stores its attention map."""

    def wrapper(query, key, value, attn_mask=None, dropout_p=0., *args,
                **kwargs):
        scale = kwargs.get('scale')
        scale = query.shape[-1]**-0.5 if scale is None else scale
        with torch.no_grad():
            logits = (query @ key.transpose(-2, -1)) * scale
            if attn_mask is not None:
                if attn_mask.dtype == torch.bool:
                    logits = logits.masked_fill(~attn_mask, float('-inf'))
                else:
                    logits = logits + attn_mask
            store.append(logits.softmax(-1).detach())
        return sdpa(query, key, value, attn_mask, dropout_p, *args, **kwargs)

    return wrapper


@torch.no_grad()
def record_attention(model: nn.Module, inputs: torch.Tensor):
    """Run one forward and record the attention map of every call.

    Returns:
        tuple: ``(records, output)``. ``records`` lists, in forward order,
        dicts with ``name``, ``module``, ``attn`` (``(B, m, Nq_total,
        N_total)``, softmaxed, before dropout), ``hw`` (the token grid
        ``(H, W)``), ``num_extra`` (leading extra tokens such as the class
        token) and ``query_grid`` (``(h', w')``). ``output`` is the model's
        ``mode='tensor'`` output.
    """
    modules = attention_modules(model)
    if not modules:
        raise ValueError(
            'the model has no attention module with an attention-map switch '
            f'({SWITCH}) or an {SDPA_ATTR} attribute to record')
    names = {m: n for n, m in model.named_modules()}
    parents: Dict[str, List[str]] = {}
    for name in modules:
        parts = name.split('.')
        parents[name] = [
            '.'.join(parts[:i]) for i in range(len(parts) - 1, -1, -1)]
    module_by_name = dict(model.named_modules())
    last_hw: Dict[str, Tuple[int, int]] = {}
    records: List[dict] = []
    handles, saved_switch, saved_sdpa = [], {}, {}

    def remember_hw(module, args, kwargs):
        hw = _hw_from_call(args, kwargs)
        if hw is not None:
            last_hw[names[module]] = hw

    ancestors = {p for ps in parents.values() for p in ps}
    for name in ancestors:
        handles.append(module_by_name[name].register_forward_pre_hook(
            remember_hw, with_kwargs=True))

    def make_hook(name):
        store: list = []
        calls: List[dict] = []

        def pre_hook(module, args, kwargs):
            hw = _hw_from_call(args, kwargs)
            if hw is None:
                hw = next((last_hw[p] for p in parents[name]
                           if p in last_hw), None)
            store.clear()
            calls.append(dict(name=name, module=module, hw=hw))
            records.append(calls[-1])

        def post_hook(module, args, kwargs, output):
            rec = calls.pop()
            if hasattr(module, SWITCH):
                rec['attn'] = module.attn_map
                module.attn_map = None
            else:
                rec['attn'] = store[-1] if store else None

        return store, pre_hook, post_hook

    try:
        for name, module in modules.items():
            store, pre_hook, post_hook = make_hook(name)
            if hasattr(module, SWITCH):
                saved_switch[module] = getattr(module, SWITCH)
                setattr(module, SWITCH, True)
            else:
                saved_sdpa[module] = module.__dict__[SDPA_ATTR]
                setattr(module, SDPA_ATTR,
                        _recording_sdpa(saved_sdpa[module], store))
            handles.append(module.register_forward_pre_hook(
                pre_hook, with_kwargs=True))
            handles.append(module.register_forward_hook(
                post_hook, with_kwargs=True))
        output = model(inputs, mode='tensor')
    finally:
        for handle in handles:
            handle.remove()
        for module, value in saved_switch.items():
            setattr(module, SWITCH, value)
        for module, value in saved_sdpa.items():
            setattr(module, SDPA_ATTR, value)

    usable = []
    for rec in records:
        attn, hw = rec['attn'], rec['hw']
        if attn is None or hw is None or attn.shape[-1] < hw[0] * hw[1]:
            # e.g. CeiT's layer-wise class-token attention: no token grid
            why = ('no map recorded' if attn is None else
                   'no token grid' if hw is None else
                   f'{attn.shape[-1]} keys for a {hw[0]}x{hw[1]} grid')
            print(f'skipping {rec["name"]} ({type(rec["module"]).__name__})'
                  f': {why}')
            continue
        rec['num_extra'] = attn.shape[-1] - hw[0] * hw[1]
        rec['query_grid'] = query_grid(rec['module'], hw,
                                       attn.shape[-2] - _extra_queries(rec))
        usable.append(rec)
    if not usable:
        raise RuntimeError('no attention map over a token grid was recorded')
    return usable, output


def _extra_queries(rec: dict) -> int:
    """Extra tokens among the queries (self-attention over all tokens)."""
    n_q, n_k = rec['attn'].shape[-2:]
    return rec['num_extra'] if n_q == n_k else 0


def query_grid(module: nn.Module, hw: Tuple[int, int],
               num_queries: int) -> Tuple[int, int]:
    """The ``(h', w')`` grid the queries live on.

    LeMSA pools the queries (``sr_ratio`` K with ceil mode, or a fixed
    ``pool_size``); plain attention queries every token.
    """
    h, w = hw
    if num_queries == h * w:
        return h, w
    pool_size = getattr(module, 'pool_size', None)
    sr_ratio = getattr(module, 'sr_ratio', None)
    if pool_size is not None:
        grid = tuple(pool_size)
    elif isinstance(sr_ratio, int):
        grid = (math.ceil(h / sr_ratio), math.ceil(w / sr_ratio))
    else:
        grid = None
    if grid is None or grid[0] * grid[1] != num_queries:
        raise RuntimeError(
            f'{type(module).__name__}: cannot lay {num_queries} queries out '
            f'on a grid for a {h}x{w} token map')
    return grid


def cell_box(module: nn.Module, hw: Tuple[int, int], grid: Tuple[int, int],
             cell: Tuple[int, int]) -> Tuple[float, float, float, float]:
    """Token-grid rows/cols ``(r0, r1, c0, c1)`` pooled into one query."""
    sr_ratio = getattr(module, 'sr_ratio', None)
    out = []
    for i, size, n in zip(cell, hw, grid):
        if n == size:
            out += [i, i + 1]
        elif getattr(module, 'pool_size', None) is None and isinstance(
                sr_ratio, int):
            out += [i * sr_ratio, min((i + 1) * sr_ratio, size)]
        else:
            out += [math.floor(i * size / n), math.ceil((i + 1) * size / n)]
    return tuple(out)


def group_stages(records: Sequence[dict]) -> List[List[dict]]:
    """Group consecutive attention calls on the same token grid."""
    stages: List[List[dict]] = []
    for rec in records:
        if stages and stages[-1][-1]['hw'] == rec['hw']:
            stages[-1].append(rec)
        else:
            stages.append([rec])
    return stages


# --------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------
def parse_query(text: str):
    """``'0.25,0.5'`` -> ('rel', (0.25, 0.5)); ``'1,2'`` -> ('idx', (1, 2))."""
    parts = text.split(',')
    if len(parts) != 2:
        raise ValueError(f'--queries: {text!r} is not Y,X')
    if any('.' in p or 'e' in p.lower() for p in parts):
        y, x = (float(p) for p in parts)
        if not (0 <= y <= 1 and 0 <= x <= 1):
            raise ValueError(
                f'--queries: relative position {text!r} must lie in [0, 1]')
        return 'rel', (y, x)
    try:
        return 'idx', (int(parts[0]), int(parts[1]))
    except ValueError:
        raise ValueError(f'--queries: {text!r} is not Y,X (floats in [0, 1] '
                         'or integer grid indices)') from None


def query_cell(query, grid: Tuple[int, int]) -> Tuple[int, int]:
    """The (row, col) of ``grid`` a parsed query selects."""
    kind, (a, b) = query
    if kind == 'rel':
        return min(int(a * grid[0]), grid[0] - 1), min(
            int(b * grid[1]), grid[1] - 1)
    cell = []
    for i, n in zip((a, b), grid):
        if not -n <= i < n:
            raise ValueError(f'--queries: index ({a},{b}) is outside the '
                             f'{grid[0]}x{grid[1]} query grid')
        cell.append(i % n)
    return tuple(cell)


def head_maps(rec: dict, cell: Tuple[int, int]) -> torch.Tensor:
    """``(m, H, W)`` attention of one query over the patch tokens."""
    h, w = rec['hw']
    grid = rec['query_grid']
    q = _extra_queries(rec) + cell[0] * grid[1] + cell[1]
    attn = rec['attn'][0, :, q, rec['num_extra']:]
    return attn.reshape(-1, h, w).float().cpu()


# --------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------
def _index(option: str, value: int, items: Sequence, owner: str,
           unit: str) -> int:
    """``value`` (negative counts from the end) as an index of ``items``,
    or a ValueError naming the option and the valid choices."""
    if not -len(items) <= value < len(items):
        raise ValueError(
            f'{option} {value}: {owner} has {len(items)} attention '
            f'{unit}(s), choose from {list(range(len(items)))}')
    return value % len(items)


def select_rows(records: Sequence[dict], stages: Sequence[int],
                blocks: Sequence[int], queries: Sequence) -> List[dict]:
    """One row per (stage, block, query cell); repeated cells are shown once.
    """
    grouped = group_stages(records)
    rows = []
    for s in stages:
        s = _index('--stage', s, grouped, 'the model', 'stage')
        stage = grouped[s]
        for b in blocks:
            b = _index('--block', b, stage, f'stage {s}', 'block')
            rec = stage[b]
            cells = []
            for q in queries:
                cell = query_cell(q, rec['query_grid'])
                if cell in cells:  # e.g. two queries in one pooled cell
                    continue
                cells.append(cell)
                rows.append(dict(rec=rec, stage=s, block=b, cell=cell,
                                 maps=head_maps(rec, cell)))
    return rows


def format_prob(value: float) -> str:
    """Two significant digits: attention weights span 1e-5 to 1."""
    return '0' if value == 0 else f'{value:.2g}'


def draw(rows: Sequence[dict],
         image: np.ndarray,
         out: str,
         title: str = '',
         panel_px: int = 160,
         title_px: int = 24,
         dpi: int = 100,
         alpha: float = 0.55,
         cmap: str = 'jet') -> Tuple[int, int]:
    """Save the figure; returns its ``(width, height)`` in pixels.

    The heads of one row (one query) share a colour scale from 0 to the
    row's largest attention weight, shown by the colour bar at the row's
    end, so heads can be compared; rows differ in their number of keys
    ``N``, so each row has its own scale. A line on the bar marks uniform
    attention, ``1 / N``.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter

    num_heads = max(r['maps'].shape[0] for r in rows)
    ncols, nrows = 1 + num_heads, len(rows)
    cbar_px = max(int(0.5 * panel_px), 56)  # bar, tick labels, label
    width = ncols * panel_px + cbar_px
    height = nrows * panel_px + title_px
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    # room above the first row for the figure title and two-line row titles
    grid = fig.add_gridspec(
        nrows, ncols + 1, width_ratios=[1] * ncols + [0.12],
        left=0.01, right=1 - 0.75 * cbar_px / width, bottom=0.01,
        top=1 - (title_px + 0.2 * panel_px) / height, wspace=0.06,
        hspace=0.45)
    img_h, img_w = image.shape[:2]
    extent = (0, img_w, img_h, 0)
    grey = image.mean(-1)
    ticks = FuncFormatter(lambda v, _: format_prob(v))
    for r, row in enumerate(rows):
        rec = row['rec']
        h, w = rec['hw']
        r0, r1, c0, c1 = cell_box(rec['module'], rec['hw'],
                                  rec['query_grid'], row['cell'])
        box = (c0 * img_w / w, r0 * img_h / h, (c1 - c0) * img_w / w,
               (r1 - r0) * img_h / h)
        cy, cx = box[1] + box[3] / 2, box[0] + box[2] / 2
        ax = fig.add_subplot(grid[r, 0])
        ax.set_axis_off()
        ax.imshow(image, extent=extent, interpolation='nearest')
        ax.add_patch(Rectangle(box[:2], box[2], box[3], fill=False,
                               edgecolor='red', linewidth=1.5))
        gh, gw = rec['query_grid']
        ax.set_title(
            f'stage {row["stage"]} block {row["block"]}\n'
            f'query ({row["cell"][0]},{row["cell"][1]}) of {gh}x{gw}',
            fontsize=7)
        vmax = float(row['maps'].max())
        maps = F.interpolate(row['maps'][None], size=(img_h, img_w),
                             mode='bilinear', align_corners=False)[0]
        for head, amap in enumerate(maps):
            ax = fig.add_subplot(grid[r, head + 1])
            ax.set_axis_off()
            ax.imshow(grey, cmap='gray', extent=extent,
                      interpolation='nearest')
            shown = ax.imshow(amap.numpy(), cmap=cmap, alpha=alpha,
                              extent=extent, vmin=0, vmax=vmax)
            ax.add_patch(Rectangle(box[:2], box[2], box[3], fill=False,
                                   edgecolor='white', linewidth=1))
            ax.plot([cx], [cy], marker='x', color='white', markersize=5)
            ax.set_title(
                f'head {head}  max {format_prob(row["maps"][head].max())}',
                fontsize=7)
        bar = fig.colorbar(shown, cax=fig.add_subplot(grid[r, ncols]))
        bar.solids.set_alpha(1)
        bar.ax.yaxis.set_major_formatter(ticks)
        bar.ax.tick_params(labelsize=6, length=2, pad=1)
        # uniform attention over the N = H * W keys, for reference
        bar.ax.axhline(1 / (h * w), color='white', linewidth=1.5)
        bar.ax.axhline(1 / (h * w), color='black', linewidth=0.7)
        bar.set_label(f'uniform 1/N = {format_prob(1 / (h * w))}',
                      fontsize=6, labelpad=2)
    if title:
        fig.suptitle(title, fontsize=9, y=1 - 4 / height, va='top')
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=dpi)
    return width, height


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Overlay per-head attention maps (LeMSA: full-'
        'resolution attention of pooled queries) on an image')
    parser.add_argument('img', help='image file')
    parser.add_argument('config', help='config file')
    parser.add_argument(
        'checkpoint', nargs='?', default=None,
        help='checkpoint file; without it the initialised weights are used')
    parser.add_argument(
        '--stage', type=int, nargs='+', default=None,
        help='attention stages to show (0-based groups of blocks on one '
        'token grid); default: all')
    parser.add_argument(
        '--block', type=int, nargs='+', default=[-1],
        help='attention block(s) within each stage (0-based, negative '
        'from the end); default: the last')
    parser.add_argument(
        '--queries', nargs='+', default=['0.5,0.5'],
        help='query positions Y,X: floats in [0, 1] relative to the image, '
        'or integer (row, col) indices of the query grid')
    parser.add_argument('--out', default='attention.png', help='output PNG')
    parser.add_argument('--device', default='cpu', help='device to run on')
    parser.add_argument(
        '--img-size', type=int, nargs='+', default=None,
        help='resize the pipeline output to H W (or one side) before the '
        'model')
    parser.add_argument('--panel-size', type=int, default=160,
                        help='panel side in pixels')
    parser.add_argument('--dpi', type=int, default=100)
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings in the config, xxx=yyy format')
    args = parser.parse_args(argv)
    if args.img_size is not None:
        if len(args.img_size) == 1:
            args.img_size = args.img_size * 2
        elif len(args.img_size) != 2:
            parser.error(f'--img-size takes H W or one side, got '
                         f'{args.img_size}')
    try:
        args.queries = [parse_query(q) for q in args.queries]
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    model = load_model(cfg, args.checkpoint, args.device)
    if args.checkpoint is None:
        print('No checkpoint given: showing the attention of the '
              'initialised (untrained) weights.')
    inputs, image = prepare_input(model, cfg, args.img, args.img_size)
    records, output = record_attention(model, inputs)
    num_stages = len(group_stages(records))
    stages = args.stage if args.stage is not None else list(
        range(num_stages))
    rows = select_rows(records, stages, args.block, args.queries)

    backbone = getattr(model, 'backbone', model)
    weights = (osp.basename(args.checkpoint) if args.checkpoint else
               'initialised weights, no checkpoint')
    attn_types = ', '.join(
        dict.fromkeys(type(r['rec']['module']).__name__ for r in rows))
    title = f'{type(backbone).__name__} / {attn_types} ({weights})'
    if isinstance(output, torch.Tensor) and output.ndim == 2:
        prob = output.float().softmax(-1)[0]
        classes = (getattr(model, '_dataset_meta', None) or {}).get('classes')
        label = int(prob.argmax())
        name = classes[label] if classes and label < len(classes) else label
        title += f'  prediction: {name} ({float(prob[label]):.2f})'
    for row in rows:
        rec = row['rec']
        print(f'stage {row["stage"]} block {row["block"]} ({rec["name"]}, '
              f'{type(rec["module"]).__name__}): tokens {rec["hw"][0]}x'
              f'{rec["hw"][1]}, query grid {rec["query_grid"][0]}x'
              f'{rec["query_grid"][1]}, query {row["cell"]}, '
              f'{row["maps"].shape[0]} heads')
    size = draw(rows, image, args.out, title, args.panel_size, dpi=args.dpi)
    print(f'saved {args.out} ({size[0]}x{size[1]} px)')
    return dict(records=records, rows=rows, size=size)


if __name__ == '__main__':
    main()
