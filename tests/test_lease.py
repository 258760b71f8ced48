"""One driver per experiment: the lease on a local path (flock) and on S3 (a heartbeat object
on moto's S3 server), and two real `sweeper run grid` processes on one experiment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results import lease as lease_module
from sweeper.results.certify_rows import load_results
from sweeper.results.lease import (
    LAST_TIME,
    Holder,
    Lease,
    LeaseError,
    LeaseHeld,
    held_message,
    read_holder,
)
from sweeper.results.storage import Experiment
from trainables.kernel import fileio

runner = CliRunner()
SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]


def _experiment(storage: str, name: str = "e") -> Experiment:
    exp = Experiment(storage, name)
    fileio.write_bytes_atomic(exp.sweep_json, b'{"trials": []}')  # an experiment with content
    return exp


def _plant(exp: Experiment, **changes) -> Holder:
    """Write a lease.json as another driver would have."""
    now = time.time()
    holder = Holder(
        **{
            "pid": 1,
            "host": "elsewhere",
            "command": "sweeper run grid x",
            "since": now,
            "heartbeat": now,
            "token": "f" * 32,
            **changes,
        }
    )
    fileio.write_bytes_atomic(exp.lease_json, json.dumps(holder.__dict__).encode())
    return holder


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


# ------------------------------------------------------------------------ a local path
def test_a_second_driver_is_refused_while_the_first_holds(tmp_path):
    exp = _experiment(str(tmp_path))
    with Lease(exp, "sweeper run grid a"):
        holder = read_holder(exp)
        assert (holder.pid, holder.command, holder.released) == (
            os.getpid(),
            "sweeper run grid a",
            None,
        )
        with pytest.raises(
            LeaseHeld,
            match=rf"'e' is in use by pid {os.getpid()} on host .* \(`sweeper run grid a`\)",
        ):
            Lease(exp, "sweeper run grid b").acquire()
    assert read_holder(exp).released is not None  # let go: the next driver takes it quietly
    with Lease(exp, "again") as again:
        assert again.took_over is None


def test_a_dead_holder_on_this_host_is_taken_over(tmp_path):
    import socket

    exp = _experiment(str(tmp_path))
    gone = _plant(exp, pid=_dead_pid(), host=socket.gethostname())
    with Lease(exp, "sweeper certify x") as lease:
        assert lease.took_over == gone
        assert read_holder(exp).pid == os.getpid()


def test_a_run_that_wrote_nothing_leaves_no_directory(tmp_path):
    exp = Experiment(str(tmp_path), "never-ran")
    with Lease(exp, "sweeper run grid x"):
        assert (tmp_path / "never-ran" / "lease.json").is_file()
    assert not (tmp_path / "never-ran").exists()


def test_a_lock_file_removed_under_a_waiting_driver_is_not_the_lease(tmp_path, monkeypatch):
    """Issue 25: A holds; B opens `.lease.lock` and is paused before its flock; A lets go and
    removes the lock file (its run wrote nothing), C makes a new one and locks it; B's flock
    then locks the removed file. B sees that its file is no longer the one at the path, opens
    that one, and is refused: C alone holds the lease."""
    import threading

    exp = Experiment(str(tmp_path), "e")  # empty: A's release removes the lock file
    a = Lease(exp, "sweeper run grid a")
    a.acquire()
    opened, go, removed_file_locked = threading.Event(), threading.Event(), []
    flock = lease_module._flock

    def paused_flock(fd: int) -> None:
        if threading.current_thread() is worker and not opened.is_set():
            opened.set()
            assert go.wait(30)
            flock(fd)  # succeeds: A has closed the removed file
            removed_file_locked.append(os.fstat(fd).st_nlink == 0)
            return
        flock(fd)

    monkeypatch.setattr(lease_module, "_flock", paused_flock)
    b, refused = Lease(exp, "sweeper run grid b"), []
    worker = threading.Thread(target=lambda: _refused(b, refused))
    worker.start()
    assert opened.wait(30)
    a.release()
    assert not (tmp_path / "e").exists()  # the lock file B has open is gone
    with Lease(exp, "sweeper run grid c") as c:
        go.set()
        worker.join(30)
        assert removed_file_locked == [True]  # B did lock the removed file...
        assert not b.held and len(refused) == 1  # ...and still does not hold the lease
        assert "(`sweeper run grid c`)" in refused[0]
        assert read_holder(exp).token == c.me.token


# A second driver that opens `.lease.lock`, says so, and waits for a line before its flock.
PAUSED_DRIVER = """
import os, sys
from sweeper.results import lease
from sweeper.results.storage import Experiment

