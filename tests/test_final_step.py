"""The final certification step (issue 40 item 1): its setting (`final` in a space and on the
command line, the final cert_id and its points) and which models it re-certifies, on exact
cases."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from scipy.stats import beta

from sweeper.plan.spaces import _dataclass
from sweeper.results.final_selection import final_candidates, to_recertify
from sweeper.results.provenance import most_points, setting_of
from sweeper.results.sweep_file import space_settings
from trainables.kernel.final_points import FinalPoints, final_of, is_final
from trainables.kernel.stage_settings import CertifySpec

SELECTION = "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500"


def test_the_final_step_has_its_own_cert_id_naming_its_points():
    spec = CertifySpec(final=FinalPoints())
    assert spec.cert_id == SELECTION  # the selection's rows keep their files
    step = spec.final_step
    assert step is not None and step.strategy == "full" and step.final is None
    assert step.cert_id == f"{SELECTION}_final-skip-1-max-all"
    assert step.draws_id == step.cert_id and step.variants() == [step]
    assert step.test_points(10_000) == list(range(10_000))
    macer = CertifySpec(final=FinalPoints(start=500, stop=1000, disjoint=True)).final_step
    assert macer is not None and macer.cert_id.endswith(
        "_final-skip-1-max-all-from-500-to-1000-disjoint"
    )
    assert macer.test_points(10_000) == list(range(500, 1000))
    enveloped = CertifySpec(strategy="envelope", final=FinalPoints(skip=2, max_points=7))
    assert enveloped.final_step.cert_id == f"{SELECTION}_final-skip-2-max-7"  # type: ignore[union-attr]
    assert enveloped.final_step.test_points(100) == [0, 2, 4, 6, 8, 10, 12]  # type: ignore[union-attr]
    assert CertifySpec().final_step is None


def test_a_final_cert_id_is_parsed_back_and_checked_as_a_grid():
    step = CertifySpec(final=FinalPoints(start=500, stop=1000)).final_step
    assert step is not None
    assert final_of(step.cert_id) == (SELECTION, FinalPoints(start=500, stop=1000))
    assert is_final(step.cert_id) and not is_final(SELECTION)
    assert final_of(SELECTION + "_final-skip-0-max-all") is None  # no setting spells it
    assert final_of(SELECTION + "_final-skip-1-max-all-from-9-to-3") is None
    s = setting_of(step.cert_id)
    assert s is not None and (s.skip, s.max_points, s.start, s.stop) == (1, float("inf"), 500, 1000)
    assert most_points(step.cert_id, "cifar10") == 500
    imported = "imported-sigma-0.25-n-100000-alpha-0.001_final-skip-1-max-all"
    assert setting_of(imported) is not None and setting_of(imported).imported  # type: ignore[union-attr]
    assert most_points(f"{SELECTION}_final-skip-1-max-all", "cifar10") == 10_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", FinalPoints()),
        (True, FinalPoints()),
        ({"skip": 1}, FinalPoints()),
        ({"start": 500, "stop": 1000}, FinalPoints(start=500, stop=1000)),
        (None, None),
    ],
)
def test_final_in_a_space(value, expected):
    problems: list[str] = []
    spec = _dataclass(CertifySpec, {"final": value}, "certify", problems)
    assert problems == [] and spec.final == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("some", "certify.final must be all, true, false or a mapping"),
        ({"every": 2}, "certify.final unknown key 'every'"),
        ({"skip": 0}, "certify.final.skip must be an integer >= 1"),
        ({"start": 10, "stop": 5}, "certify.final.stop must be above start"),
    ],
)
def test_a_wrong_final_is_named(value, problem):
    problems: list[str] = []
    _dataclass(CertifySpec, {"final": value}, "certify", problems)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_final_refuses_ddrs_and_lets_radii_be_read():
    from trainables.kernel.ddrs_settings import DDRSSettings

    assert CertifySpec(final=FinalPoints(), ddrs=DDRSSettings()).problems() == [
        "final does not take ddrs (certify DDRS without final)"
    ]
    assert CertifySpec(final=FinalPoints()).idle(["radii", "delta"]) == ["delta"]
    assert CertifySpec().idle(["radii"]) == ["radii"]


def test_sweep_json_declares_the_final_setting():
    declared = space_settings({"certify": {"final": {"skip": 1}}})
    assert declared == {SELECTION, f"{SELECTION}_final-skip-1-max-all"}
    assert space_settings({"certify": {"final": "all", "n": 1000}}) == {
        SELECTION.replace("n-100000", "n-1000"),
        SELECTION.replace("n-100000", "n-1000") + "_final-skip-1-max-all",
    }


# ------------------------------------------------------------------ the models re-certified
def _frame(models: dict[str, list[float]]) -> pd.DataFrame:
    """Each model's certified radius per point (0: wrong), on points 0, 1, ..."""
    rows = [
        {
            "trial_id": tid,
            "cert_id": "c",
            "idx": i,
            "correct": r > 0,
            "radius": r,
            "predict": 1 if r > 0 else -1,
        }
        for tid, radii in models.items()
        for i, r in enumerate(radii)
    ]
    return pd.DataFrame(rows)


