"""A simulated schedule as a researcher reads it: the makespan against the ideal, GPU-hours by
use, and a figure of the cluster's GPUs over time by use (training, evaluating, statistics, idle
while work waits, idle with nothing to do)."""

from __future__ import annotations

from cliffsweep.simulate.engine import KINDS, Result

USES = (*KINDS, "idle, work waiting", "idle, nothing to do")
COLOURS = {"training": "#1f77b4", "evaluating": "#ff7f0e", "statistics": "#9467bd",
           "idle, work waiting": "#7f7f7f", "idle, nothing to do": "#d9d9d9"}


def utilisation(r: Result, buckets: int = 200) -> tuple[list[float], dict[str, list[float]]]:
    """Mean GPUs per use in each of `buckets` equal slices of the makespan (their midpoints, s)."""
    width = r.makespan / buckets if r.makespan > 0 else 1.0
    out = {u: [0.0] * buckets for u in USES}
    waiting = [0.0] * buckets  # share of each slice during which some work waited for a GPU

    def spread(start: float, end: float, add) -> None:
        first, last = int(start // width), min(buckets - 1, int(end // width))
        for b in range(first, last + 1):
            overlap = min(end, (b + 1) * width) - max(start, b * width)
            if overlap > 0:
                add(b, overlap / width)

    for start, end, gpus, kind in r.timeline.busy:
        spread(start, end, lambda b, f, k=kind, g=gpus: out[k].__setitem__(b, out[k][b] + g * f))
    for start, end in merged(r.timeline.waiting):
        spread(start, end, lambda b, f: waiting.__setitem__(b, waiting[b] + f))
    for b in range(buckets):
        idle = max(0.0, r.cluster.gpus - sum(out[k][b] for k in KINDS))
        share = min(1.0, waiting[b])
        out["idle, work waiting"][b] = idle * share
        out["idle, nothing to do"][b] = idle * (1 - share)
    return [(b + 0.5) * width for b in range(buckets)], out


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def gpu_hours_by_use(r: Result) -> dict[str, float]:
    times, use = utilisation(r)
    width = r.makespan / len(times) if times else 0.0
    return {u: sum(v) * width / 3600 for u, v in use.items()}


def text(name: str, r: Result) -> str:
    h = gpu_hours_by_use(r)
    total = r.cluster.gpus * r.makespan / 3600
    lines = [
        f"== {name}: {r.cluster.nodes} node(s) x {r.cluster.gpus_per_node} GPUs; {r.jobs} Train jobs of up to "
        f"{r.per_job} point(s), {r.concurrency} at once at most; evaluators hold {r.evaluator_gpus:g} GPUs",
        f"makespan {r.makespan / 3600:.2f} h; ideal {r.ideal / 3600:.2f} h (work {sum(r.work_gpu_s.values()) / 3600:.1f} "
        f"GPU-h / {r.cluster.gpus} GPUs = {sum(r.work_gpu_s.values()) / r.cluster.gpus / 3600:.2f} h; longest chain "
        f"{r.longest_chain / 60:.1f} min); makespan / ideal = {r.ratio:.2f}",
        "GPU-hours by use: " + ", ".join(f"{u} {h[u]:.1f} ({h[u] / total:.0%})" for u in USES),
    ]
    return "\n".join(lines)


def figure(results: list[tuple[str, Result]], path: str) -> None:
    """One panel per (name, result): GPUs over time (hours) by use, stacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.6 * len(results)), squeeze=False)
    for ax, (name, r) in zip(axes[:, 0], results):
        times, use = utilisation(r)
        ax.stackplot([t / 3600 for t in times], *[use[u] for u in USES], labels=USES,
                     colors=[COLOURS[u] for u in USES], step=None)
        ax.set_xlim(0, r.makespan / 3600)
        ax.set_ylim(0, r.cluster.gpus)
        ax.set_ylabel("GPUs")
        ax.set_title(f"{name}: makespan {r.makespan / 3600:.2f} h, ideal {r.ideal / 3600:.2f} h "
                     f"(ratio {r.ratio:.2f})", fontsize=9)
    axes[-1, 0].set_xlabel("hours")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(USES), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
