"""The dry run's outlook for the `envelope` strategy (issue 39 §3,
`sweeper.run.envelope_outlook`): how far the last pilot's bound overstates a point's radius
level, the share of models expected to be certified fully, and the warning when pilots cannot
prune at the given n."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.cost import ENVELOPE_FULL_SHARE, certify_work
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import CertifySpec
from sweeper.run import envelope_bounds as eb
from sweeper.run.envelope_outlook import (
    RESOLVED,
    UNRESOLVED,
    full_share,
    inflation,
    outlook,
)


def test_a_one_draw_pilot_bounds_every_point_at_the_top_level():
    """N = 1: the pilot's one vote (k = N) bounds p by 1, so every point's bound is the top
    level and the inflation is the mean distance of the counts from it."""
    spec = CertifySpec(n=1000, strategy="envelope", pilots=(1,))
    thresholds = eb.certified_counts(0.5, 1000, spec.alpha, tuple(spec.decision_radii))
    counts = np.rint(np.linspace(500, 1000, 401)).astype(np.int64)
    top = eb.levels(1000, thresholds)
    expected = float((top - eb.levels(counts, thresholds)).mean())
    assert expected > 1 and inflation(0.5, spec, 1, 90) == pytest.approx(expected)


def test_pilots_resolve_levels_at_the_papers_n_and_not_at_the_demos():
    paper = CertifySpec(n=100_000, strategy="envelope")
    for sigma in (0.12, 0.25, 0.5):
        assert inflation(sigma, paper, 234, 500) < RESOLVED, sigma
    demo = CertifySpec(n=1000, strategy="envelope")
    assert inflation(0.5, demo, 17, 90) >= UNRESOLVED
    assert inflation(0.5, demo, 17, 90) > inflation(0.5, paper, 17, 90)


def test_the_share_certified_fully_runs_from_the_benchmarks_tenth_to_every_model():
    assert full_share(0.0) == full_share(RESOLVED) == ENVELOPE_FULL_SHARE
    middle = (RESOLVED + UNRESOLVED) / 2
    assert full_share(middle) == pytest.approx((1 + ENVELOPE_FULL_SHARE) / 2)
    assert full_share(UNRESOLVED) == full_share(5.0) == 1.0


def test_the_price_of_an_envelope_point_takes_its_sigmas_share():
    spec = load_space("digits").certify
    envelope = dataclasses.replace(spec, strategy="envelope")
    trials = expand(load_space("digits"))
    seen = outlook(trials, envelope)
    assert sorted(seen.shares) == sorted({t.sigma for t in trials})
    assert seen.cannot_prune == [0.5]  # n = 1,000 at σ = 0.5: the demo pruned nothing
    for cfg in trials[:3]:
        stages, share = envelope.pilot_stages, seen.shares[cfg.sigma]
        per_point = envelope.n0 + stages[0] + share * (stages[-1] - stages[0] + envelope.n)
        points = certify_work(cfg, envelope, seen.shares)[1] / per_point
        assert points == pytest.approx(certify_work(cfg, spec)[1] / (spec.n0 + spec.n))


def test_the_dry_run_says_where_pilots_cannot_prune(tmp_path):
    def dry(space: str) -> str:
        args = ["run", "grid", space, "--storage", str(tmp_path), "--dry-run"]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    out = dry("digits")
    assert "100% at σ = 0.5" in out
    assert "at n = 1,000 the envelope strategy's pilots cannot prune at σ = 0.5" in out
    out = dry("cifar10-published")
    assert "2% at σ = 0.12, 2% at σ = 0.25, 2% at σ = 0.5" in out and "cannot prune" not in out