def test_the_winner_and_the_models_within_its_interval_are_candidates():
    """40 points. At r = 0.5: a certifies 30 (interval low = beta.ppf(0.025, 30, 11) ≈ 0.588),
    b 24 (0.6: in), c 23 (0.575: out), d 30 but after a in order (tied: in, not the winner).
    At r = 1: only a and c reach it (10 and 12 points): c wins; a's 10/40 = 0.25 against c's
    low beta.ppf(0.025, 12, 29) ≈ 0.166: in."""
    a = [1.5] * 10 + [0.6] * 20 + [0.0] * 10
    b = [0.6] * 24 + [0.0] * 16
    c = [1.5] * 12 + [0.6] * 11 + [0.0] * 17
    d = [0.6] * 30 + [0.0] * 10
    frame = _frame({"a": a, "b": b, "c": c, "d": d})
    got = final_candidates(frame, [0.5, 1.0])
    low5, low1 = beta.ppf(0.025, 30, 11), beta.ppf(0.025, 12, 29)
    assert 0.575 < low5 < 0.6 and 0.16 < low1 < 0.25
    at5 = got[got["radius"] == 0.5]
    assert at5["trial_id"].tolist() == ["a", "d", "b"]
    assert at5["winner"].tolist() == [True, False, False]
    assert at5["certified_accuracy"].tolist() == [0.75, 0.75, 0.6]
    assert at5["ci_low"].iloc[0] == pytest.approx(low5, rel=1e-12)
    at1 = got[got["radius"] == 1.0]
    assert at1["trial_id"].tolist() == ["c", "a"] and at1["winner"].tolist() == [True, False]
    assert to_recertify(got) == [("a", "c"), ("b", "c"), ("c", "c"), ("d", "c")]


def test_no_candidates_where_nobody_is_certified_and_none_of_an_empty_frame():
    frame = _frame({"a": [0.3] * 5, "b": [0.2] * 5})
    got = final_candidates(frame, [0.25, 1.0])
    assert got["radius"].tolist() == [0.25] and got["trial_id"].tolist() == ["a"]
    assert final_candidates(frame.iloc[:0], [0.5]).empty


def test_a_clear_winner_alone_is_re_certified():
    frame = _frame({"a": [1.0] * 100, "b": [1.0] * 50 + [0.0] * 50})
    assert to_recertify(final_candidates(frame, [0.0, 0.5])) == [("a", "c")]


def test_the_selection_setting_is_kept_by_replace():
    spec = dataclasses.replace(CertifySpec(), final=FinalPoints(skip=2))
    assert spec.final_step is not None and spec.final_step.n == spec.n


# ------------------------------------------------------------------ the numbers side by side
def _rows(tid: str, cert_id: str, radii: list[float], start: int = 0, step: int = 1) -> list:
    return [
        {
            "trial_id": tid,
            "cert_id": cert_id,
            "idx": start + step * i,
            "correct": r > 0,
            "radius": r,
            "predict": 1 if r > 0 else -1,
            "method": "gaussian",
            "sigma": 0.25,
        }
        for i, r in enumerate(radii)
    ]


def test_final_rows_never_compete_and_their_numbers_stand_beside_the_winners():
    """Selection (every 2nd of 0..19, 10 points): a certifies 8 at r = 0.5, b 7 (within a's
    interval, beta.ppf(0.025, 8, 3) ≈ 0.44). Report points 0..19 (20): a 10, b 15; a final
    model of c (not a candidate: not selected) certifies all 20 and must win nothing."""
    from sweeper.results.final_numbers import envelope_with_final as envelope

    final = f"{SELECTION}_final-skip-1-max-all"
    rows = _rows("a", SELECTION, [1.0] * 8 + [0.0] * 2, step=2)
    rows += _rows("b", SELECTION, [1.0] * 7 + [0.0] * 3, step=2)
    rows += _rows("c", SELECTION, [0.0] * 10, step=2)
    rows += _rows("a", final, [1.0] * 10 + [0.0] * 10)
    rows += _rows("b", final, [1.0] * 15 + [0.0] * 5)
    rows += _rows("c", final, [1.0] * 20)
    table = envelope(pd.DataFrame(rows), [0.5, 2.0])
    at = table.set_index("radius")
    assert at.loc[0.5, "trial_id"] == "a" and at.loc[0.5, "certified_accuracy"] == 0.8
    assert at.loc[0.5, "points"] == 10
    assert at.loc[0.5, "final_accuracy"] == 0.5 and at.loc[0.5, "final_points"] == 20
    assert at.loc[0.5, "final_cert_id"] == final
    assert at.loc[0.5, "final_best"] == 0.75 and at.loc[0.5, "final_best_trial_id"] == "b"
    assert at.loc[2.0, "certified_accuracy"] == 0.0 and at.loc[2.0, "final_accuracy"] == 0.0
    assert pd.isna(at.loc[2.0, "final_best"])  # nobody wins at 2: no candidates
    by = envelope(pd.DataFrame(rows), [0.5], by="sigma")
    assert by["final_accuracy"].tolist() == [0.5] and "final_best" not in by


