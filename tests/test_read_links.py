"""No read follows a link planted inside the storage (issue 38 §1), as no write does: a
symlink at `trials/<id>`, `certify/<id>`, `cache` or at one results file, pointing outside the
storage to the very folder or file that was there (real rows, which would count if read), is
left out and named by `envelope`, `table`, `status` and `report`, and stops `compact` with one
`error:` line (exit 2). Real rows (`certified_rows`) in the experiment `test_row_provenance`
builds: A, B and W compacted and cached, X's DDRS shard awaiting its memory pass. A certifies
most points farthest, so the envelope shows whether A's rows were read."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_reading_tampering import _opened
from test_row_provenance import SPEC, A, build_experiment, envelope, left_out, runner

from sweeper.cli import app
from sweeper.results.certify_rows import CERTIFY_ROWS
from sweeper.results.reader import read_stage
from sweeper.results.storage import Experiment
from trainables.kernel import fileio

LINKED = "a symlink inside the storage, never read through"


def _args(command: str, exp: Experiment, *extra: str) -> list[str]:
    return [command, "--storage", exp.storage, "--experiment", exp.name, *extra]


def _link_outside(exp: Experiment, inside: str, elsewhere: Path) -> str:
    """Move `inside` (a folder or file of the experiment) outside the storage and leave a
    symlink to it in its place; returns the link's path."""
    target = elsewhere / Path(inside).name
    shutil.move(inside, target)
    os.symlink(target, inside, target_is_directory=target.is_dir())
    return inside


def _places(exp: Experiment) -> dict[str, str]:
    compacted = exp.compacted_path("certify", A.trial_id, SPEC.cert_id, 1)
    return {
        "trials/<A>": exp.trial_dir(A.trial_id),
        "certify/<A>": os.path.join(exp.certify_dir, A.trial_id),
        "A's compacted file": compacted,
    }


@pytest.fixture
def built(tmp_path) -> tuple[Experiment, Path, list[float]]:
    """(the experiment, an empty folder outside its storage, its envelope without A)."""
    exp = build_experiment(tmp_path / "one")
    without = build_experiment(tmp_path / "two")
    shutil.rmtree(os.path.join(without.certify_dir, A.trial_id))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return exp, elsewhere, envelope(without)[0]


def test_without_a_the_envelope_is_another(built):
    """What the tests below tell apart: A's rows change the envelope."""
    exp, _, without_a = built
    assert envelope(exp)[0] != without_a


@pytest.mark.parametrize("place", ["trials/<A>", "certify/<A>", "A's compacted file"])
def test_envelope_leaves_out_and_names_what_lies_behind_a_link(built, place):
    exp, elsewhere, without_a = built
    link = _link_outside(exp, _places(exp)[place], elsewhere)
    accuracy, stderr = envelope(exp)
    assert accuracy == without_a
    named = [line for line in left_out(stderr) if link in line]
    assert named and all(LINKED in line for line in named), stderr
    assert envelope(exp, "--strict", code=1)[0] == without_a


@pytest.mark.parametrize("place", ["trials/<A>", "certify/<A>", "A's compacted file"])
def test_table_and_report_show_no_row_read_through_a_link(built, place):
    exp, elsewhere, _ = built
    link = _link_outside(exp, _places(exp)[place], elsewhere)
    shown = runner.invoke(app, _args("table", exp, "--format", "csv"))
    assert shown.exit_code == 0, shown.output
    assert A.trial_id not in set(pd.read_csv(io.StringIO(shown.stdout))["trial_id"])
    assert any(link in line and LINKED in line for line in left_out(shown.stderr.splitlines()))
    built_report = runner.invoke(app, _args("report", exp, "--formats", "svg"))
    assert built_report.exit_code == 0, built_report.output
    assert link in built_report.stderr and LINKED in built_report.stderr
    written = [p for p in Path(exp.reports_dir).rglob("*") if p.suffix in (".csv", ".md")]
    assert written and not any(A.trial_id in p.read_text() for p in written)


