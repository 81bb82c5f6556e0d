"""Claims on a store shared by several drivers (issue 53, cliffsweep/storage/claims.py), on a local
folder and on a real S3 server (moto's, which honours If-None-Match and If-Match): one driver
holds a key at a time, however many race for it; a live holder keeps it; a gone one (a dead
process on this machine, or silent past the TTL) loses it to exactly one taker; a holder that
was taken over stops renewing; release never removes another driver's claim."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from cliffsweep.storage.claims import Claims, Driver, live_drivers, read_claims
from cliffsweep.storage.store import Store


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        yield Store(str(tmp_path / "store"))
        return
    from objectstore import s3_server

    with s3_server(tmp_path, relay=False):
        yield Store("s3://sweeps/shared")


def race(claimers: list[Claims], key: str) -> list[Claims]:
    """Every claimer takes `key` at the same moment (one thread each); those that got it."""
    won: list[Claims] = []
    barrier = threading.Barrier(len(claimers))

    def take(c: Claims) -> None:
        barrier.wait()
        if c.take(key):
            won.append(c)

    threads = [threading.Thread(target=take, args=(c,)) for c in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_one_key_one_holder_however_many_race(store):
    drivers = [Claims(store) for _ in range(6)]
    try:
        won = race(drivers, "trial__a")
        assert len(won) == 1, won
        holder = won[0]
        assert read_claims(store)["trial__a"]["token"] == holder.driver.token
        assert all(d.take("trial__a") == (d is holder) for d in drivers)  # a live holder keeps it
        assert holder.take("trial__a") and holder.holds("trial__a")
        other = next(d for d in drivers if d is not holder)
        other.release("trial__a")  # not its claim: nothing happens
        assert read_claims(store)["trial__a"]["token"] == holder.driver.token
        assert set(holder.others()) == set() and set(other.others()) == {"trial__a"}
        assert len(live_drivers(store)) == len(drivers)
        holder.release("trial__a")
        assert "trial__a" not in read_claims(store) and other.take("trial__a")
    finally:
        for d in drivers:
            d.close()
    assert read_claims(store) == {} and live_drivers(store) == []


def test_a_gone_holders_claim_passes_to_exactly_one_taker(store, monkeypatch):
    import socket

    gone = Claims(store, Driver(socket.gethostname(), dead_pid(), time.time(), "gone-token"))
    gone._stop.set()  # it renews no more, as a SIGKILLed driver
    assert gone.take("trial__b")
    takers = [Claims(store) for _ in range(4)]
    try:
        assert len(race(takers, "trial__b")) == 1  # a dead process on this machine: taken at once, by one
        # a holder on another machine is taken over only once silent past the TTL
        far = Claims(store, Driver("another-host", 1, time.time(), "far-token"))
        far._stop.set()
        assert far.take("trial__c")
        assert not takers[0].take("trial__c")
        monkeypatch.setattr("cliffsweep.storage.lease.TTL_S", 0.0)
        time.sleep(0.05)
        assert takers[0].take("trial__c")
        far.renew()  # the old holder comes back: its renewal must not take the claim back
        assert not far.holds("trial__c") and takers[0].holds("trial__c")
        assert json.loads(store.read_bytes("_claims/trial__c.json"))["token"] == takers[0].driver.token
    finally:
        for c in takers:
            c.close()
    assert read_claims(store) == {}  # the last driver to leave cleared the dead ones' claims too


def test_status_lists_the_drivers_and_what_each_holds(tmp_path):
    from cliffsweep.orchestrator.summary import status_text

    store = Store(str(tmp_path / "store"))
    a, b = Claims(store), Claims(store)
    try:
        assert a.take("trial__x") and a.take("base__m") and b.take("trial__y") and b.take("trial__z")
        text = status_text(store)
        assert "drivers: 2 working the store now" in text, text
        assert f"driver {a.driver.label}: holds 1 trial(s) (x) and base__m" in text, text
        assert f"driver {b.driver.label}: holds 2 trial(s) (y, z)" in text, text
    finally:
        a.close()
        b.close()
    assert "drivers:" not in status_text(store)
