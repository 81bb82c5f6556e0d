"""`cliffsweep`: the single entry point.

    cliffsweep run [SWEEP.yaml] [--store DIR]   run a sweep (default: the packaged toy sweep)
    cliffsweep validate SWEEP.yaml              list every problem, print the grid size, start nothing
    cliffsweep plan SWEEP.yaml [...]            budget: tokens, FLOPs, GPU-hours, checkpoints, memory
    cliffsweep simulate SWEEP.yaml [...]        its schedule on a GPU cluster: makespan, idle GPUs
    cliffsweep status STORE                     trials done / running / failed, evals done
    cliffsweep analyze STORE --out DIR          frontiers, regimes and the report
    cliffsweep dashboard STORE [--port N]       a live page of the sweep in the browser (run --dashboard: beside it)
    cliffsweep compact STORE [--repair]         fold the store's small files into one per table; set damaged ones aside
    cliffsweep export-tracking STORE            send the store to the sweep's trackers (MLflow, W&B, TensorBoard)
    cliffsweep submit SWEEP.yaml --address URL  run it on a Ray cluster (Jobs API); prints the job id
    cliffsweep logs JOB --address URL           the job's output (--follow: until it ends)
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

from cliffsweep.storage.health import StoreDamaged
from cliffsweep.storage.lease import StoreBusy
from cliffsweep.sweep.spec import SpecError

from cliffsweep.orchestrator.raystart import RAY_START_TIMEOUT_S
from cliffsweep.orchestrator.specfile import default_spec_path, load_spec


def _load(path: str | None, store: str | None, ray_address: str | None = None):
    import yaml

    from cliffsweep.orchestrator.specfile import parse_spec

    spec = load_spec(path or default_spec_path())
    if store or ray_address:
        data = spec.model_dump(exclude_unset=True)  # what the file set: defaults re-derive
        data.update({k: v for k, v in (("store", store), ("ray_address", ray_address)) if v})
        spec = parse_spec(yaml.safe_load(yaml.safe_dump(data)), str(path or default_spec_path()))
    return spec


def _load_all(path: str | None):
    """`_load`, and where the sweep file has problems, the ones of what it names on this machine
    too (model folders, data files: orchestrator/preflight.py), so that one `validate` lists every
    problem, not a second round once the first is fixed (issue 63). A YAML error stands alone."""
    from cliffsweep.orchestrator.preflight import local_problems
    from cliffsweep.sweep.spec import SpecError

    try:
        return _load(path, None)
    except SpecError as e:
        if path is None or any("not valid YAML" in p or "not UTF-8" in p for p in e.problems):
            raise
        extra = [p for p in local_problems(path) if p not in e.problems]
        raise SpecError(e.source, e.problems + extra) from None


def cmd_validate(args) -> int:
    from cliffsweep import hub
    from cliffsweep.sweep.grid import expand_grid

    from cliffsweep.orchestrator.preflight import check_preflight, model_path_problems

    hub.offline()  # asked once, before any client retries (hub.py)
    spec = _load_all(args.spec)
    check_preflight(spec, source=args.spec)
    grid = expand_grid(spec)
    print(f"{args.spec}: OK")
    for note in model_path_problems([(i, m.path) for i, m in enumerate(spec.models)])[1]:
        print(f"  note: {note}")
    _warn_tracking(spec)
    own = any(m.lrs for m in spec.methods)  # per-method lr axes: the product is not one lr count
    lrs = f"their own lrs ({len({t.lr for t in grid})} distinct)" if own else f"{len(spec.lrs)} lr(s)"
    series = {(t.method, json.dumps(t.method_params, sort_keys=True), t.optimizer) for t in grid}
    length = f"{len(spec.epochs)} epoch setting(s)" if spec.recipe.max_steps is None \
        else f"{len(spec.recipe.max_steps)} step budget(s)"
    print(f"  {len(grid)} trials = {len(spec.models)} model(s) x {len(series)} series "
          f"x {lrs} x {length} x {len(spec.seeds)} seed(s)")
    print(f"  + {len(spec.models)} base evaluation(s); {spec.eval.points_per_trial} eval point(s) per trial")
    if spec.refine is not None:
        from cliffsweep.orchestrator.refiner import max_refine_trials

        r = spec.refine
        print(f"  + up to {max_refine_trials(spec)} refinement trial(s) = {r.rounds} round(s) x "
              f"{r.points_per_round} lr(s) x {len({(t.model, t.series, t.epochs) for t in grid})} series "
              f"x {len(spec.seeds)} seed(s); a bracket stops at {r.target_ratio:g}x")
    if spec.verify is not None:
        from cliffsweep.analysis.verify import verify_seeds

        print(f"  + verification: seeds {verify_seeds(spec.seeds, spec.verify.seeds)} at the 2 lrs of each cliff or "
              f"close call (a drop within {spec.verify.margin:g} standard error(s) of cliff_drop): 2 x {spec.verify.seeds} trial(s) "
              f"per verified series")
    from cliffsweep.orchestrator.policies import one_driver_note
    from cliffsweep.orchestrator.refiner import max_refine_trials

    most = len(grid) + (max_refine_trials(spec) if spec.refine is not None else 0)
    note = one_driver_note(most, args.spec)
    if note:
        print(f"  note: {note}")
    print(f"  store: {spec.store_uri}")
    return 0


def _warn_tracking(spec) -> None:
    from cliffsweep.orchestrator.preflight import tracking_warnings

    for w in tracking_warnings(spec):
        print(f"warning: {w}", file=sys.stderr)


def cmd_plan(args) -> int:
    from cliffsweep.planner.archs import UnknownArch
    from cliffsweep.planner.text import plan_text
    from cliffsweep.planner.tokenstats import UnknownLengths

    from cliffsweep import hub

    hub.offline()  # asked once, before any client retries (hub.py)
    try:
        specs = [(path, load_spec(path)) for path in args.specs]
        print(plan_text(specs, args.mfu, args.bandwidth * 1e9, tuple(args.measured), args.gpu))
    except (UnknownArch, UnknownLengths) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_simulate(args) -> int:
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.planner.mfu import measured_rows
    from cliffsweep.planner.plan import plan_spec
    from cliffsweep.simulate.engine import Cluster, simulate
    from cliffsweep.simulate.report import figure, text

    from cliffsweep.planner.archs import UnknownArch
    from cliffsweep.planner.tokenstats import UnknownLengths

    from cliffsweep import hub

    hub.offline()  # asked once, before any client retries (hub.py)
    cluster = Cluster(args.nodes, args.gpus_per_node, args.cpus_per_node)
    results = []
    for path in args.specs:
        spec = load_spec(path)
        try:
            result = simulate(spec, plan_spec(spec, args.bandwidth * 1e9, measured_rows(tuple(args.measured))), cluster)
        except (UnknownArch, UnknownLengths, ValueError) as e:  # a refusal is a sentence, never a traceback
            print(f"error: {path}: cannot simulate it: {e}", file=sys.stderr)
            return 2
        results.append((path, result))
        print(text(path, result), flush=True)
    if args.figure:
        figure(results, args.figure)
        print(f"utilisation figure: {args.figure}")
    return 0


def cmd_run(args) -> int:
    from cliffsweep.orchestrator.driver import ClusterTooSmall, run_sweep
    from cliffsweep.orchestrator.raystart import RayStartError
    from cliffsweep.orchestrator.outcome import Exit, ending_text, exit_code
    from cliffsweep.orchestrator.summary import status_text, summary_text

    spec = _load(args.spec, args.store, args.ray_address)
    again = ["cliffsweep", *args.argv]
    print(f"cliffsweep: sweep {spec.name!r} -> {spec.store_uri}", flush=True)
    _warn_tracking(spec)
    board = None
    if args.dashboard:
        from cliffsweep.dashboard.cli import start_beside

        board, address = start_beside(spec.store_uri, args.dashboard_port)
        print(f"dashboard: {address}", flush=True)
    try:
        store = run_sweep(spec, eval_backend=args.eval_backend, retry_failed=args.retry_failed,
                          num_cpus=args.num_cpus, verbose=args.verbose, force=args.force,
                          node_ip=args.node_ip_address, start_timeout=args.ray_start_timeout, join=args.join)
    except (RayStartError, ClusterTooSmall) as e:
        print(f"error: {e}", file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:  # outside Tune (which stops its trials itself): nothing was running
        print("\nInterrupted (Ctrl-C or SIGTERM) before or after training; every finished result is in the "
              f"store. Run the same command again to resume:\n  {shlex.join(again)}", file=sys.stderr)
        return Exit.INTERRUPTED
    finally:
        if board is not None:
            board.terminate()
            try:  # its reader processes closed before the sweep's last lines, not after them
                board.wait(timeout=15)
            except subprocess.TimeoutExpired:
                board.kill()
            print(f"dashboard stopped with the sweep; to look on: cliffsweep dashboard {spec.store_uri}", flush=True)
    print("\nFinal learn / first retain task's score per lr (accuracy; a loss task's loss, lower is better; "
          "last checkpoint; lr 0 = base model):")
    print(summary_text(store))
    print("\n" + status_text(store))
    print(f"\nResults: {store.uri}  (cliffsweep status {store.uri}; cliffsweep analyze {store.uri} --out report/)")
    trials = store.read("trials")
    ending = ending_text(trials, again)
    if ending:
        print("\n" + ending)
    return exit_code(trials)


def cmd_compact(args) -> int:
    from cliffsweep.storage.health import ensure_readable, repair
    from cliffsweep.storage.store import SPEC_FILE, Store, is_store

    if not is_store(args.store):
        print(f"error: no cliffsweep store at {args.store} (no {SPEC_FILE} there)", file=sys.stderr)
        return 2
    store = Store(args.store)
    if args.repair:
        for d in repair(store):
            print(f"set aside: {d.path} ({d.problem})")
    ensure_readable(store)
    folded = store.compact()
    print(", ".join(f"{t}: {n} unit file(s) folded" for t, n in folded.items()))
    return 0


def cmd_export_tracking(args) -> int:
    from cliffsweep.tracking.sync import export

    tracking = None
    if args.tracking:
        import yaml

        from pathlib import Path

        from pydantic import ValidationError

        from cliffsweep.sweep.tracking import TrackingSpec

        try:
            tracking = TrackingSpec.model_validate(yaml.safe_load(Path(args.tracking).read_text()) or {})
        except ValidationError as e:
            raise SpecError(args.tracking, [f"tracking.{'.'.join(map(str, err['loc']))}: {err['msg']}"
                                            for err in e.errors()]) from None
    try:
        errors = export(args.store, tracking)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, err in errors.items():
        print(f"{name}: " + ("up to date with the store" if err is None else f"FAILED: {err}"))
    return 1 if any(errors.values()) else 0


def cmd_status(args) -> int:
    from cliffsweep.orchestrator.summary import status_text
    from cliffsweep.storage.store import SPEC_FILE, Store, is_store

    if not is_store(args.store):
        print(f"error: no cliffsweep store at {args.store} (no {SPEC_FILE} there; `cliffsweep run` "
              "writes one when a sweep starts)", file=sys.stderr)
        return 2
    from cliffsweep.storage.health import ensure_readable

    store = Store(args.store)
    ensure_readable(store)
    print(status_text(store))
    return 0


EXIT_CODES = """exit codes:
  0    every trial done (or diverged) and every checkpoint evaluated
  1    some trial failed or some evaluation failed for good; all else finished and is recorded
  2    input refused, nothing started (wrong sweep file, damaged store, another driver on it)
  130  interrupted (Ctrl-C or SIGTERM): unfinished trials back to pending; the same command resumes"""


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    p = argparse.ArgumentParser(prog="cliffsweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"cliffsweep {version('cliffsweep')}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a sweep (default: the packaged toy sweep)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    r.add_argument("spec", nargs="?", help="sweep YAML (default: cliffsweep/configs/toy.yaml)")
    r.add_argument("--store", help="override the store path/URI of the sweep file")
    r.add_argument("--ray-address", help="override the sweep file's ray_address: join this Ray cluster (a Slurm "
                                         "allocation's, clusters/slurm/allocation.sbatch)")
    r.add_argument("--eval-backend", choices=["vllm", "hf"], help="override eval.backend")
    r.add_argument("--retry-failed", action="store_true", help="re-run trials recorded as failed")
    r.add_argument("--num-cpus", type=int, help="CPUs of the local Ray cluster (default: all)")
    r.add_argument("-v", "--verbose", action="store_true",
                   help="show Tune's and Ray's own messages and worker logs here (default: the run's log file, "
                        "<store>/_logs/)")
    r.add_argument("--ray-start-timeout", type=float, default=RAY_START_TIMEOUT_S, metavar="SECONDS",
                   help="how long a Ray start may take before it counts as failed; it is retried once with 3x "
                        f"this (default: {RAY_START_TIMEOUT_S:g})")
    r.add_argument("--node-ip-address", default=None,
                   help="the address this run's own local Ray cluster gives its node (default: Ray's choice). Ray "
                        "2.60 listens on every interface whatever it is; its token authentication (on by default) "
                        "guards those ports. A sweep with ray_address joins its cluster as it is")
    r.add_argument("--force", action="store_true",
                   help="take the store's lease even if another driver seems to hold it (one known dead on "
                        "another machine; a dead one on this machine, or one silent for 90 s, is taken anyway)")
    r.add_argument("--join", action="store_true",
                   help="work beside the store's other drivers (another machine, a Slurm array task): each grid "
                        "point, base evaluation and refinement round is claimed before it is worked, and a driver's "
                        "claims pass to another once it is gone (docs/cluster.md); without it a store another "
                        "driver works is refused")
    r.add_argument("--dashboard", action="store_true",
                   help="serve the live dashboard of this sweep beside it on 127.0.0.1 and print its address "
                        "(it stops with the sweep; `cliffsweep dashboard STORE` serves it on its own)")
    r.add_argument("--dashboard-port", type=int, default=None, help="its port (default: a free one)")
    r.set_defaults(fn=cmd_run)

    v = sub.add_parser("validate", help="check a sweep file; start nothing")
    v.add_argument("spec")
    v.set_defaults(fn=cmd_validate)

    from cliffsweep.planner.mfu import DEFAULT_MFU

    pl = sub.add_parser("plan", help="what a sweep costs (tokens, FLOPs, GPU-hours, checkpoints, "
                                     "memory per GPU); offline, starts nothing")
    pl.add_argument("specs", nargs="+", help="sweep YAML(s); several are totalled (e.g. a study split by resources)")
    pl.add_argument("--mfu", type=float, default=None,
                    help="model FLOPs utilisation for GPU-hours, every model (default: measured per "
                         f"size and precision, plan.MEASURED_MFU; {DEFAULT_MFU} where none is)")
    pl.add_argument("--measured", action="append", default=[], metavar="JSON",
                    help="a GPU check's gpu_check.json (bench/gpu_check.sh): its MFU rows price training "
                         "(also read from cliffsweep/measured/*.json; repeatable)")
    pl.add_argument("--bandwidth", type=float, default=1.0,
                    help="GB/s to checkpoint storage, for the time GPUs wait on checkpoints and model reads (default 1)")
    pl.add_argument("--gpu", default=None, choices=["A100-80GB", "H100-SXM", "H200"],
                    help="the GPU type the table of what shares one GPU prices (default: the sweep's resources.gpu, "
                         "H100-SXM)")
    pl.set_defaults(fn=cmd_plan)

    sm = sub.add_parser("simulate", help="how long a sweep takes on a GPU cluster, and where its GPUs idle "
                                         "(a simulation of the driver's schedule, priced by plan); starts nothing")
    sm.add_argument("specs", nargs="+", help="sweep YAML(s), each simulated on its own")
    sm.add_argument("--nodes", type=int, default=4)
    sm.add_argument("--gpus-per-node", type=int, default=8)
    sm.add_argument("--cpus-per-node", type=int, default=96, help="(concurrency follows CPUs unless the spec caps it)")
    sm.add_argument("--bandwidth", type=float, default=1.0, help="GB/s to checkpoint storage, as plan's")
    sm.add_argument("--measured", action="append", default=[], metavar="JSON", help="GPU checks' MFU rows, as plan's")
    sm.add_argument("--figure", help="write the utilisation figure (PNG) here")
    sm.set_defaults(fn=cmd_simulate)

    c = sub.add_parser("compact", help="fold a store's small files into one per table (no sweep writing)")
    c.add_argument("store")
    c.add_argument("--repair", action="store_true",
                   help="first move every unreadable file to STORE/_damaged/<time>/ (nothing is deleted; every "
                        "readable row stays; the next run redoes what they held)")
    c.set_defaults(fn=cmd_compact)

    x = sub.add_parser("export-tracking", help="send a store to experiment trackers (what they missed)")
    x.add_argument("store")
    x.add_argument("--tracking", help="YAML of a tracking section to send to instead of the sweep file's own")
    x.set_defaults(fn=cmd_export_tracking)

    s = sub.add_parser("status", help="summarise a store")
    s.add_argument("store")
    s.set_defaults(fn=cmd_status)

    from cliffsweep.submit import add_parsers as add_cluster_commands

    add_cluster_commands(sub)

    from cliffsweep.analysis.cli import add_parser as add_analyze

    add_analyze(sub).set_defaults(fn=cmd_analyze)

    from cliffsweep.dashboard.cli import add_parser as add_dashboard, run as cmd_dashboard

    add_dashboard(sub).set_defaults(fn=cmd_dashboard)
    return p


def cmd_analyze(args) -> int:
    """The analysis (analysis/cli.py), then the regimes sent to each store's trackers."""
    from cliffsweep.tracking.sync import log_analysis

    def to_trackers(table) -> None:
        for store in args.store:  # each store's sweep file names its own trackers
            for name, err in log_analysis(store, table, args.out).items():
                print(f"{name}: " + ("regimes tagged, report attached" if err is None else f"not updated: {err[:300]}"))

    if args.top_up:
        for uri in args.store:
            code = top_up(uri, args)
            if code:
                return code
    return args.func(args, after=to_trackers)