def test_a_disjoint_final_step_leaves_the_selection_points_out():
    from sweeper.results.final_numbers import envelope_with_final as envelope

    final = f"{SELECTION}_final-skip-1-max-all-disjoint"
    rows = _rows("a", SELECTION, [1.0] * 4, step=2)  # points 0, 2, 4, 6
    rows += _rows("a", final, [1.0] * 4 + [0.0] * 4)  # points 0..7: 1, 3 certified, 5, 7 not
    table = envelope(pd.DataFrame(rows), [0.5])
    assert table["final_points"].tolist() == [4] and table["final_accuracy"].tolist() == [0.5]


def test_without_final_rows_the_envelope_is_as_it_was():
    from sweeper.results.final_numbers import envelope_with_final as envelope

    table = envelope(pd.DataFrame(_rows("a", SELECTION, [1.0, 0.0])), [0.5])
    assert not any(c.startswith("final") for c in table.columns)


# ------------------------------------------------------------ the published logs, in miniature
LOG_HEADER = "idx\tlabel\tpredict\tradius\tcorrect\ttime"
MODELS = {  # SmoothAdv's layout: <attack>/<m>-multitrain/eps_<255ε>/cifar10/resnet110/noise_<σ>
    "a": "PGD_10steps_multiNoiseSamples/4-multitrain/eps_255/cifar10/resnet110/noise_0.25/test",
    "b": "PGD_2steps_multiNoiseSamples/8-multitrain/eps_255/cifar10/resnet110/noise_0.25/test",
}


def _log(path, idx: list[int], certified: int) -> None:
    """A CERTIFY log of the reference code: the first `certified` points certified at 0.6,
    the others abstained."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [LOG_HEADER] + [
        f"{i}\t3\t3\t0.6\t1\t0:00:01" if k < certified else f"{i}\t3\t-1\t0.0\t0\t0:00:01"
        for k, i in enumerate(idx)
    ]
    path.write_text("\n".join(lines) + "\n")


def test_importing_selection_and_final_logs_gives_the_final_numbers(tmp_path):
    """The protocol of `best_models/cifar10/ours` in miniature: every 20th point (10) selects,
    every point (200) reports. a wins the selection (9 of 10 vs b's 8, within a's interval,
    beta.ppf(0.025, 9, 2) ≈ 0.555); on the report points a certifies 120, b 150: the final
    step says a's 0.6 and, of the two, b's 0.75. (The full logs: docs/guide/final-step.md.)"""
    from typer.testing import CliRunner

    from sweeper.cli import app

    for name, certified, final in (("a", 9, 120), ("b", 8, 150)):
        _log(tmp_path / "sel" / MODELS[name] / "sigma_0.25", list(range(0, 200, 20)), certified)
        _log(tmp_path / "fin" / MODELS[name] / "sigma_0.25", list(range(200)), final)
    where = ["--storage", str(tmp_path / "store"), "--experiment", "pub"]
    runner = CliRunner()
    for folder, sets in (("sel", []), ("fin", ["--set", "final=true"])):
        done = runner.invoke(app, ["import", str(tmp_path / folder), *where, *sets])
        assert done.exit_code == 0, done.output
    shown = runner.invoke(app, ["envelope", *where, "--radii", "0.5", "--format", "csv"])
    assert shown.exit_code == 0, shown.output
    import io

    row = pd.read_csv(io.StringIO(shown.stdout)).iloc[0]
    assert (row["certified_accuracy"], row["points"]) == (0.9, 10)
    assert (row["final_accuracy"], row["final_points"]) == (0.6, 200)
    assert row["final_cert_id"] == "imported-sigma-0.25-n-100000-alpha-0.001_final-skip-1-max-all"
    assert row["final_best"] == 0.75 and row["final_best_trial_id"] != row["trial_id"]
    wrong = runner.invoke(app, ["import", str(tmp_path / "fin"), *where, "--set", "final=2"])
    assert wrong.exit_code == 2 and "--set final: must be true or false (got 2)" in wrong.output


def test_python_overrides_take_final_as_a_space_says_it(tmp_path):
    from sweeper.api.sweep import Sweep
    from sweeper.plan.sweep_plan import PlanError

    space = {"fixed": {"dataset": "digits", "method": "gaussian", "sigma": 0.25}, "grids": []}
    sweep = Sweep(param_space={**space, "grids": [{"name": "g"}]}, storage=str(tmp_path))
    plan = sweep.plan(overrides={"final": {"start": 5, "stop": 9}}).plan
    assert plan.spec.certify.final == FinalPoints(start=5, stop=9)
    with pytest.raises(PlanError) as e:
        sweep.plan(overrides={"final": "some"})
    assert "certify option: final must be all, true, false or a mapping" in str(e.value)
