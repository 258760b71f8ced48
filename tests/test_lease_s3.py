"""The lease on S3 with conditional writes (`sweeper.results.lease_s3`), on moto's S3 server:
of drivers racing to create the lease, or to take over a stale one, exactly one holds it, and
a driver whose lease was taken over learns it when it next renews.

The races are made deterministic: every racer reads the lease object before any of them writes
(a barrier after the read), which is the moment a check-then-put lease lets both through. The
racers' PUTs are then sent one at a time: moto checks a PUT's condition and stores its object
in two steps, where S3 does both at once, so two PUTs at the same instant would test moto.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
import uuid

import pytest

from sweeper.results import lease as lease_module
from sweeper.results import lease_holder, lease_s3
from sweeper.results.lease import LAST_TIME, Holder, Lease, LeaseHeld, read_holder
from sweeper.results.storage import Experiment
from trainables.kernel import fileio


def _experiment() -> Experiment:
    exp = Experiment(f"s3://sweeper-test/lease-{uuid.uuid4().hex[:12]}", "e")
    fileio.write_bytes_atomic(exp.sweep_json, b'{"trials": []}')  # an experiment with content
    return exp


def _plant(exp: Experiment, **changes) -> Holder:
    """Write a lease.json as a driver on another host would have."""
    now = time.time()
    fields = {"pid": 1, "host": "elsewhere", "command": "sweeper run grid x", "since": now}
    holder = Holder(**{**fields, "heartbeat": now, "token": "f" * 32, **changes})
    fileio.write_bytes_atomic(exp.lease_json, json.dumps(holder.__dict__).encode())
    return holder


def _race(monkeypatch, leases: list[Lease]) -> list[str]:
    """Each lease's acquire in its own thread, all reading the lease object before any writes
    it; what each got: "held", or its LeaseHeld line."""
    barrier, one_put, seen = threading.Barrier(len(leases)), threading.Lock(), threading.local()
    read, put = lease_s3.ConditionalObject.read, lease_s3.ConditionalObject._put

    def read_then_wait(self):
        found = read(self)
        if not getattr(seen, "read", False):  # the first read, which decides to write
            seen.read = True
            barrier.wait(timeout=30)
        return found

    def put_alone(self, body, **condition):
        with one_put:
            return put(self, body, **condition)

    monkeypatch.setattr(lease_s3.ConditionalObject, "read", read_then_wait)
    monkeypatch.setattr(lease_s3.ConditionalObject, "_put", put_alone)
    outcome = [""] * len(leases)

    def take(i: int) -> None:
        try:
            leases[i].acquire()
            outcome[i] = "held"
        except LeaseHeld as e:
            outcome[i] = e.problems[0]

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(leases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcome


def _one_holds(exp: Experiment, leases: list[Lease], outcome: list[str]) -> Lease:
    """Exactly one lease is held, the lease object is its, and the others were told its name."""
    assert sorted(o == "held" for o in outcome) == [False] * (len(leases) - 1) + [True], outcome
    winner = leases[outcome.index("held")]
    assert read_holder(exp).token == winner.me.token
    for lease, said in zip(leases, outcome, strict=True):
        if lease is not winner:
            assert not lease.held and f"(`{winner.me.command}`)" in said, said
    return winner


def test_of_two_drivers_racing_to_create_the_lease_exactly_one_holds_it(s3_endpoint, monkeypatch):
    exp = _experiment()
    leases = [Lease(exp, "sweeper run grid a"), Lease(exp, "sweeper run grid b")]
    outcome = _race(monkeypatch, leases)
    winner = _one_holds(exp, leases, outcome)
    assert winner.took_over is None
    winner.release()
    assert read_holder(exp).released is not None


def test_of_two_drivers_racing_for_a_stale_lease_exactly_one_takes_it(s3_endpoint, monkeypatch):
    exp = _experiment()
    stale = _plant(exp, heartbeat=time.time() - lease_module.STALE_S - 1)
    leases = [Lease(exp, "sweeper certify a"), Lease(exp, "sweeper certify b")]
    outcome = _race(monkeypatch, leases)
    winner = _one_holds(exp, leases, outcome)
    assert winner.took_over == stale
    winner.release()


def test_a_driver_whose_lease_was_taken_over_learns_it_at_its_next_renewal(
    s3_endpoint, monkeypatch
):
    """A holder paused beyond STALE_S (on another host, so only its heartbeat speaks for it)
    loses the lease to a newcomer; its next renewal is refused, it stops, and its release
    leaves the newcomer's lease alone."""
    monkeypatch.setattr(lease_holder, "STALE_S", 0.5)  # what `Holder.alive` reads
    exp = _experiment()
    lost: list[Holder | None] = []
    paused = Lease(exp, "sweeper run grid a", on_lost=lost.append)
    paused.me = dataclasses.replace(paused.me, host="elsewhere")
    paused.acquire()
    assert paused.beat() and not lost  # renewed: still ours
    time.sleep(0.6)  # paused: no heartbeat for longer than STALE_S
    with Lease(exp, "sweeper run grid b") as newcomer:
        assert newcomer.took_over is not None and newcomer.took_over.token == paused.me.token
        assert not paused.beat()
        assert lost == [read_holder(exp)] and lost[0].token == newcomer.me.token
        assert not paused.held and paused.lost == lost[0]
        paused.release()
        holder = read_holder(exp)
        assert holder.token == newcomer.me.token and holder.released is None
    assert read_holder(exp).released is not None


@pytest.mark.parametrize("ahead", ["2 * STALE_S", "LAST_TIME"])
def test_a_lease_whose_heartbeat_is_far_in_the_future_is_taken_over(s3_endpoint, ahead):
    """A clock far ahead, or a forged time (the latest a lease may say), keeps no lease."""
    exp = _experiment()
    future = {"2 * STALE_S": time.time() + 2 * lease_module.STALE_S, "LAST_TIME": LAST_TIME}
    forged = _plant(exp, heartbeat=future[ahead])
    with Lease(exp, "sweeper run grid x") as lease:
        assert lease.took_over == forged
        assert read_holder(exp).token == lease.me.token


def test_a_lease_object_deleted_under_its_holder_is_written_again(s3_endpoint):
    exp = _experiment()
    with Lease(exp, "sweeper run grid x") as lease:
        fileio.delete(exp.lease_json)  # by hand, while the driver runs
        assert lease.beat() and lease.held
        assert read_holder(exp).token == lease.me.token


def test_a_lease_in_a_missing_bucket_is_an_error_naming_it(s3_endpoint):
    exp = Experiment("s3://no-such-bucket/x", "e")
    with pytest.raises(OSError, match=r"s3://no-such-bucket/x/e/lease\.json: .*NoSuchBucket"):
        Lease(exp, "sweeper run grid x").acquire()


def test_without_boto3_the_s3_lease_is_written_as_on_any_object_store(
    s3_endpoint, monkeypatch, caplog
):
    """boto3 is the cluster extra: without it the lease is pyarrow's check-then-put, as
    before, and a warning says what is not guaranteed."""
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` raises ImportError
    monkeypatch.setattr(lease_module, "SETTLE_S", 0.1)
    exp = _experiment()
    stale = _plant(exp, heartbeat=time.time() - lease_module.STALE_S - 1)
    with Lease(exp, "sweeper run grid x") as lease:
        assert lease._object is None and lease.took_over == stale
        assert read_holder(exp).token == lease.me.token
    assert read_holder(exp).released is not None
    assert "boto3 is not installed (pip install 'sweeper[cluster]')" in caplog.text
