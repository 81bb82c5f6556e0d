"""Figure layout the paper-sized report needs (issue 16 part 8): a fixed colour per method that
never collides with the cliff (red) and safe-lr (green) marks, small-multiple grids, lr labels
placed where they overlap no other text and no marker, and the text boxes a layout test checks.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from cliffsweep.analysis.lr_format import lr_text  # noqa: E402,F401  (plots and tables label lrs alike)

CLIFF_RED = "#d62728"
SAFE_GREEN = "#2ca02c"
# SFT is the paper's black line; the rest are tab10/tab20b hues with red and green left out, so
# that a series is never mistaken for a cliff arrow or a safe-lr ring.
METHOD_COLORS = {"sft": "#000000", "sib": "#1f77b4", "lora": "#ff7f0e", "ewc": "#9467bd", "mas": "#8c564b",
                 "migu": "#e377c2", "nanoadam": "#bcbd22", "kl": "#17becf", "l2sp": "#7f7f7f", "replay": "#393b79",
                 "wise_ft": "#8c6d31", "dft": "#7b4173", "iw": "#5254a3", "flow": "#bd9e39", "rpsft": "#a55194",
                 "talr": "#6b6ecf"}
_SPARE = ["#3182bd", "#756bb1", "#636363", "#6baed6", "#9e9ac8", "#fdae6b", "#c49c94"]
MARKERS = ["o", "s", "D", "^", "v", "P", "h", "<", ">"]


def method_color(method: str, label: str = "") -> str:
    """Colour of a method (its series share it; a second setting of one method is told apart
    by its marker, :func:`series_style`)."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return _SPARE[sum(map(ord, method)) % len(_SPARE)]


def series_style(labels: list[tuple[str, str]]) -> dict[str, dict]:
    """{label: {color, marker}} for (method, label) pairs: the method's colour, and a marker
    that differs between the settings of one method."""
    out, seen = {}, {}
    for method, label in labels:
        k = seen.get(method, 0)
        seen[method] = k + 1
        out[label] = {"color": method_color(method), "marker": MARKERS[k % len(MARKERS)]}
    return out


MIN_WIDTH = 7.0
"""Inches: a one-panel figure still fits its title and a two-column legend."""
LEGEND_COLUMN = 2.6
"""Inches per legend column."""


