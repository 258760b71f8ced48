"""Which envelope numbers the envelope strategy's guarantee covers
(`sweeper.api.envelope_view.covered`, issue 39 §1): exact cases."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from sweeper.api.envelope_view import covered


def envelope(values: dict[tuple[float | None, float], float]) -> pd.DataFrame:
    rows = [{"sigma": s, "radius": r, "certified_accuracy": a} for (s, r), a in values.items()]
    return pd.DataFrame(rows)


# A pruned model at σ = 0.5 (bounds 0.6, then 0.3 from r = 0.5 on) and a model at σ = 0.25
# certified only from r = 0.5 (bound 0.9 below it); the grid starts at r = 0.25, so r = 0 has
# no bound at all.
BOUNDS = pd.DataFrame(
    [
        {"sigma": 0.5, "exact_from": np.inf, "upper": [None, 0.6, 0.3]},
        {"sigma": 0.25, "exact_from": 0.5, "upper": [None, 0.9, 0.4]},
    ]
)


def test_a_group_is_covered_where_its_inexact_models_are_bounded_below_its_number():
    table = envelope(
        {
            (0.5, 0.0): 0.95,  # no bound below the grid: not covered
            (0.5, 0.25): 0.6,  # bound 0.6 ≤ 0.6: covered (a tie cannot raise the number)
            (0.5, 0.5): 0.29,  # bound 0.3 > 0.29: a lower bound only
            (0.25, 0.0): 0.97,  # the σ = 0.25 model is inexact below 0.5, unbounded at 0
            (0.25, 0.25): 0.8,  # bound 0.9 > 0.8
            (0.25, 0.5): 0.1,  # exact from 0.5 on: covered whatever its bound
        }
    )
    assert covered(table, BOUNDS, "sigma").tolist() == [False, True, False, False, False, True]


def test_without_groups_every_inexact_model_counts_and_one_without_the_column_in_every_group():
    bounds = BOUNDS.assign(upper=[u[1:] for u in BOUNDS["upper"]])  # radii 0.25 and 0.5
    table = envelope({(None, 0.25): 0.9, (None, 0.5): 0.35}).drop(columns="sigma")
    assert covered(table, bounds, None).tolist() == [True, True]
    table = envelope({(None, 0.25): 0.85, (None, 0.5): 0.35}).drop(columns="sigma")
    assert covered(table, bounds, None).tolist() == [False, True]
    # grouped by a column the bounds lack: both models count in every group (at r = 0.5 the
    # σ = 0.25 model is exact, so the pruned one's 0.3 decides)
    by_method = envelope({("smoothadv", 0.25): 0.7, ("smoothadv", 0.5): 0.3})
    by_method = by_method.rename(columns={"sigma": "method"})
    assert covered(by_method, bounds, "method").tolist() == [False, True]


def test_a_group_whose_every_model_was_pruned_is_shown_uncovered(monkeypatch):
    """`--by sigma` where every σ = 0.5 model was pruned: the group stays, with no winner
    (accuracy 0) and not covered, instead of vanishing (issue 39 §1)."""
    from sweeper.api import envelope_view
    from sweeper.report.render import no_winner, render, texts

    bounds = BOUNDS.iloc[:1].assign(upper=[[0.6, 0.3]])  # the pruned σ = 0.5 model
    monkeypatch.setattr(envelope_view, "inexact_models", lambda *a: bounds)
    table = envelope({(0.25, 0.25): 0.8, (0.25, 0.5): 0.5}).assign(
        trial_id="a", models=1, points=90
    )
    frame = pd.DataFrame({"smoothing": ["sigma"]})
    out = envelope_view.with_covered(None, frame, table, {}, "sigma")  # type: ignore[arg-type]
    assert out[["sigma", "radius", "certified_accuracy", "covered"]].values.tolist() == [
        [0.25, 0.25, 0.8, True],
        [0.25, 0.5, 0.5, True],
        [0.5, 0.25, 0.0, False],
        [0.5, 0.5, 0.0, False],
    ]
    shown = pd.read_csv(io.StringIO(render(no_winner(out), "csv")))
    assert shown["covered"].tolist() == [True, True, False, False]  # kept where nobody wins
    assert shown["trial_id"].isna().tolist() == [False, False, True, True]
    assert texts(out).loc[2, "trial_id"] == "-"  # no winner named
