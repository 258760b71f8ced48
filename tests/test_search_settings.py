"""The envelope search's settings as a space, the command line and `sweeper.Sweep` take them:
`search: envelope` or a mapping, what is refused (exit 2, one line each, nothing written), the
dry run's price of the search, and the status of a stopped search's skipped trials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper import Sweep
from sweeper.cli import app
from sweeper.plan.search_spec import SearchSpec
from sweeper.plan.spaces import parse_spec, read_yaml, resolve_space_path
from sweeper.plan.sweep_plan import PlanError
from sweeper.results.search_records import write_search
from sweeper.results.status import experiment_status
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep


def digits(**changes):
    raw = read_yaml(resolve_space_path("digits"))
    return parse_spec("digits", {**raw, **changes})


def test_search_envelope_in_a_space_and_its_mapping():
    spec, problems = digits(search="envelope")
    assert problems == [] and spec.search == SearchSpec(mode="envelope")
    spec, problems = digits(search={"mode": "envelope", "tolerance": 0.01, "budget": 3})
    assert problems == [] and (spec.search.tolerance, spec.search.budget) == (0.01, 3)
    spec, problems = digits()
    assert problems == [] and not spec.search.active  # the default: every point


def test_a_search_block_is_checked_with_every_problem_at_once():
    _, problems = digits(search={"mode": "grid", "tolerance": 0, "oops": 1})
    assert any("search: unknown key 'oops'" in p for p in problems)
    assert "search.unknown mode 'grid' (valid: full, envelope)" in problems
    assert any("search.tolerance must be > 0" in p for p in problems)
    _, problems = digits(search={"budget": 5})
    assert problems == [
        "search.budget is a setting of the envelope search, and this search is full: set "
        "mode: envelope (or search: envelope), or remove budget"
    ]


def test_a_space_with_fine_tune_stages_cannot_be_searched():
    raw = read_yaml(resolve_space_path("cifar10-pretrain"))
    _, problems = parse_spec("p", {**raw, "search": "envelope"})
    assert any("fine-tune stages" in p for p in problems)


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_search_flags_are_refused_where_the_search_is_full(tmp_path):
    result = cli("run", "grid", "digits", "--storage", tmp_path, "--dry-run", "--tolerance", "0.01")
    assert result.exit_code == 2
    assert "--tolerance is a setting of --search envelope" in result.stderr
    assert "Traceback" not in result.output and not list(tmp_path.iterdir())


def test_the_dry_run_prices_the_search_and_the_budget(tmp_path):
    flags = ["--dry-run", "--search", "envelope", "--budget", "0.001"]
    result = cli("run", "grid", "digits", "--storage", tmp_path, *flags)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "envelope search: expected ≈" in text and "--budget" in text and "caps it" in text
    assert not list(tmp_path.iterdir())  # a dry run writes nothing


def test_sweep_run_names_an_unknown_search_setting(tmp_path):
    with pytest.raises(PlanError) as e:
        Sweep("digits", storage=str(tmp_path)).plan(search={"mode": "envelope", "toleranc": 1})
    assert "search: unknown setting 'toleranc'" in str(e.value)
    priced = Sweep("digits", storage=str(tmp_path)).plan(search="envelope")
    assert priced.search is not None and priced.search.search[0] < priced.search.full[0]


def test_status_counts_the_trials_a_stopped_search_skipped(tmp_path):
    spec, _ = digits()
    from sweeper.plan.grid import expand

    trials = expand(spec)
    exp = Experiment(str(tmp_path), "digits")
    Path(exp.root).mkdir(parents=True)
    write_sweep(exp, {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in trials]})
    proposals = [{"trial_id": t.trial_id, "phase": "search"} for t in trials[:3]]
    write_search(exp, {"proposals": proposals, "stopped": None, "universe": len(trials)})
    st = experiment_status(exp)
    assert st.counts()["pending"] == len(trials) and st.search is not None
    write_search(
        exp,
        {"proposals": proposals, "universe": len(trials), "stopped": {"reason": "tolerance"}},
    )
    st = experiment_status(exp)
    # proposed but not trained: still to do; never proposed once stopped: skipped
    assert st.counts()["skipped"] == len(trials) - 3 and st.counts()["pending"] == 3
    assert st.search.skipped == len(trials) and st.search.stopped == "tolerance"
