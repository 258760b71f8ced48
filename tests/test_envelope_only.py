"""`--only` that keeps only models the envelope strategy pruned (issue 28): `sweeper table`
shows them with their upper bounds; `sweeper envelope` (no certified row to take a maximum of)
says so and where to look, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_envelope_views import ENV, P, build
from typer.testing import CliRunner

from sweeper.api.sweep import Sweep
from sweeper.cli import app


def invoke(storage: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--storage", str(storage), "--experiment", "exp"])


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("COLUMNS", "80")
    return build(tmp_path, ENV)


def test_table_only_a_pruned_model_shows_it(storage):
    result = invoke(storage, "table", "--radii", "0:0.5:0.25", "--only", f"trial_id={P.trial_id}")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if P.trial_id in line]
    assert len(rows) == 1 and "pruned" in rows[0] and "≤0.500" in rows[0]
    frame = Sweep(storage=str(storage), experiment="exp", only=f"sigma={P.sigma}").table([0.25])
    assert list(frame["trial_id"]) == [P.trial_id] and list(frame["status"]) == ["pruned"]


def test_envelope_only_a_pruned_model_says_where_to_look(storage):
    result = invoke(storage, "envelope", "--radii", "0.25", "--only", f"trial_id={P.trial_id}")
    assert result.exit_code == 2
    assert "pruned" in result.output and "sweeper table" in result.output
    assert "Traceback" not in result.output


def test_only_a_value_nobody_has_is_still_an_error(storage):
    result = invoke(storage, "table", "--radii", "0.25", "--only", "trial_id=nosuchtrial")
    assert result.exit_code == 2 and "pruned" not in result.output


def test_a_value_nobody_has_lists_the_values_as_only_takes_them(storage):
    """The values offered include `none` (the models without an attack), as `run --only`
    lists them and `--only attack=none` selects them."""
    result = invoke(storage, "envelope", "--radii", "0.25", "--only", "attack=xyz")
    assert result.exit_code == 2
    assert "attack values:" in result.output and "none" in result.output.split("values:")[1]
    assert invoke(storage, "envelope", "--radii", "0.25", "--only", "attack=none").exit_code == 0
