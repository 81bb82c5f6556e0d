"""`cliffsweep dashboard`'s arguments (wired into cliffsweep/cli.py), and the dashboard that
`cliffsweep run --dashboard` starts beside its sweep: its own process, so that serving never
takes the driver's time."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys

DEFAULT_PORT = 8765


DESCRIPTION = ("Serve a page that shows a sweep as it runs: trials over the grid, evaluations, errors, the "
               "evaluator pool, time and cost, and per model the frontier as it fills in with each series' "
               "regime; click a point for its trial. It reads only the store(s), local or s3://; several are "
               "shown as one, as `analyze` takes them.")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("dashboard", help="a live page of a sweep in the browser, read from its store(s)",
                              description=DESCRIPTION)
    _arguments(p)
    return p


def main(argv: list[str]) -> int:
    """`cliffsweep dashboard ARGS` (cliffsweep/cli.py hands them here), parsed by this command's own
    parser: the whole command line's would import every command's modules, pandas among them,
    before the reader processes are forked (`run`)."""
    p = argparse.ArgumentParser(prog="cliffsweep dashboard", description=DESCRIPTION)
    _arguments(p)
    return run(p.parse_args(argv))


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", nargs="+", help="store root(s) (folder or URI such as s3://bucket/prefix)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only). Any other address makes "
                        "the page reachable from other hosts: every request then needs a token, printed in the "
                        "address (--token sets it)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--token", default=None, help="the token other hosts must give (default: a random one)")
    p.add_argument("--n-boot", type=int, default=200,
                   help="bootstrap replicates of each regime's confidence, as analyze's (0: none)")
    p.add_argument("--wait", action="store_true",
                   help="start even if a store does not exist yet (the page says so until it appears)")


def run(args) -> int:
    # pandas-free imports only until the first read is begun: the reader processes are forked from
    # this process before its first thread and parse the stores' files while it imports pandas
    # and the server (0.25 s of its CPU; docs/benchmarks.md, fifth round)
    from cliffsweep.storage import diskcache
    from cliffsweep.storage.tablecache import GRID_PASS, TablesRead, open_caches
    from cliffsweep.storage.parquetfiles import reader_pool

    readers = reader_pool()
    caches = open_caches(args.store, diskcache.CACHE_DIR, readers)
    missing = [u for u in args.store if u not in caches]
    if missing and not args.wait:
        readers.close()
        from cliffsweep.storage.store import SPEC_FILE

        print(f"error: no cliffsweep store at {', '.join(missing)} (no {SPEC_FILE} there; `cliffsweep run` writes one "
              "when a sweep starts; --wait serves the page until it appears)", file=sys.stderr)
        return 2
    first = TablesRead(list(caches.values()), GRID_PASS, list(caches))
    from cliffsweep.dashboard.app import serve
    from cliffsweep.dashboard.refresh import Refresher, Reading

    board = Refresher(args.store, Reading(n_boot=args.n_boot), readers=readers, first=first)
    # uvicorn shuts down on SIGTERM, then raises it again: this handler makes that an exit that
    # runs the `finally` below (the reader processes closed, not left to warn of leaked locks)
    signal.signal(signal.SIGTERM, _exit_143)
    try:
        serve(args.store, args.host, args.port, args.token, board)
    except OSError as e:  # the port taken, most often
        print(f"error: cannot serve on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        board.stop()
    return 0


def _exit_143(signum, frame) -> None:
    raise SystemExit(128 + signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_beside(store_uri: str, port: int | None) -> tuple[subprocess.Popen, str]:
    """`cliffsweep run --dashboard`: the dashboard of `store_uri` in a process of its own (niced:
    the sweep comes first), waiting for the store if the run has not made it yet."""
    import os

    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "dashboard", store_uri, "--port", str(port),
                             "--wait"], stdout=subprocess.DEVNULL, preexec_fn=lambda: os.nice(5))
    return proc, f"http://127.0.0.1:{port}/"