flock = lease._flock

def paused_flock(fd):
    print("opened", flush=True)
    sys.stdin.readline()
    flock(fd)
    print("locked a removed file" if os.fstat(fd).st_nlink == 0 else "locked", flush=True)
    lease._flock = flock

lease._flock = paused_flock
try:
    with lease.Lease(Experiment(sys.argv[1], "e"), "sweeper run grid b"):
        print("held", flush=True)
except lease.LeaseHeld as e:
    print("refused:", e.problems[0], flush=True)
"""


def test_two_processes_never_hold_the_lease_through_a_removed_lock_file(tmp_path):
    """The same race between processes, as issue 25 reproduced it (a delay before flock)."""
    exp = Experiment(str(tmp_path), "e")
    a = Lease(exp, "sweeper run grid a")
    a.acquire()
    args = [sys.executable, "-c", PAUSED_DRIVER, str(tmp_path)]
    b = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert b.stdout.readline() == "opened\n"
        a.release()  # removes the lock file b has open
        with Lease(exp, "sweeper run grid c") as c:
            out, _ = b.communicate("go\n", timeout=60)
            assert read_holder(exp).token == c.me.token
    finally:
        if b.poll() is None:
            b.kill()
    lines = out.splitlines()
    assert lines[0] == "locked a removed file" and len(lines) == 2, out
    assert lines[1].startswith("refused:") and "(`sweeper run grid c`)" in lines[1], out


# A driver in its own process: takes the lease, says so, and holds it until a line arrives.
HOLDING_DRIVER = """
import sys
from sweeper.results import lease
from sweeper.results.storage import Experiment

try:
    with lease.Lease(Experiment(sys.argv[1], "e"), "sweeper run grid b"):
        print("held", flush=True)
        sys.stdin.readline()
except lease.LeaseHeld as e:
    print("refused:", e.problems[0], flush=True)
"""


def _holding_driver(storage) -> subprocess.Popen:
    args = [sys.executable, "-c", HOLDING_DRIVER, str(storage)]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_a_holder_whose_lock_file_was_removed_stops_when_another_driver_took_it(
    tmp_path, monkeypatch
):
    """Issue 38: `rm .lease.lock` let a second driver hold the lease while the first believed
    it did. The first checks its lock file at each heartbeat: it learns at the next one that
    another process holds the new file, stops (on_lost) and leaves that driver's files be."""
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 3600)  # beats only when the test says
    exp, lost = _experiment(str(tmp_path)), []
    a = Lease(exp, "sweeper run grid a", on_lost=lost.append)
    a.acquire()
    assert a.beat() and not lost
    (tmp_path / "e" / ".lease.lock").unlink()  # the attack
    b = _holding_driver(tmp_path)
    try:
        assert b.stdout.readline() == "held\n"  # b took it through the new lock file
        assert not a.beat() and not a.held
        assert [h.command for h in lost] == ["sweeper run grid b"] and a.lost == lost[0]
        a.release()
        assert read_holder(exp).command == "sweeper run grid b" and not read_holder(exp).released
        assert (tmp_path / "e" / ".lease.lock").is_file()  # b's, left alone
        out, _ = b.communicate("\n", timeout=60)
    finally:
        if b.poll() is None:
            b.kill()
    assert out == "" and read_holder(exp).released is not None  # b ran to its end


