"""`cliffsweep submit` and `cliffsweep logs`: run a sweep on a running Ray cluster through the
Ray Jobs API, and read what it prints, from a laptop (docs/cluster.md).

    cliffsweep submit SWEEP.yaml --address http://127.0.0.1:8265 [--env NAME ...]   -> job id
    cliffsweep logs JOB_ID --address http://127.0.0.1:8265 [--follow]
    cliffsweep submit --to slurm SWEEP.yaml [--array N] [--time ...] [--dry-run]    -> Slurm job id
                                                                       (cliffsweep/slurm.py)

Each target is a class behind `Target` (below), named in TARGETS: a new scheduler is one module.

The job's entrypoint is `cliffsweep run sweep.yaml`, the same command a KubeRay RayJob runs: it
resumes from the store, so submitting the same sweep again (or a RayJob retry on a new cluster)
continues where the store stands.

Credentials travel by *name*: `--env AWS_SECRET_ACCESS_KEY` copies that variable's value from the
submitting shell into the job's runtime environment. Values never go into the spec, the store,
the entrypoint or anything this module prints; the entrypoint reports only whether each named
variable arrived. Ray itself keeps the runtime environment, values included, in its job table
(authenticated Jobs API clients read it; the dashboard masks `env_vars` for browsers only) and
prints it in the head's runtime_env_agent.log: so the Jobs endpoint stays cluster-internal with
token authentication on, and cloud identities beat passed keys (docs/cluster.md "Security").
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from cliffsweep.sweep.spec import SweepSpec

from cliffsweep.orchestrator.specfile import load_spec

SPEC_NAME = "sweep.yaml"
"""The sweep file's name inside the job's working directory."""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Code = Literal["local", "installed"]
"""local: upload this machine's `cliffsweep` package with the job (Ray `py_modules`), so the
cluster runs the code you have; installed: use the package in the cluster's image."""


