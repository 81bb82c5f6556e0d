"""The default toy sweep with the stopping rule off and on, side by side in one run (issue 51
part 6): evaluation seconds (the evaluators' own, summed from the `evals` rows), items scored,
wall time, and the regimes each reading gives.

    .venv/bin/python bench/bench_adaptive_sweep.py [--repeats 1] [--out /tmp/bench-adaptive]

Each repeat runs both sweeps one after the other (off first, then on), each into a fresh store,
as `cliffsweep run` does; the ratios are on/off within one repeat.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cliffsweep.analysis.frontiers import frontiers  # noqa: E402
from cliffsweep.analysis.points import load_store  # noqa: E402
from cliffsweep.storage.store import Store  # noqa: E402


def sweep_file(out: Path, adaptive: bool) -> Path:
    data = yaml.safe_load((ROOT / "cliffsweep/configs/toy.yaml").read_text())
    data["eval"]["adaptive"] = {"error": 0.05} if adaptive else False
    data["name"] = f"toy-{'on' if adaptive else 'off'}"
    path = out / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def measure(path: Path, store: Path) -> dict:
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "run", str(path), "--store", str(store)],
                          capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{path.name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    ev = Store(str(store)).read("evals")
    acc = ev[(ev["metric"] == "accuracy") & ~ev["trial_id"].str.endswith("-base")]
    table = frontiers(load_store(str(store)).points, n_boot=0)
    return {"wall_s": wall, "eval_s": float(acc["eval_seconds"].sum()), "items": int(acc["n"].sum()),
            "regimes": dict(zip(table["model"] + "/" + table["series"], table["regime"]))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-adaptive"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for r in range(args.repeats):
        got = {}
        for adaptive in (False, True):
            name = "on" if adaptive else "off"
            got[name] = measure(sweep_file(args.out, adaptive), args.out / f"store-{name}-{r}-{time.time_ns()}")
            g = got[name]
            print(f"repeat {r} rule {name}: wall {g['wall_s']:.0f} s, checkpoint evaluation {g['eval_s']:.0f} s, "
                  f"items {g['items']}", flush=True)
        on, off = got["on"], got["off"]
        print(f"repeat {r}: on/off wall {on['wall_s'] / off['wall_s']:.2f}, evaluation seconds "
              f"{on['eval_s'] / off['eval_s']:.2f}, items {on['items'] / off['items']:.2f}; regimes "
              f"{'identical' if on['regimes'] == off['regimes'] else 'DIFFER: ' + str((off['regimes'], on['regimes']))}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