def top_up(uri: str, args) -> int:
    """`analyze --top-up`: the store's own sweep run again (every trial is done, so nothing
    trains), whose end scores the checkpoints each verdict hinges on in full (orchestrator/topups.py)."""
    from cliffsweep.orchestrator.driver import ClusterTooSmall, run_sweep
    from cliffsweep.orchestrator.raystart import RayStartError
    from cliffsweep.storage.store import SPEC_FILE, Store, is_store
    from cliffsweep.sweep.spec import SweepSpec

    if not is_store(uri):
        print(f"error: no cliffsweep store at {uri} (no {SPEC_FILE} there)", file=sys.stderr)
        return 2
    data = Store(uri).read_json(SPEC_FILE)
    spec = SweepSpec.model_validate(dict(data, store=uri))
    if spec.eval.adaptive is None:
        print(f"{uri}: its sweep scored every checkpoint on every item (eval.adaptive off): nothing to top up")
        return 0
    print(f"{uri}: topping up the checkpoints each verdict hinges on ...", flush=True)
    try:
        run_sweep(spec)
    except (RayStartError, ClusterTooSmall) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["dashboard"]:  # before the other commands' parsers import pandas (dashboard/cli.main)
        from cliffsweep.dashboard.cli import main as dashboard

        return dashboard(argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv  # what a re-run repeats
    try:
        return args.fn(args)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (StoreDamaged, StoreBusy) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