class SubmitError(ValueError):
    """A sweep or an environment that cannot be submitted as it is; lists every problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("cannot submit:\n" + "\n".join(f"  - {p}" for p in problems))


def _reserved_env() -> set[str]:
    """Variables the sweep's own `ray.init` sets: Ray refuses a job whose runtime env sets
    one of them too (a merge conflict), so they cannot be passed."""
    from cliffsweep.orchestrator.driver import LOCAL_RAY_ENV, RAY_ENV

    return set(RAY_ENV) | set(LOCAL_RAY_ENV) | {"PYTHONPATH", "RAY_ADDRESS"}


def _is_local_relative(uri: str) -> bool:
    return "://" not in uri and not os.path.isabs(os.path.expanduser(uri))


def spec_problems(spec: SweepSpec) -> list[str]:
    """Why a valid sweep cannot run as a job: it must join the cluster, and every location it
    writes must mean the same thing on the cluster as here (a relative path would land in the
    job's temporary working directory on the head node and vanish with it)."""
    problems = []
    if not spec.ray_address:
        problems.append("ray_address: set `ray_address: auto` so the job joins the cluster it runs on "
                        "(without it the sweep would start a second Ray inside the job)")
    for name, uri in (("store", spec.store_uri), ("checkpoints", spec.checkpoints)):
        if uri and _is_local_relative(uri):
            problems.append(f"{name}: {uri!r} is relative; use object storage (s3://..., gs://...) "
                            "or an absolute path that every node shares")
        if uri and re.search(r"://[^/]*@", uri):
            problems.append(f"{name}: the URI holds credentials (user:secret@); pass them with --env instead")
    return problems


def env_problems(names: list[str], environ: Mapping[str, str]) -> list[str]:
    """Names that cannot be passed: malformed, reserved, or unset in the submitting shell
    (an unset credential would only fail later, on the cluster)."""
    problems = []
    reserved = _reserved_env()
    for n in names:
        if "=" in n:
            problems.append(f"--env {n.split('=', 1)[0]}=...: pass a variable's NAME only; "
                            "its value is read from this shell, so it never appears in a command line")
        elif not ENV_NAME.match(n):
            problems.append(f"--env {n!r}: not a variable name")
        elif n in reserved:
            problems.append(f"--env {n}: set by cliffsweep itself on the cluster; cannot be passed")
        elif n not in environ:
            problems.append(f"--env {n}: not set in this shell")
    return problems


def entrypoint(env_names: list[str]) -> str:
    """The job's shell command: report (by name only) which passed variables arrived, refuse
    to start without one, then run the sweep. Names are checked by `env_problems`, so they
    are safe in a shell word."""
    checks = [f'if [ -n "${{{n}+x}}" ]; then echo "cliffsweep job: {n} is set"; '
              f'else echo "cliffsweep job: {n} is missing" >&2; exit 2; fi' for n in env_names]
    return "; ".join(checks + [f"exec cliffsweep run {SPEC_NAME}"])


@dataclass(frozen=True)
class JobPlan:
    """What `submit` sends. `env` holds credential values: kept out of repr."""

    entrypoint: str
    working_dir: str
    py_modules: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    metadata: dict[str, str]

    def runtime_env(self) -> dict:
        env: dict = {"working_dir": self.working_dir, "excludes": ["__pycache__", "*.pyc"]}
        if self.py_modules:
            env["py_modules"] = list(self.py_modules)
        if self.env:
            env["env_vars"] = dict(self.env)
        return env


def plan_job(spec_path: str, staging: Path, env_names: list[str], code: Code,
             environ: Mapping[str, str]) -> JobPlan:
    """Validate the sweep and the environment (every problem at once), then stage the sweep
    file as the job's whole working directory."""
    spec = load_spec(spec_path)
    problems = spec_problems(spec) + env_problems(env_names, environ)
    if problems:
        raise SubmitError(problems)
    shutil.copyfile(spec_path, staging / SPEC_NAME)
    import cliffsweep

    modules = (str(Path(cliffsweep.__file__).parent),) if code == "local" else ()
    return JobPlan(entrypoint=entrypoint(env_names), working_dir=str(staging), py_modules=modules,
                   env={n: environ[n] for n in env_names},
                   metadata={"cliffsweep_sweep": spec.name, "cliffsweep_store": spec.store_uri})


def client(address: str | None, token_env: str | None = None):
    """A Jobs API client. `token_env` names the variable holding the cluster's Ray auth token
    (sent as a bearer token). Without it Ray's own client settings apply: with
    RAY_AUTH_MODE=token it sends RAY_AUTH_TOKEN, the file at RAY_AUTH_TOKEN_PATH, or
    ~/.ray/auth_token."""
    from ray.job_submission import JobSubmissionClient

    headers = None
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise SubmitError([f"--token-env {token_env}: not set in this shell"])
        headers = {"Authorization": f"Bearer {token}"}
    return JobSubmissionClient(address, headers=headers)


def submit(spec_path: str, address: str | None, env_names: list[str] | None = None, code: Code = "local",
           token_env: str | None = None, job_id: str | None = None,
           environ: Mapping[str, str] | None = None) -> str:
    """Submit the sweep as a Ray job; returns its id. A job id already used is refused by Ray,
    so `--job-id` makes a retried submission safe."""
    environ = os.environ if environ is None else environ
    staging = Path(tempfile.mkdtemp(prefix="cliffsweep-submit-"))
    try:
        plan = plan_job(spec_path, staging, list(env_names or []), code, environ)
        c = client(address, token_env)
        # Ray uploads working_dir and py_modules during submit_job: the staging dir can go after.
        return c.submit_job(entrypoint=plan.entrypoint, runtime_env=plan.runtime_env(),
                            submission_id=job_id or f"cliffsweep-{plan.metadata['cliffsweep_sweep']}-{uuid.uuid4().hex[:8]}",
                            metadata=plan.metadata)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def wait(job_id: str, address: str | None, token_env: str | None = None, timeout_s: float = 3600,
         poll_s: float = 2.0) -> str:
    """Block until the job ends; returns its final status name."""
    c = client(address, token_env)
    deadline = time.monotonic() + timeout_s
    while True:
        status = str(c.get_job_status(job_id).value)
        if status in TERMINAL:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f} s")
        time.sleep(poll_s)


def logs(job_id: str, address: str | None, token_env: str | None = None, follow: bool = False,
         out=None) -> str:
    """Write the job's logs to `out` (stdout by default); with `follow`, stream them until the
    job ends. Returns the job's status afterwards."""
    import asyncio
    import sys

    out = out or sys.stdout
    c = client(address, token_env)
    if follow:
        async def _tail() -> None:
            async for chunk in c.tail_job_logs(job_id):
                out.write(chunk)
                out.flush()

        asyncio.run(_tail())
    else:
        out.write(c.get_job_logs(job_id))
    return str(c.get_job_status(job_id).value)