def test_a_holder_whose_lock_file_was_removed_locks_the_new_one_if_nobody_took_it(
    tmp_path, monkeypatch
):
    """The lock file removed and no driver came since: the holder's heartbeat locks the file
    at the path again, so a driver started after that is refused, naming the holder."""
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 3600)
    exp, lost = _experiment(str(tmp_path)), []
    with Lease(exp, "sweeper run grid a", on_lost=lost.append) as a:
        (tmp_path / "e" / ".lease.lock").unlink()
        assert a.beat() and a.held and not lost
        assert (tmp_path / "e" / ".lease.lock").is_file()
        b = _holding_driver(tmp_path)
        out, _ = b.communicate("\n", timeout=60)
        assert out.startswith("refused: ") and "(`sweeper run grid a`)" in out, out
        assert read_holder(exp).token == a.me.token


def test_a_holder_whose_lock_file_was_replaced_by_a_driver_that_let_go_stops(tmp_path):
    """Another driver locked a new lock file and let go before the holder's heartbeat: its
    flock is free again, but lease.json is that driver's, so the holder has lost the lease."""
    exp, lost = _experiment(str(tmp_path)), []
    a = Lease(exp, "sweeper run grid a", on_lost=lost.append)
    a.acquire()
    (tmp_path / "e" / ".lease.lock").unlink()
    b = _holding_driver(tmp_path)
    assert b.communicate("\n", timeout=60)[0] == "held\n"
    assert not a.beat() and lost[0].command == "sweeper run grid b" and lost[0].released
    a.release()
    assert read_holder(exp).command == "sweeper run grid b"


def _refused(lease: Lease, said: list[str]) -> None:
    try:
        lease.acquire()
    except LeaseHeld as e:
        said.append(e.problems[0])


