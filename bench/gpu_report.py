"""The GPU check's report (bench/gpu_check.sh): its stages' JSON files in one `gpu_check.json` and
a markdown page `gpu_check.md` with the tables and issue 23's acceptance checks.

    python bench/gpu_report.py gpu-check/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT_RECIPE = "fsdp_bf16+liger"
TARGET_MODEL, TARGET_MFU = "Qwen/Qwen2.5-1.5B-Instruct", 0.40


def load(folder: Path) -> dict:
    parts = {}
    for stage in ("fused", "train_small", "train_large", "stats"):
        f = folder / f"{stage}.json"
        if f.exists():
            parts[stage] = json.loads(f.read_text())
    return parts


def _gb(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def training_table(rows: list[dict]) -> list[str]:
    out = ["| model | recipe | runs as | MFU | tokens/s | peak GB | plan GB |", "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if "skipped" in r or "error" in r:
            out.append(f"| {r['model']} | {r['recipe']} | {r.get('skipped') or 'ERROR ' + r['error'][:80]} | | | | "
                       f"{_gb(r['plan_memory_gb'])} |")
            continue
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        out.append(f"| {r['model']} | {r['recipe']} | {r['compute']} | {mfu} | {r['train_tokens_per_s']:,.0f} | "
                   f"{_gb(r['peak_memory_gb'])} | {_gb(r['plan_memory_gb'])} |")
    return out


def checks(parts: dict, train: list[dict]) -> list[str]:
    out = []
    target = next((r for r in train if r["model"] == TARGET_MODEL and r.get("recipe") == DEFAULT_RECIPE
                   and r.get("mfu") is not None), None)
    out.append(f"- {TARGET_MODEL}, default recipe ({DEFAULT_RECIPE}), MFU >= {TARGET_MFU:.0%}: "
               + ("not measured" if target is None else f"{target['mfu']:.1%} "
                  f"({'met' if target['mfu'] >= TARGET_MFU else 'NOT met'})"))
    fused = parts.get("fused", {})
    failed = sorted(m for m, r in fused.items() if not r["pass"])
    out.append(f"- every method's fused check: {len(fused) - len(failed)}/{len(fused)} pass"
               + (f" (failing: {', '.join(failed)})" if failed else ""))
    for s in parts.get("stats", {}).get("rows", []):
        peak, train_peak = s.get("stats_peak_memory_gb"), s.get("train_peak_memory_gb")
        if peak is None or train_peak is None:
            continue
        out.append(f"- statistics {s['method']} on {s['model']}: peak {peak:.1f} GB vs training's {train_peak:.1f} GB "
                   f"({'<=' if peak <= train_peak else 'ABOVE'})")
    return out


def report(folder: Path) -> str:
    parts = load(folder)
    train = [r for s in ("train_small", "train_large") for r in parts.get(s, {}).get("rows", [])]
    # statistics beside the default recipe's training peak of the same model
    peaks = {r["model"]: r.get("peak_memory_gb") for r in train if r.get("recipe") == DEFAULT_RECIPE}
    for s in parts.get("stats", {}).get("rows", []):
        s["train_peak_memory_gb"] = peaks.get(s["model"])
    gpu = next((r["gpu"] for r in train if "gpu" in r), "unknown")
    date = next((r["date"] for r in train if "date" in r), "unknown")
    md = [f"# GPU check ({gpu}, {date})", "", "## Acceptance (issue 23)", *checks(parts, train), "",
          "## Training, per recipe", *training_table(train), "", "## Fused vs unfused, per method",
          "| method | pass | loss rel diff | gradient rel diff | fused calls |", "|---|---|---:|---:|---:|"]
    for m, r in sorted(parts.get("fused", {}).items()):
        md.append(f"| {m} | {'yes' if r['pass'] else 'NO'} | {r['loss_rel_diff']:.1e} | {r['grad_rel_diff']:.1e} | "
                  f"{r['fused_calls']}{' (' + r['note'] + ')' if r['note'] else ''} |")
    md += ["", "## Statistics' peak memory beside training's (default recipe)",
           "| model | method | seconds | peak GB | training peak GB |", "|---|---|---:|---:|---:|"]
    for s in parts.get("stats", {}).get("rows", []):
        if "error" in s:
            md.append(f"| {s['model']} | {s['method']} | ERROR {s['error'][:80]} | | |")
        else:
            md.append(f"| {s['model']} | {s['method']} | {s['stats_seconds']:.1f} | {_gb(s['stats_peak_memory_gb'])} | "
                      f"{_gb(s['train_peak_memory_gb'])} |")
    (folder / "gpu_check.json").write_text(json.dumps({"gpu": gpu, "date": date, **parts}, indent=2))
    text = "\n".join(md) + "\n"
    (folder / "gpu_check.md").write_text(text)
    return text


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
