"""The envelope strategy's pruned models in the read commands (issue 28 item 6): `sweeper
table`, `report` and `status` show them as pruned with their upper bounds, never as zeros, at 80
columns and piped; `sweeper envelope` states the soundness; `Sweep.table`/`status` the same."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import certified_rows
import pytest
from test_outputs import CERT, POINTS, invoke, write_model

from sweeper.api.sweep import Sweep
from sweeper.plan.spec import CertifySpec
from sweeper.results.envelope_records import write_record
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import SETTINGS, write_sweep
from trainables.kernel.cert_ids import CertId
from trainables.kernel.config import TrialConfig

ENV = dataclasses.replace(CERT, strategy="envelope")
P = TrialConfig(dataset="digits", method="gaussian", sigma=1.0, m_train=1, epochs=1)
GRID = [round(0.25 * t, 10) for t in range(10)]
UPPER = [2, 1, 1, 0, 0, 0, 0, 0, 0, 0]  # of 4 points: ≤0.5 at 0, ≤0.25 at 0.25 and 0.5


def record(status: str, upper: list[int]) -> dict:
    return {
        "status": status,
        "strategy": "envelope",
        "delta": ENV.delta,
        "pilots": list(ENV.pilot_stages),
        "radii": GRID,
        "upper": upper,
        "plug_in": upper,
        "certified": upper if status == "certified" else None,
        "points": 4,
        "pilot_draws": 40,
    }


def build(root: Path, spec) -> Path:
    """G and S certified under `spec`; under `envelope` P pruned, with its record."""
    exp = Experiment(str(root), "exp")
    trials = [*POINTS, P]
    keys = ("n0", "n", "alpha", "skip", "max_points", "shard_size")
    space = {"name": "hand", "certify": {"batch_size": 400, **{k: getattr(CERT, k) for k in keys}}}
    declared = [spec.cert_id]  # as `sweeper certify` with these settings records them
    sweep = {"space": space, "trials": [c.to_dict() for c in trials], SETTINGS: declared}
    write_sweep(exp, sweep)
    for cfg in trials:
        certified_rows.trained(exp, cfg)
    for cfg in POINTS:
        write_model(exp, cfg, spec)
        if spec.strategy == "envelope":
            write_record(exp, cfg.trial_id, spec.cert_id, record("certified", [4] * 10))
    if spec.strategy == "envelope":
        write_record(exp, P.trial_id, spec.cert_id, record("pruned", UPPER))
    return root


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("COLUMNS", "80")
    return build(tmp_path, ENV)


def test_table_shows_the_pruned_model_with_its_upper_bounds(storage):
    text = invoke(storage, "table", "--radii", "0:0.5:0.25").stdout
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if P.trial_id in line)
    assert "pruned" in row and "≤0.500" in row and "0.000" not in row
    assert sum("│ certified" in line for line in lines) == 2, text
    wide = invoke(storage, "table", "--radii", "0:0.5:0.25", "--wide").stdout
    row = next(line for line in wide.splitlines() if P.trial_id in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # its accuracy cells the upper bounds, its intervals - (nothing measured)
    assert cells[4:10] == ["≤0.500", "-", "≤0.250", "-", "≤0.250", "-"], cells
    rows = json.loads(invoke(storage, "table", "--radii", "0:0.5:0.25", "--format", "json").stdout)
    pruned = [r for r in rows if r["status"] == "pruned"]
    assert [r["trial_id"] for r in pruned] == [P.trial_id]
    assert pruned[0]["r=0"] is None and pruned[0]["r=0.25_upper"] == 0.25
    assert pruned[0]["r=0_upper"] == 0.5 and pruned[0]["acr"] is None
    assert pruned[0]["r=0_ci_low"] is None and pruned[0]["r=0.5_ci_high"] is None
    csv = invoke(storage, "table", "--radii", "0:0.5:0.25", "--format", "csv").stdout
    assert "r=0.5_upper" in csv.splitlines()[0] and "pruned" in csv
    md = invoke(storage, "table", "--radii", "0:0.5:0.25", "--format", "markdown").stdout
    assert "≤0.250" in md and "_upper" not in md
    frame = Sweep(storage=str(storage), experiment="exp").table([0, 0.25, 0.5])
    assert frame.set_index("trial_id").loc[P.trial_id, "r=0.25_upper"] == 0.25
    only = invoke(storage, "table", "--only", "method=gaussian", "--format", "json").stdout
    assert [r["status"] for r in json.loads(only)] == ["certified", "pruned"]


def test_a_full_experiment_has_no_status_column(tmp_path, monkeypatch):
    from test_outputs import make

    monkeypatch.setenv("COLUMNS", "80")
    make(tmp_path)
    rows = json.loads(invoke(tmp_path, "table", "--format", "json").stdout)
    assert rows and all("status" not in r for r in rows)


def test_status_counts_and_lists_the_pruned_models(storage):
    text = invoke(storage, "status").stdout
    assert "envelope strategy (δ = 0.01): 2 models certified, 1 pruned" in text
    line = next(ln for ln in text.splitlines() if P.trial_id in ln and "pruned" in ln)
    assert "r=0 ≤0.500" in line and "r=0.25 ≤0.250" in line and len(line) <= 80
    doc = json.loads(invoke(storage, "status", "--format", "json").stdout)
    (setting,) = doc["envelope"]
    assert setting["cert_id"] == ENV.cert_id and setting["pruned"] == 1
    assert setting["pruned_models"][0]["upper"][:3] == [0.5, 0.25, 0.25]
    st = Sweep(storage=str(storage), experiment="exp").status().status
    assert st.envelope == doc["envelope"]


def test_report_index_names_the_pruned_models_and_their_bounds(storage):
    invoke(storage, "report", "--radii", "0:0.5:0.25", "--formats", "svg")
    index = (storage / "exp" / "reports" / "index.md").read_text()
    assert "## Pruned by the envelope strategy" in index
    row = next(ln for ln in index.splitlines() if ln.startswith(f"| {P.trial_id}"))
    assert "≤0.500" in row and "≤0.250" in row


def test_a_full_experiment_shows_no_envelope_in_status(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    build(tmp_path, CERT)
    assert "envelope" not in json.loads(invoke(tmp_path, "status", "--format", "json").stdout)
    assert "envelope" not in invoke(tmp_path, "status").stdout


def test_envelope_states_the_soundness_in_one_line_on_stderr(storage, caplog):
    result = invoke(storage, "envelope", "--radii", "0:0.5:0.25", "--format", "csv")
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("envelope strategy")]
    assert len(lines) == 1 and "envelope strategy" not in result.stdout
    (line,) = lines
    assert "exact CERTIFY(n0 = 10, n = 100, α = 0.001)" in line and "δ = 0.01" in line
    assert "grid 0:2.25:0.25" in line and "1 of 3 models pruned" in line
    assert "off the grid" not in line
    off = invoke(storage, "envelope", "--radii", "0,0.3").stderr
    assert "radii off the grid, 0.3: not covered" in off
    full = build(storage / "full", CERT)
    assert "envelope strategy" not in invoke(full, "envelope", "--radii", "0:0.5:0.25").stderr
    with caplog.at_level("INFO", logger="sweeper"):
        Sweep(storage=str(storage), experiment="exp").envelope([0, 0.25])
    assert any("1 of 3 models pruned" in r.getMessage() for r in caplog.records)


def test_delta_of_reads_the_cert_id():
    from sweeper.results.envelope_records import delta_of

    assert delta_of(CERT.cert_id) is None and delta_of(ENV.cert_id) == 0.01
    other = dataclasses.replace(ENV, delta=1e-5, pilots=(10, 30))
    assert delta_of(other.cert_id) == 1e-5


def test_the_decision_radii_are_a_setting_in_the_cert_id_only_off_the_default():
    from sweeper.results.envelope_records import delta_of
    from sweeper.run.envelope_run import planner_settings

    spec = CertifySpec(strategy="envelope")
    assert spec.decision_radii == tuple(GRID) and spec.cert_id.endswith("_max-500_envelope")
    same = CertifySpec(strategy="envelope", radii=list(GRID))  # type: ignore[arg-type]
    assert same.cert_id == spec.cert_id
    mine = CertifySpec(strategy="envelope", delta=0.05, radii=[0, 0.5, 1])  # type: ignore[arg-type]
    assert mine.cert_id.endswith("_envelope-delta-0.05-radii-0-0.5-1") and mine.problems() == []
    assert CertId.parse(mine.cert_id) == mine.cert and delta_of(mine.cert_id) == 0.05
    assert planner_settings(mine).radii == (0, 0.5, 1)
    assert CertifySpec(strategy="envelope", radii=(0.5, 0.25)).problems()
    assert CertifySpec().cert_id == "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500"
    assert CertifySpec(radii=(0, 1)).cert_id == CertifySpec().cert_id  # full: no tag


@pytest.mark.parametrize("command", ["table", "report"])
def test_read_commands_count_the_pruned_trials_as_pruned_not_missing(storage, command):
    """Issue 28 in the views: stderr said `1 of the sweep's 3 trials have no results yet` of a
    pruned model; it is done, pruned by the strategy."""
    extra = ["--formats", "svg"] if command == "report" else []
    err = invoke(storage, command, "--radii", "0:0.5:0.25", *extra).stderr.splitlines()
    assert "have no results yet" not in " ".join(err)
    assert (
        "1 trial pruned by the envelope strategy (never certified: no rows; `sweeper table` "
        "shows their upper bounds)"
    ) in err


def test_a_model_certified_from_a_radius_on_shows_lower_bounds_below_it(tmp_path, monkeypatch):
    """A model the envelope strategy certified only from `exact_from` on: its accuracies
    below that radius and its ACR read `≥` in the terminal, the column says it in json."""
    monkeypatch.setenv("COLUMNS", "200")
    storage = build(tmp_path, ENV)
    g, s = list(POINTS)
    write_record(
        Experiment(str(storage), "exp"),
        g.trial_id,
        ENV.cert_id,
        {**record("certified", [4] * 10), "exact_from": 0.25},
    )
    result = invoke(storage, "table", "--radii", "0:0.5:0.25")
    row = next(line for line in result.stdout.splitlines() if g.trial_id in line)
    cells = [c.strip() for c in row.split("│")]
    header = next(line for line in result.stdout.splitlines() if "r=0.25" in line)
    names = [c.strip() for c in header.split("┃")]
    assert cells[names.index("r=0")].startswith("≥")
    assert not cells[names.index("r=0.25")].startswith("≥")
    assert cells[names.index("ACR")].startswith("≥")
    other = next(line for line in result.stdout.splitlines() if s.trial_id in line)
    assert "≥" not in other and "≥: the envelope strategy" in result.stderr
    rows = json.loads(invoke(storage, "table", "--radii", "0.25", "--format", "json").stdout)
    exact = {r["trial_id"]: r["exact_from"] for r in rows if r["status"] == "certified"}
    assert exact == {g.trial_id: 0.25, s.trial_id: None}