def legend_columns(width_in: float, entries: int) -> int:
    return max(1, min(entries, int(width_in // LEGEND_COLUMN)))


def grid(n: int, *, ncols: int = 3, panel=(4.4, 3.5), legend_entries: int = 6, title: str = ""):
    """A figure of ``n`` panels in rows of ``ncols`` with a band at the bottom sized for a
    figure legend of ``legend_entries`` (outside every panel, so it covers no data). Returns
    (fig, axes list)."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    w = max(panel[0] * ncols, MIN_WIDTH)
    legend_rows = math.ceil(legend_entries / legend_columns(w, legend_entries))
    band = 0.35 + 0.2 * legend_rows  # inches for the legend
    top = 0.45 if title else 0.15
    h = panel[1] * nrows + band + top
    fig, axes = plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False)
    used = panel[0] * ncols  # panels keep their width; a wider figure centres them
    side = (w - used) / 2
    fig.subplots_adjust(left=(side + 0.7) / w, right=1 - (side + 0.2) / w, bottom=(band + 0.45) / h, top=1 - (top + 0.25) / h,
                        wspace=0.32 * 4.4 / panel[0], hspace=0.55)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11, y=1 - 0.12 / h, va="top")
    return fig, flat[:n]


def figure_legend(fig, handles: list, labels: list[str], ncol: int | None = None) -> None:
    """The legend in the band :func:`grid` keeps below the panels."""
    if not handles:
        return
    ncol = ncol or legend_columns(fig.get_size_inches()[0], len(labels))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=7.5, frameon=False,
               bbox_to_anchor=(0.5, 0.005))


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _drawn_once(fig):
    """The figure's renderer, the figure drawn on the first call only: what label placement
    measures (axes boxes, titles, the labels it tries) does not move when another panel's labels
    or limits change, and a draw per panel made a figure of n panels cost n full draws (issue 62
    part 3: two thirds of `analyze`'s figure time on a paper-sized store)."""
    if not getattr(fig, "_cliffsweep_drawn", False):
        fig.canvas.draw()
        fig._cliffsweep_drawn = True
    return fig.canvas.get_renderer()


def place_labels(ax, items: list[tuple[float, float, str, str]], obstacles: list[Bbox] | None = None,
                 fontsize: float = 6.5) -> int:
    """Annotate each (x, y, text, colour) next to its point at the first of eight offsets
    whose text box stays inside the axes and overlaps no placed label, no marker (``obstacles``:
    display boxes, :func:`marker_boxes`) and no axes title; a label with no free place is left
    out (its point is still drawn, and the report's table lists it). Limits must be final.
    Returns how many labels were left out."""
    fig = ax.figure
    renderer = _drawn_once(fig)
    taken = list(obstacles or [])
    title = ax.title.get_window_extent(renderer)
    if ax.title.get_text():
        taken.append(title)
    inside = ax.get_window_extent(renderer)
    offsets = [(4, 3), (4, -10), (-4, 3), (-4, -10), (0, 7), (0, -14), (9, -3), (-9, -3)]
    dpi_scale = fig.dpi / 72.0
    skipped = 0
    for x, y, text, color in items:
        placed = False
        for dx, dy in offsets:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            t = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
                            color=color, ha=ha, va="bottom", annotation_clip=True)
            box = t.get_window_extent(renderer).expanded(1.0, 1.0)
            ok = (box.x0 >= inside.x0 + 1 * dpi_scale and box.x1 <= inside.x1 - 1 * dpi_scale and box.y0 >= inside.y0
                  and box.y1 <= inside.y1 and not any(box.overlaps(b) for b in taken))
            if ok:
                taken.append(box)
                placed = True
                break
            t.remove()
        skipped += not placed
    return skipped


def label_points(ax, items: list[tuple[float, float, str, str]], markers: list[tuple[float, float]],
                 margin: float = 0.08, marker_pt: float = 8.0) -> int:
    """Fix the axes' limits (data plus ``margin``) and :func:`place_labels` the ``items`` clear
    of the markers drawn at ``markers`` (data x, y). Returns how many labels were left out."""
    ax.margins(margin)
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())
    if not items:
        return 0
    xs, ys = zip(*markers)
    return place_labels(ax, items, marker_boxes(ax, xs, ys, marker_pt))


def marker_boxes(ax, xs, ys, size_pt: float = 7.0) -> list[Bbox]:
    """Display boxes of markers of about ``size_pt`` points drawn at data (xs, ys)."""
    half = size_pt / 2 * ax.figure.dpi / 72.0
    pts = ax.transData.transform(np.column_stack([np.asarray(xs, float), np.asarray(ys, float)]))
    return [Bbox([[px - half, py - half], [px + half, py + half]]) for px, py in pts]


def text_boxes(fig) -> dict[str, list[tuple[str, Bbox]]]:
    """Every visible text of the figure by kind, with its display box: ``labels`` (the
    annotations :func:`place_labels` put), ``titles``, ``axis`` (axis labels and tick labels),
    ``legend`` (legend texts). What the layout test checks for overlaps."""
    renderer = _renderer(fig)
    out: dict[str, list] = {"labels": [], "titles": [], "axis": [], "legend": []}
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for t in ax.texts:
            if t.get_visible() and t.get_text():
                out["labels"].append((t.get_text(), t.get_window_extent(renderer)))
        if ax.title.get_text():
            out["titles"].append((ax.title.get_text(), ax.title.get_window_extent(renderer)))
        for lab in (ax.xaxis.label, ax.yaxis.label):
            if lab.get_text():
                out["axis"].append((lab.get_text(), lab.get_window_extent(renderer)))
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():  # only the ticks drawn: inside the view limits
                lab = tick.label1
                if lab.get_visible() and lab.get_text() and lo - 1e-12 <= tick.get_loc() <= hi + 1e-12:
                    out["axis"].append((lab.get_text(), lab.get_window_extent(renderer)))
    if fig._suptitle is not None and fig._suptitle.get_text():
        out["titles"].append((fig._suptitle.get_text(), fig._suptitle.get_window_extent(renderer)))
    for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        for t in leg.get_texts():
            out["legend"].append((t.get_text(), t.get_window_extent(renderer)))
    return out


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap: a label with any other text, a title with a title,
    a legend text with any label or axis text. Empty for a readable figure."""
    boxes = text_boxes(fig)
    pairs = []
    checks = [("labels", "labels"), ("labels", "titles"), ("labels", "axis"), ("labels", "legend"),
              ("titles", "titles"), ("legend", "axis"), ("legend", "titles"), ("axis", "axis")]
    for a, b in checks:
        for i, (ta, ba) in enumerate(boxes[a]):
            for j, (tb, bb) in enumerate(boxes[b]):
                if (a == b and j <= i) or not ba.overlaps(bb):
                    continue
                # touching edges (shared pixel row) are not an overlap a reader sees
                inter = Bbox.intersection(ba, bb)
                if inter is not None and inter.width > 0.5 and inter.height > 0.5:
                    pairs.append((f"{a}:{ta}", f"{b}:{tb}"))
    return pairs


def texts_outside(fig) -> list[str]:
    """Texts whose box leaves the figure (cut off in the saved image). Empty when all fit."""
    fig_box = fig.bbox
    return [f"{kind}:{t}" for kind, items in text_boxes(fig).items() for t, b in items
            if b.x0 < fig_box.x0 - 1 or b.x1 > fig_box.x1 + 1 or b.y0 < fig_box.y0 - 1 or b.y1 > fig_box.y1 + 1]
