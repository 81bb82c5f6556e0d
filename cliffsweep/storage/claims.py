"""Claims: which of the drivers that share a store works which piece of it (issue 53).

Several `cliffsweep run FILE --join` (two Slurm array tasks, a university partition and a cloud
account) fill one store. The invariant this module keeps: **a piece of work (a trial's training
and the evaluation of its checkpoints, a model's base evaluation, a refinement round) is done by
the one driver that holds its claim**, and a claim passes to another driver only once its holder
is gone. A claim is a small file `_claims/<key>.json` naming its driver and when it last
renewed it:

- taken with a create-if-absent: local files `O_CREAT | O_EXCL`; S3 a PUT with
  `If-None-Match: *` (the tests' S3 server, moto 5.2, honours it); any other filesystem a write
  and a re-read of its token (two drivers in the same instant can both win there, as with the
  store's lease);
- renewed every RENEW_S by its holder (the store lease's timings, storage/lease.py) (S3: `If-Match` on the holder's own version, so a renewal
  never overwrites a claim another driver took over);
- free once its holder stopped renewing for the lease's TTL_S (killed, its machine lost), or at once where
  its holder ran on this machine and that process is gone; then taken over with a
  compare-and-swap: S3 `If-Match` on the stale version, local files an atomic rename of the stale
  file that only one driver can win (the loser, had it renamed a fresh claim, links it back);
- released by its holder when the work is done.

Each driver also keeps `_drivers/<token>.json` (who, since when, renewed like a claim) for
`status`, the dashboard and the plain `run` that refuses to share the store.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from cliffsweep.storage.lease import RENEW_S, holder_alive, pid_alive
from cliffsweep.storage.store import Store

CLAIMS = "_claims"
DRIVERS = "_drivers"


@dataclass(frozen=True)
class Driver:
    """One `cliffsweep run` process: the `driver` column of the trials it trains."""
    host: str
    pid: int
    started_at: float
    token: str

    @classmethod
    def this_process(cls) -> "Driver":
        return cls(socket.gethostname(), os.getpid(), time.time(), uuid.uuid4().hex)

    @property
    def label(self) -> str:
        return f"{self.host}:{self.pid}:{time.strftime('%Y%m%dT%H%M%S', time.gmtime(self.started_at))}"


def _body(driver: Driver, key: str, renewed_at: float) -> bytes:
    return json.dumps({**asdict(driver), "key": key, "renewed_at": renewed_at}).encode()


def live(rec: dict, now: float, host: str = socket.gethostname(), alive=pid_alive) -> bool:
    """Whether the claim or driver record `rec` still binds (the lease's rule, storage/lease.py)."""
    from cliffsweep.storage.lease import Holder

    try:
        h = Holder(rec["host"], int(rec["pid"]), float(rec["started_at"]), float(rec["renewed_at"]), rec["token"])
    except (KeyError, TypeError, ValueError):
        return False  # unreadable: binds nobody
    return holder_alive(h, now, host, alive)


class _Files:
    """Create-if-absent and compare-and-swap on a store's filesystem (module docstring): one
    class per kind of filesystem, chosen once (`files_for`)."""

    def __init__(self, store: Store):
        self.store = store

    def read(self, rel: str) -> tuple[bytes, str] | None:
        """(contents, version) or None. The version is what `swap` compares."""
        try:
            data = self.store.read_bytes(rel)
        except FileNotFoundError:
            return None
        return data, data.decode(errors="replace")

    def create(self, rel: str, data: bytes) -> bool:
        """Write `rel` only if absent; whether this call created it. Any filesystem: a write and a
        re-read (two drivers in the same instant can both win, as with the store's lease)."""
        if self.store.exists(rel):
            return False
        return self._write_and_check(rel, data)

    def swap(self, rel: str, data: bytes, version: str, own: bool = False) -> bool:
        """Replace `rel` with `data` only if it is still at `version`; whether it was replaced.
        `own`: a renewal of this driver's own claim, which must never be absent for an instant."""
        return self._write_and_check(rel, data)

    def delete(self, rel: str) -> None:
        try:
            self.store.fs.delete_file(f"{self.store.root}/{rel}")
        except FileNotFoundError:
            pass

    def _write_and_check(self, rel: str, data: bytes) -> bool:
        self.store.put_bytes(rel, data)
        got = self.read(rel)
        return got is not None and got[0] == data


class _LocalFiles(_Files):
    """A local folder: `os.link` creates with the whole contents at once (O_EXCL's effect), a
    rename moves a stale claim away (only one driver can), `os.replace` renews in place."""

    def _path(self, rel: str) -> str:
        return f"{self.store.root}/{rel}"

    def create(self, rel: str, data: bytes) -> bool:
        path = self._path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def swap(self, rel: str, data: bytes, version: str, own: bool = False) -> bool:
        path = self._path(rel)
        if own:  # a takeover moves the file away first: another driver could create it then
            got = self.read(rel)
            if got is None or got[1] != version:
                return False
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # atomic: the claim is never absent
            return True
        tomb = f"{path}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(path, tomb)  # only one driver can move a given file away
        except FileNotFoundError:
            return False
        with open(tomb, "rb") as f:
            moved = f.read()
        if moved.decode(errors="replace") != version:  # not the file we judged: put it back
            try:
                os.link(tomb, path)
            except FileExistsError:
                pass
            os.unlink(tomb)
            return False
        os.unlink(tomb)
        return self.create(rel, data)


class _S3Files(_Files):
    """S3: conditional PUTs (`If-None-Match: *` to create, `If-Match` on a version to swap)."""

    _LOST = ("PreconditionFailed", "ConditionalRequestConflict")

    def __init__(self, store: Store):
        import boto3

        super().__init__(store)
        self.client = boto3.client("s3")
        self.bucket, _, self.prefix = store.root.partition("/")

    def read(self, rel: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            got = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404"):
                return None
            raise
        return got["Body"].read(), got["ETag"]

    def create(self, rel: str, data: bytes) -> bool:
        return self._put(rel, data, self._LOST, IfNoneMatch="*")

    def swap(self, rel: str, data: bytes, version: str, own: bool = False) -> bool:
        return self._put(rel, data, self._LOST + ("NoSuchKey", "404"), IfMatch=version)

    def delete(self, rel: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")

    def _put(self, rel: str, data: bytes, lost: tuple[str, ...], **condition) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}", Body=data, **condition)
            return True
        except ClientError as e:
            if _code(e) in lost:
                return False
            raise


def _code(error) -> str | None:
    return error.response.get("Error", {}).get("Code")


def files_for(store: Store) -> _Files:
    """The claims' file operations for `store`'s filesystem."""
    if store.uri.startswith("s3://"):
        return _S3Files(store)
    if "://" not in store.uri or store.uri.startswith("file://"):
        return _LocalFiles(store)
    return _Files(store)


# --- the claim keys: formatted and parsed here only (issue 60) ------------------------------------
_TRIAL = "trial__"


def trial_key(tid: str) -> str:
    """The claim of a trial's training and of its checkpoints' evaluations."""
    return f"{_TRIAL}{tid}"


def base_key(model: str) -> str:
    """The claim of a model's base evaluation."""
    return f"base__{model}"


def round_key(verification: bool, model: str, series: str, epochs: int, max_steps: int | None, rnd: int) -> str:
    """The claim of one refinement round (or of one series' verification runs) of a series: one
    driver adds its trials."""
    kind = "verify" if verification else "round"
    return f"{kind}__{model}__{series}__e{epochs}__s{max_steps}__r{rnd}"


def trial_of(key: str) -> str | None:
    """The trial a claim key names; None for a base evaluation's or a round's."""
    return key[len(_TRIAL):] if key.startswith(_TRIAL) else None


def _key_file(key: str) -> str:
    return f"{CLAIMS}/{key.replace('/', '_')}.json"


class Claims:
    """This driver's claims on a store, renewed off this thread until `close`."""

    def __init__(self, store: Store, driver: Driver | None = None, shared: bool = True):
        """`shared`: the store may have other drivers (`run --join`); a plain run holds the
        store's lease and claims all the same (a joining driver finds its claims)."""
        self.store, self.driver, self.shared = store, driver or Driver.this_process(), shared
        self.files = files_for(store)
        self._held: dict[str, str] = {}  # key -> the version this driver wrote last
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.store.write_json(self._driver_file, self._driver_record(time.time()))
        self._thread = threading.Thread(target=self._renew_loop, name="cliffsweep-claims", daemon=True)
        self._thread.start()

    @property
    def _driver_file(self) -> str:
        return f"{DRIVERS}/{self.driver.token}.json"

    def _driver_record(self, at: float) -> dict:
        return {**asdict(self.driver), "label": self.driver.label, "renewed_at": at}

    # --- taking and giving back -----------------------------------------------------------------
    def take(self, key: str) -> bool:
        """Claim `key`: whether this driver holds it now (it may already have)."""
        with self._lock:
            if key in self._held:
                return True
        rel, now = _key_file(key), time.time()
        body = _body(self.driver, key, now)
        if self.files.create(rel, body):
            return self._hold(key, rel, body)
        got = self.files.read(rel)
        if got is None:  # released in between: try once more
            return self.files.create(rel, body) and self._hold(key, rel, body)
        data, version = got
        try:
            rec = json.loads(data)
        except ValueError:
            rec = {}
        if rec.get("token") == self.driver.token:
            return self._hold(key, rel, data)
        if live(rec, now):
            return False
        return self.files.swap(rel, body, version) and self._hold(key, rel, body)

    def _hold(self, key: str, rel: str, body: bytes) -> bool:
        got = self.files.read(rel)
        if got is None or got[0] != body:
            return False
        with self._lock:
            self._held[key] = got[1]
        return True

    def holds(self, key: str) -> bool:
        with self._lock:
            return key in self._held

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def release(self, key: str) -> None:
        """Give `key` back (its work is done, or this driver stops)."""
        with self._lock:
            version = self._held.pop(key, None)
        if version is None:
            return
        got = self.files.read(_key_file(key))
        if got is not None and got[1] == version:  # never another driver's claim
            self.files.delete(_key_file(key))

    def close(self) -> None:
        """Stop renewing, give every claim back, and leave the drivers' list; the last driver
        to leave also clears the claims of drivers that died holding them."""
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._held):
            self.release(key)
        try:
            self.store.fs.delete_file(f"{self.store.root}/{self._driver_file}")
        except (FileNotFoundError, OSError):
            pass
        now = time.time()
        if not live_drivers(self.store, now):
            for key, rec in read_claims(self.store).items():
                if not live(rec, now):  # a live one: a driver that joined this very moment
                    self.files.delete(_key_file(key))

    # --- renewal --------------------------------------------------------------------------------
    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                self.renew()
            except OSError:  # storage away for a while: the next round tries again
                pass

    def renew(self) -> None:
        now = time.time()
        self.store.write_json(self._driver_file, self._driver_record(now))
        with self._lock:
            held = dict(self._held)
        for key, version in held.items():
            rel, body = _key_file(key), _body(self.driver, key, now)
            if self.files.swap(rel, body, version, own=True):
                got = self.files.read(rel)
                with self._lock:
                    if key in self._held and got is not None:
                        self._held[key] = got[1]
            else:  # another driver took it over (this one was presumed gone): stop claiming it
                with self._lock:
                    self._held.pop(key, None)

    # --- what the others hold -------------------------------------------------------------------
    def others(self) -> dict[str, dict]:
        """Live claims of other drivers, by key."""
        return {k: rec for k, rec in read_claims(self.store).items()
                if rec.get("token") != self.driver.token and live(rec, time.time())}


def read_claims(store: Store) -> dict[str, dict]:
    """Every claim file's record, by key (unreadable ones left out)."""
    return {rec["key"]: rec for rec in _records(store, CLAIMS) if "key" in rec}


def live_drivers(store: Store, now: float | None = None) -> list[dict]:
    """The drivers whose records are live, oldest first."""
    now = time.time() if now is None else now
    return sorted((r for r in _records(store, DRIVERS) if live(r, now)), key=lambda r: r.get("started_at", 0))


def _records(store: Store, folder: str) -> list[dict]:
    import pyarrow.fs as pafs

    try:
        infos = store.fs.get_file_info(pafs.FileSelector(f"{store.root}/{folder}", allow_not_found=True))
    except OSError:
        return []
    out = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            out.append(json.loads(store.read_bytes(f"{folder}/{info.base_name}")))
        except (FileNotFoundError, ValueError):
            continue  # released or half-written meanwhile
    return out


def drivers_held(store: Store) -> list[dict]:
    """The live drivers and what each holds: label, trials (their ids), other claims (base
    evaluations, rounds), for `status` and the dashboard."""
    claims = read_claims(store)
    out = []
    for d in live_drivers(store):
        held = sorted(k for k, c in claims.items() if c.get("token") == d.get("token"))
        out.append({"label": d.get("label", d.get("host")), "since": d.get("started_at"),
                    "trials": [trial_of(k) for k in held if trial_of(k) is not None],
                    "other": [k for k in held if trial_of(k) is None]})
    return out
