"""Ray gone under a run (issue 30 item 8): its GCS killed, the driver would be ended by Ray
itself after 60 s without a word a person can act on. `RayWatch` notices first and the command
line prints one `error:` line with how to resume, exit 1; an error raised while the GCS is
unreachable, or Ray's own system error, is the same line, never a traceback."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.results.lease import Lease, read_holder
from sweeper.results.storage import Experiment
from sweeper.run import driving
from sweeper.run.driving import RayWatch, ray_lost

runner = CliRunner()


def dead_address() -> tuple[str, int]:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()


def test_the_watch_tells_and_exits_once_the_gcs_is_unreachable(monkeypatch):
    monkeypatch.setattr(driving, "POLL_S", 0.02)
    told, exited = [], threading.Event()
    address = dead_address()
    watch = RayWatch(address, told.append, limit=0.1, exit=lambda code: exited.set())
    with watch:
        assert exited.wait(5)
    assert told == [
        f"Ray went away under the run (its GCS at 127.0.0.1:{address[1]} unreachable for 0 s)"
    ]


def test_the_watch_releases_the_runs_lease_before_it_ends_the_process(tmp_path, monkeypatch):
    """The process ends without leaving its `with Lease` block: the watch lets go of the lease
    itself, so lease.json says released and the next run takes it without a takeover."""
    monkeypatch.setattr(driving, "POLL_S", 0.02)
    exp = Experiment(str(tmp_path), "e")
    exited, lease = threading.Event(), Lease(exp, "sweeper run grid digits")
    lease.acquire()
    (tmp_path / "e" / "trials").mkdir()  # the run wrote something: the directory stays
    watch = RayWatch(dead_address(), [].append, 0.1, lambda code: exited.set(), lease.release)
    with watch:
        assert exited.wait(5)
    holder = read_holder(exp)
    assert holder is not None and holder.released is not None and not lease.held
    with Lease(exp, "sweeper run grid digits") as again:
        assert again.took_over is None


def test_the_watch_is_silent_while_the_gcs_answers(monkeypatch):
    monkeypatch.setattr(driving, "POLL_S", 0.02)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        told: list[str] = []
        with RayWatch(server.getsockname(), told.append, limit=0.05, exit=pytest.fail):
            threading.Event().wait(0.3)
    assert told == []


def test_an_error_of_the_run_itself_stays_itself():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        assert ray_lost(ValueError("a bug"), server.getsockname()) is None
    assert ray_lost(ValueError("a bug"), None) is None


@pytest.fixture
def ray_that_dies(monkeypatch):
    """The driving path without Ray: no cluster, no room to wait for, no version check; the
    GCS at a dead address."""
    address = dead_address()
    monkeypatch.setattr("sweeper.run.launch.ray_cluster", lambda a: contextlib.nullcontext())
    monkeypatch.setattr(
        "sweeper.run.capacity.capacity_for", lambda *a, **k: contextlib.nullcontext()
    )
    monkeypatch.setattr(driving, "check_node_versions", lambda warn: None)
    monkeypatch.setattr(driving, "gcs_address", lambda: address)
    return address


@pytest.mark.parametrize("kind", ["connection", "system"])
def test_ray_gone_under_run_grid_is_one_error_line_with_how_to_resume(
    tmp_path, monkeypatch, ray_that_dies, kind
):
    import ray.exceptions

    def gone(*args, **kwargs):
        if kind == "system":
            raise ray.exceptions.RaySystemError("the GCS is gone")
        raise ConnectionError("GCS has been unreachable")

    monkeypatch.setattr("sweeper.run.launch.run_sweep", gone)
    args = ["run", "grid", "digits", "--smoke", "--storage", str(tmp_path / "s")]
    monkeypatch.setattr("sys.argv", ["sweeper", *args])
    result = runner.invoke(app, args)
    assert result.exit_code == 1, (result.output, result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    cause = (
        "failed: System error: the GCS is gone"
        if kind == "system"
        else "unreachable: ConnectionError"
    )
    assert errors == [
        f"error: Ray went away under the run (its GCS at 127.0.0.1:{ray_that_dies[1]} {cause}); "
        f"re-run `sweeper {' '.join(args)}` to resume (finished work is kept)"
    ]
    assert "Traceback" not in result.output