def test_a_symlink_at_the_lock_file_is_refused_and_nothing_is_made_outside(tmp_path):
    exp = _experiment(str(tmp_path / "store"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "store" / "e" / ".lease.lock"
    link.symlink_to(elsewhere / "x")
    with pytest.raises(fileio.LinkError) as raised:
        Lease(exp, "sweeper certify x").acquire()
    fix = f"{link} is a symlink: sweeper never writes through a link; remove it and re-run"
    assert raised.value.problems == [fix]
    result = runner.invoke(
        app, ["compact", "--storage", str(tmp_path / "store"), "--experiment", "e"]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {fix}\n"
    assert list(elsewhere.iterdir()) == [] and link.is_symlink()
    link.unlink()  # the fix
    with Lease(exp, "sweeper certify x"):
        assert read_holder(exp).pid == os.getpid()


def test_a_lock_file_that_is_no_plain_file_is_refused(tmp_path):
    exp = _experiment(str(tmp_path))
    os.mkfifo(tmp_path / "e" / ".lease.lock")
    with pytest.raises(
        LeaseError, match=r"\.lease\.lock is not a plain file: remove it and re-run"
    ):
        Lease(exp, "sweeper certify x").acquire()


def test_a_heartbeat_far_in_the_future_is_stale():
    """A clock a little ahead is tolerated (up to STALE_S), but a heartbeat written once keeps
    a lease at most 2 * STALE_S; one further ahead (a skewed clock, or forged) keeps none."""
    now, stale = time.time(), lease_module.STALE_S
    ahead = _elsewhere(now, heartbeat=now + stale / 2)
    assert _elsewhere(now).alive(now) and ahead.alive(now)
    assert not ahead.alive(now + stale / 2 + stale)
    assert not _elsewhere(now, heartbeat=now + stale + 1).alive(now)
    assert not _elsewhere(now, heartbeat=LAST_TIME).alive(now)  # the latest a lease may say
    assert not _elsewhere(now, since=now + stale + 1).alive(now)


def _elsewhere(now: float, **changes) -> Holder:
    fields = {"pid": 1, "host": "elsewhere", "command": "c", "since": now, "heartbeat": now}
    return Holder(**{**fields, "token": "t", **changes})


# ------------------------------------------------------------------------ S3 (moto)
def test_s3_lease_held_by_a_live_driver_elsewhere_is_refused(s3_endpoint):
    exp = _experiment("s3://sweeper-test/lease-held")
    _plant(exp)  # heartbeat now, on another host
    with pytest.raises(LeaseHeld, match="in use by pid 1 on host elsewhere"):
        Lease(exp, "sweeper run grid x").acquire()


def test_s3_lease_without_heartbeat_is_taken_over(s3_endpoint, monkeypatch):
    monkeypatch.setattr(lease_module, "SETTLE_S", 0.1)
    exp = _experiment("s3://sweeper-test/lease-stale")
    stale = _plant(exp, heartbeat=time.time() - lease_module.STALE_S - 1)
    with Lease(exp, "sweeper run grid x") as lease:
        assert lease.took_over == stale
        assert read_holder(exp).token == lease.me.token
    assert read_holder(exp).released is not None


def test_s3_lease_taken_by_another_driver_is_lost_at_the_next_heartbeat(s3_endpoint, monkeypatch):
    monkeypatch.setattr(lease_module, "SETTLE_S", 0.1)
    exp = _experiment("s3://sweeper-test/lease-lost")
    lost = []
    lease = Lease(exp, "sweeper run grid x", on_lost=lost.append)
    lease.acquire()
    assert lease.beat() and not lost  # still ours
    thief = _plant(exp, token="e" * 32)
    assert not lease.beat()
    assert lost == [thief] and lease.lost == thief
    lease.release()
    assert read_holder(exp) == thief  # the thief's lease is left alone


# ------------------------------------------------------------------------ what a lease.json holds
PWNED = "\x1b]0;pwned\x07"  # OSC 0: sets the terminal's title; any escape could follow


def test_a_lease_holders_command_is_printed_with_its_control_characters_escaped(tmp_path):
    exp = Experiment(str(tmp_path), "digits-smoke")
    with Lease(exp, f"sweeper run grid {PWNED}"):  # what another driver wrote in lease.json
        args = ["run", "grid", "digits", "--smoke", "--restart", "--storage", str(tmp_path)]
        result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert result.stderr.count("\n") == 1
    assert "in use by pid" in result.stderr
    assert "(`sweeper run grid \\x1b]0;pwned\\x07`)" in result.stderr


def test_a_lease_holders_host_is_printed_escaped_by_status(tmp_path):
    exp = _experiment(str(tmp_path))
    _plant(exp, host=f"evil{PWNED}")  # alive: another host, a heartbeat now
    result = runner.invoke(app, ["status", "--storage", str(tmp_path), "--experiment", "e"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "driver: pid 1 on host evil\\x1b]0;pwned" in result.output  # (rich drops the BEL)


LEASE = {"pid": 1, "host": "x", "command": "c", "since": 1, "heartbeat": 1, "token": "t"}
DAMAGED = {
    "truncated": b'{"pid": 1, "host": "x", "comm',
    "not an object": b"[1, 2]",
    "no token": json.dumps({k: v for k, v in LEASE.items() if k != "token"}),
    "pid a string": json.dumps({**LEASE, "pid": "1"}),
    "pid 0": json.dumps({**LEASE, "pid": 0}),
    "since a word": json.dumps({**LEASE, "since": "yesterday"}),
    "since 1e300": json.dumps({**LEASE, "since": 1e300}),
    "heartbeat 1e12": json.dumps({**LEASE, "heartbeat": 1e12}),  # forged: refused, named
    "only a list": json.dumps({**LEASE, "only": ["sigma=0.5"]}),
}


@pytest.mark.parametrize("kind", DAMAGED)
def test_a_damaged_lease_json_is_one_line_naming_it(tmp_path, kind):
    exp = _experiment(str(tmp_path))
    raw = DAMAGED[kind]
    fileio.write_bytes_atomic(exp.lease_json, raw if isinstance(raw, bytes) else raw.encode())
    line = f"cannot read the lease {exp.lease_json} ("
    fix = "if no sweeper command is running on experiment 'e', delete it and re-run"
    with pytest.raises(LeaseError) as raised:
        Lease(exp, "sweeper certify x").acquire()
    assert raised.value.problems[0].startswith(line) and fix in raised.value.problems[0]
    result = runner.invoke(app, ["status", "--storage", str(tmp_path), "--experiment", "e"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"error: {line}") and result.stderr.count("\n") == 1
    assert fix in result.stderr


def test_the_lease_records_the_slice_its_holder_runs(tmp_path):
    """Issue 41: the slice a driver runs is the lease's `only` (what `sweeper status` and
    `Sweep.status()` count), not words of its command line; none for the whole sweep."""
    exp = _experiment(str(tmp_path))
    with Lease(exp, "sweeper run grid x --storage s", only="sigma=0.5"):
        doc = json.loads(Path(exp.lease_json).read_text())
        assert doc["only"] == "sigma=0.5" and read_holder(exp).only == "sigma=0.5"
    assert read_holder(exp).only == "sigma=0.5"  # released, still saying what it ran
    with Lease(exp, "sweeper run grid x --only sigma=0.25"):
        assert read_holder(exp).only is None  # the command's words are no slice
    old = {k: v for k, v in LEASE.items()}  # written before the field: the whole sweep
    fileio.write_bytes_atomic(exp.lease_json, json.dumps(old).encode())
    assert read_holder(exp).only is None


# ------------------------------------------------------------------------ two real drivers
SPACE = """
fixed: {dataset: digits, epochs: 2, batch_size: 64, train_subset: 256, eval_subset: 30, method: gaussian}
grids:
  - name: g
    axes: {sigma: [0.25, 0.5]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 32, alpha: 0.01, skip: 45, max_points: null, batch_size: 64, shard_size: 5}
"""


def _wait_for_lease(exp: Experiment, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until `proc` holds the lease and has written sweep.json (it is launching)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = read_holder(exp)
        if holder is not None and holder.pid == proc.pid and exp.exists():
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError("the first driver never took the lease")


@pytest.mark.e2e
def test_two_drivers_on_one_experiment(tmp_path):
    """The second `sweeper run grid` exits 2 naming the first's pid (the first is paused with
    SIGSTOP while it holds the lease, so the order does not depend on timing); `status` names
    the holder; the first completes with every row once."""
    space = tmp_path / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    exp = Experiment(str(tmp_path / "store"), "shared")
    args = [*SWEEPER, "run", "grid", str(space), "--storage", exp.storage, "--experiment", "shared"]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_lease(exp, first)
        first.send_signal(signal.SIGSTOP)
        second = subprocess.run(args, capture_output=True, text=True, timeout=300)
        status = CliRunner().invoke(
            app, ["status", "--storage", exp.storage, "--experiment", "shared"]
        )
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=600)
    assert second.returncode == 2, second.stdout + second.stderr
    errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"in use by pid {first.pid} on host" in errors[0], second.stderr
    assert f"pid {first.pid}" in status.output, status.output
    assert first.returncode == 0, out[-3000:] + err[-3000:]
    frame = load_results(exp).frame
    trials = expand(load_space(str(space)))
    assert len(frame) == 2 * 10 and not frame.duplicated(["trial_id", "idx"]).any()
    assert set(frame["trial_id"]) == {t.trial_id for t in trials}
    assert read_holder(exp).released is not None


def test_a_lease_written_with_a_secret_never_shows_it(tmp_path):
    """A lease.json from before credentials were refused may hold an --mlflow password: the
    holder read back, `sweeper status` and the in-use message show it redacted."""
    exp = _experiment(str(tmp_path))
    _plant(exp, command="sweeper run grid x --mlflow http://me:hunter2@mlflow:5000")
    assert read_holder(exp).command == "sweeper run grid x --mlflow http://***@mlflow:5000"
    status = runner.invoke(app, ["status", "--storage", str(tmp_path), "--experiment", "e"])
    assert status.exit_code == 0, status.output
    assert "hunter2" not in status.output + held_message(exp, read_holder(exp))
