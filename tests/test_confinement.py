"""Nothing planted inside the storage makes a command write outside it (issue 25 §1).

A real small experiment (one trained and certified trial of the digits smoke sweep) is copied
for each test; a symlink to a folder outside the storage is planted inside the copy, and the
command that would write through it must refuse with one `error:` line (exit 2) and leave the
outside folder empty. The same holds when the storage is spelled `local://` or `FILE://`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app

pytestmark = pytest.mark.e2e
runner = CliRunner()
ONE_TRIAL = ["--smoke", "--only", "method=gaussian,sigma=0.25"]
EXPERIMENT = "digits-smoke"


@pytest.fixture(scope="module")
def smoke_storage(ray_session, tmp_path_factory) -> Path:
    """A storage holding the digits smoke sweep's experiment with one trial trained,
    certified and compacted."""
    store = tmp_path_factory.mktemp("smoke") / "store"
    result = runner.invoke(app, ["run", "grid", "digits", *ONE_TRIAL, "--storage", str(store)])
    assert result.exit_code == 0, result.output
    return store


@pytest.fixture
def planted(smoke_storage, tmp_path):
    """(a copy of the storage, its experiment, an empty folder outside it)."""
    store = tmp_path / "store"
    shutil.copytree(smoke_storage, store, symlinks=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return store, store / EXPERIMENT, elsewhere


def refused(result) -> str:
    """Exit 2, no traceback, stderr only `error:` lines, one naming a symlink; returns them."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert "symlink" in result.stderr
    return result.stderr


def nothing_in(folder: Path) -> None:
    assert list(folder.rglob("*")) == []


@pytest.mark.parametrize("spelling", ["{}", "local://{}", "FILE://{}", "Local://{}"])
def test_report_refuses_a_reports_folder_linked_outside(planted, spelling):
    store, exp, elsewhere = planted
    (exp / "reports").symlink_to(elsewhere, target_is_directory=True)
    storage = spelling.format(store)
    refused(runner.invoke(app, ["report", "--storage", storage, "--experiment", EXPERIMENT]))
    nothing_in(elsewhere)


def test_report_through_a_local_uri_writes_where_a_plain_path_does(planted):
    store, exp, _ = planted
    result = runner.invoke(
        app, ["report", "--storage", f"LOCAL://{store}", "--experiment", EXPERIMENT]
    )
    assert result.exit_code == 0, result.output
    assert any((exp / "reports").iterdir())


@pytest.mark.parametrize("storage", ["file://relative/store", "local://host/store"])
def test_a_local_uri_without_an_absolute_path_is_one_line(storage):
    result = runner.invoke(app, ["status", "--storage", storage, "--experiment", EXPERIMENT])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith("error: --storage") and "three slashes" in result.stderr


def test_compact_refuses_a_cache_folder_linked_outside(planted):
    store, exp, elsewhere = planted
    shutil.rmtree(exp / "cache", ignore_errors=True)
    (exp / "cache").symlink_to(elsewhere, target_is_directory=True)
    refused(runner.invoke(app, ["compact", "--storage", str(store), "--experiment", EXPERIMENT]))
    nothing_in(elsewhere)


def test_retrain_refuses_a_retired_folder_linked_outside(planted):
    store, exp, elsewhere = planted
    (exp / "retired").symlink_to(elsewhere, target_is_directory=True)
    before = sorted(p.relative_to(exp) for p in exp.rglob("*"))
    args = ["run", "grid", "digits", *ONE_TRIAL, "--retrain", "--storage", str(store)]
    refused(runner.invoke(app, args))
    nothing_in(elsewhere)
    assert sorted(p.relative_to(exp) for p in exp.rglob("*")) == before  # nothing moved


@pytest.mark.parametrize("link", ["tune", "trials", "certify"])
def test_a_driver_refuses_to_start_with_a_link_inside_the_experiment(planted, link):
    """Ray Tune writes under `tune/` by itself: a link anywhere inside stops the run before
    the lease or Ray (all of them named at once)."""
    store, exp, elsewhere = planted
    real = exp / link
    shutil.move(real, elsewhere / link)
    real.symlink_to(elsewhere / link, target_is_directory=True)
    (exp / ".lease.lock").unlink(missing_ok=True)
    (exp / ".lease.lock").symlink_to(elsewhere / "x")
    another = ["--smoke", "--only", "method=gaussian,sigma=0.5"]  # a trial still to train
    args = ["run", "grid", "digits", *another, "--storage", str(store)]
    stderr = refused(runner.invoke(app, args))
    assert str(real) in stderr and str(exp / ".lease.lock") in stderr
    assert not (elsewhere / "x").exists()