# --- where a sweep can go: one target per scheduler (issue 60 part 6) -------------------------

class Target(Protocol):
    """Where `cliffsweep submit` sends a sweep. A new scheduler (PBS, LSF) is one class with these
    two methods, named in TARGETS (or in an installed package's `cliffsweep.submit_targets`
    entry points), plus its tests; `submit --help` lists it with its own flags."""

    help: str
    """One line for `submit --help`."""

    def add_arguments(self, group) -> None:
        """This target's own flags, on its argument group of `submit`."""

    def submit(self, args) -> int:
        """Send `args.spec` (and this target's flags); the exit status."""


TARGETS = {"ray": "cliffsweep.submit:RayJobs", "slurm": "cliffsweep.slurm:SlurmTarget"}
"""name -> "module:attribute" of each target (registry.py)."""
TARGET_GROUP = "cliffsweep.submit_targets"


def targets() -> dict[str, str]:
    from cliffsweep.registry import table_of

    return table_of(TARGETS, TARGET_GROUP)


def target(name: str) -> Target:
    from cliffsweep.registry import lookup

    return lookup(targets(), name, "submit target", TARGET_GROUP)()


class RayJobs:
    help = "a running Ray cluster, through its Jobs API (prints the job id)"

    def add_arguments(self, group) -> None:
        group.add_argument("--address", **ADDRESS)
        group.add_argument("--env", action="append", default=[], metavar="NAME",
                           help="pass this variable from this shell to the job, by name (repeatable)")
        group.add_argument("--code", choices=["local", "installed"], default="local",
                           help="local: upload this cliffsweep package with the job; installed: use the image's")
        group.add_argument("--token-env", **TOKEN)
        group.add_argument("--job-id", help="submission id (Ray refuses a duplicate, so a retried submit is safe)")

    def submit(self, args) -> int:
        import sys

        try:
            job = submit(args.spec, args.address, args.env, args.code, args.token_env, args.job_id)
        except SubmitError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        where = f" --address {args.address}" if args.address else ""
        print(f"submitted; follow it with: cliffsweep logs {job}{where} --follow", file=sys.stderr)
        print(job)  # alone on stdout: JOB=$(cliffsweep submit ...)
        return 0


# --- the two subcommands (cli.py registers them) ---------------------------------------------

def cmd_submit(args) -> int:
    return target(args.to).submit(args)


def cmd_logs(args) -> int:
    import sys

    try:
        status = logs(args.job, args.address, args.token_env, follow=args.follow)
    except SubmitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"\njob {args.job}: {status}", file=sys.stderr)
    return 1 if status in ("FAILED", "STOPPED") else 0


ADDRESS = dict(help="the cluster's Jobs API, e.g. http://127.0.0.1:8265 through a port-forward "
                    "(default: Ray's own RAY_API_SERVER_ADDRESS or RAY_ADDRESS)")
TOKEN = dict(metavar="NAME", help="name of the variable that holds the cluster's Ray auth token")


def add_parsers(sub) -> None:
    names = sorted(targets())
    j = sub.add_parser("submit", help="run a sweep on a cluster: " + ", ".join(names),
                       description="Send a sweep to one of these targets: " + "; ".join(
                           f"{n}: {target(n).help}" for n in names) + ".")
    j.add_argument("spec", help="sweep YAML (needs a store every node reaches; for ray, ray_address: auto)")
    j.add_argument("--to", choices=names, default="ray", help="where the sweep goes (default: ray)")
    j.add_argument("--slurm", dest="to", action="store_const", const="slurm", help="the same as --to slurm")
    for n in names:
        target(n).add_arguments(j.add_argument_group(f"--to {n}", target(n).help))
    j.set_defaults(fn=cmd_submit)

    lg = sub.add_parser("logs", help="print a submitted job's output and status")
    lg.add_argument("job")
    lg.add_argument("--address", **ADDRESS)
    lg.add_argument("--token-env", **TOKEN)
    lg.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    lg.set_defaults(fn=cmd_logs)
