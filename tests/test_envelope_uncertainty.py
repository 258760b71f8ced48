"""The envelope's uncertainty over the test set (issue 30 item 9): the winner's 95%
Clopper–Pearson interval and the paired comparison with the runner-up, exact on known cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta, binomtest

from sweeper.results.envelope import envelope
from sweeper.results.envelope_uncertainty import PointReach, clopper_pearson, mcnemar_p


def test_clopper_pearson_is_the_beta_quantiles_and_closed_at_the_ends():
    low, high = clopper_pearson(np.array([0, 3, 10]), np.array([10, 10, 10]))
    assert low[0] == 0.0 and high[2] == 1.0
    assert low[1] == pytest.approx(beta.ppf(0.025, 3, 8), rel=1e-12)
    assert high[1] == pytest.approx(beta.ppf(0.975, 4, 7), rel=1e-12)
    assert high[0] == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-12)  # (1 − α/2)^(1/n) rule
    assert low[2] == pytest.approx(0.025 ** (1 / 10), rel=1e-12)
    # 500 points at 0.5: about ±0.045, what a published table's third digit hides
    wide = clopper_pearson(np.array([250]), np.array([500]))
    assert (round(wide[0][0], 3), round(wide[1][0], 3)) == (0.455, 0.545)


def test_mcnemar_counts_only_the_discordant_points():
    first = np.array([True] * 7 + [False] * 1 + [True] * 5 + [False] * 5)
    second = np.array([False] * 7 + [True] * 1 + [True] * 5 + [False] * 5)
    assert mcnemar_p(first, second) == pytest.approx(binomtest(1, 8, 0.5).pvalue)
    assert mcnemar_p(first, first) == 1.0  # no discordant point: nothing tells them apart


def test_the_models_are_compared_on_their_common_points_only():
    """Model 0 has points 0..3, model 1 points 2..5: only 2 and 3 are paired."""
    codes = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    idx = np.array([0, 1, 2, 3, 2, 3, 4, 5])
    reach = np.array([1.0, 1.0, 1.0, 1.0, -np.inf, -np.inf, 1.0, 1.0])
    points = PointReach(codes, idx, reach, 2)
    assert points.paired_p(0, 1, 0.5) == pytest.approx(binomtest(0, 2, 0.5).pvalue)  # 2 vs 0


def _frame(models: dict[str, list[bool]]) -> pd.DataFrame:
    rows = []
    for tid, certified in models.items():
        for i, ok in enumerate(certified):
            rows.append(
                {
                    "trial_id": tid,
                    "cert_id": "c",
                    "idx": i,
                    "correct": ok,
                    "radius": 1.0 if ok else 0.0,
                    "predict": 1 if ok else -1,
                }
            )
    return pd.DataFrame(rows)


def test_a_clear_winner_is_told_apart_and_a_close_one_is_not():
    """40 points: A certifies all, B the first 20, C the first 39. A vs B: 20 discordant
    points all A's (p ≈ 2e-6); A vs C: one (p = 1)."""
    clear = envelope(_frame({"a": [True] * 40, "b": [True] * 20 + [False] * 20}), [0.5])
    assert clear["runner_up"].tolist() == ["b"] and bool(clear["distinguishable"].iloc[0])
    assert clear["paired_p"].iloc[0] == pytest.approx(binomtest(0, 20, 0.5).pvalue)
    assert (
        clear["ci_low"].iloc[0] == pytest.approx(0.025 ** (1 / 40))
        and clear["ci_high"].iloc[0] == 1.0
    )
    close = envelope(_frame({"a": [True] * 40, "c": [True] * 39 + [False]}), [0.5])
    assert close["paired_p"].iloc[0] == 1.0 and not close["distinguishable"].iloc[0]
    alone = envelope(_frame({"a": [True] * 40}), [0.5])
    assert alone["runner_up"].isna().all() and alone["distinguishable"].isna().all()