@pytest.mark.parametrize("place", ["trials/<A>", "certify/<A>", "A's compacted file"])
def test_status_counts_nothing_behind_a_link_and_names_it(built, place):
    exp, elsewhere, _ = built
    before = _status(exp)
    link = _link_outside(exp, _places(exp)[place], elsewhere)
    doc = _status(exp)
    assert any(link in line and LINKED in line for line in doc["left_out"]), doc["left_out"]
    row = {t["trial_id"]: t for t in doc["trials"]}[A.trial_id]
    was = {t["trial_id"]: t for t in before["trials"]}[A.trial_id]
    assert (was["state"], was["shards"]["certify"]["done"]) == ("finished", 1)
    if place == "trials/<A>":  # its trial.json is behind the link: never started, as read
        assert row["state"] == "pending"
    else:  # its shard is behind the link: none written, as read
        assert row["shards"]["certify"]["done"] == 0
    strict = runner.invoke(app, _args("status", exp, "--strict"))
    assert strict.exit_code == 1, strict.output


def _status(exp: Experiment) -> dict:
    result = runner.invoke(app, _args("status", exp, "--format", "json", "--all"))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_cache_folder_linked_outside_is_named_and_the_files_read(built, monkeypatch):
    exp, elsewhere, _ = built
    before, _ = envelope(exp)
    cache = exp.cache_path("certify")
    _link_outside(exp, os.path.dirname(cache), elsewhere)
    opened = _opened(monkeypatch)
    rows = read_stage(exp, CERTIFY_ROWS)
    assert (
        len(opened) == 1 and exp.compacted_path("certify", A.trial_id, SPEC.cert_id, 1) in opened[0]
    )  # A's rows from its file, not from the cache behind the link
    assert any(cache in line and LINKED in line for line in rows.invalid), rows.invalid
    accuracy, stderr = envelope(exp)
    assert accuracy == before
    assert any(cache in line and LINKED in line for line in stderr), stderr
    doc = _status(exp)
    assert any(os.path.dirname(cache) in line for line in doc["left_out"]), doc["left_out"]


@pytest.mark.parametrize(
    "place", ["trials/<A>", "certify/<A>", "A's compacted file", "cache", "cache/certify.parquet"]
)
def test_compact_refuses_to_start_with_a_link_and_touches_nothing(built, place):
    exp, elsewhere, _ = built
    where = {"cache": os.path.dirname(exp.cache_path("certify"))}
    where["cache/certify.parquet"] = exp.cache_path("certify")
    link = _link_outside(exp, {**_places(exp), **where}[place], elsewhere)
    outside = {p: p.stat().st_mtime_ns for p in elsewhere.rglob("*")}
    result = runner.invoke(app, _args("compact", exp))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert link in result.stderr and "symlink" in result.stderr
    assert {p: p.stat().st_mtime_ns for p in elsewhere.rglob("*")} == outside


def test_a_read_below_a_linked_folder_names_the_link(tmp_path):
    """The primitives: read_bytes, pyarrow's reads by path, exists and a listing, each below
    a folder linked outside the storage."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    (store / "exp").mkdir(parents=True)
    elsewhere.mkdir()
    pq.write_table(pa.table({"x": [1]}), elsewhere / "f.parquet")
    (store / "exp" / "sub").symlink_to(elsewhere, target_is_directory=True)
    fileio.confine(store)
    inside = str(store / "exp" / "sub" / "f.parquet")
    with pytest.raises(fileio.UnreadableFileError, match=f"{store / 'exp' / 'sub'} is {LINKED}"):
        fileio.read_bytes(inside)
    fs, local = fileio.filesystem(inside)
    with pytest.raises(OSError, match=LINKED):
        pq.read_table(local, filesystem=fs)
    assert fileio.exists(inside)  # so that its read names the link, not "missing"
    links: list[str] = []
    assert fileio.list_files(str(store), ".parquet", links) == []
    assert links == [str(store / "exp" / "sub")]
    assert pq.read_table(str(elsewhere / "f.parquet"), filesystem=fs).num_rows == 1  # outside
