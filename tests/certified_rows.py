"""Real certification rows for the reading tests: CERTIFY's own arithmetic on given vote
counts (`trainables.smoothing.certificate_from_counts`, what `certify_points` runs after
sampling), written by the project's writers (`shard_table`, `write_table`, `compact`) under
a trial whose trial.json the driver would have written."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sweeper.plan.spec import CertifySpec
from sweeper.results.certify_rows import shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.run import compaction
from sweeper.run.certify_stage import CERTIFY
from trainables.kernel.certificates import certificate_from_counts, radius_from_counts
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_status import write_status

# The first test points of digits' test split and their labels.
DIGIT_LABELS = [2, 0, 4, 9, 4, 8, 7, 3, 5, 1]


def columns(
    spec: CertifySpec,
    sigma: float,
    idx: Sequence[int],
    counts: Sequence[int],
    labels: Sequence[int],
    selected: Sequence[int] | None = None,
) -> dict[str, list]:
    """certify_points' columns for points `idx` whose n0 draws selected `selected` (default:
    the label) and whose n draws gave it `counts` votes."""
    selected = list(labels) if selected is None else list(selected)
    certs = [
        certificate_from_counts(c, k, spec.n, spec.alpha, sigma)
        for c, k in zip(selected, counts, strict=True)
    ]
    return _table(certs, idx, labels, [sigma] * len(certs))


def _table(certs, idx, labels, sigmas) -> dict[str, list]:
    """certify_points' columns of CERTIFY's certificates `certs` of points `idx`."""
    return {
        "idx": list(idx),
        "label": list(labels),
        "sigma_cert": list(sigmas),
        "predict": [c.prediction for c in certs],
        "count": [c.nA for c in certs],
        "p_lower": [c.p_lower for c in certs],
        "radius": [c.radius for c in certs],
        "correct": [
            c.prediction == y and c.prediction != -1 for c, y in zip(certs, labels, strict=True)
        ],
        "time_s": [0.1] * len(certs),
    }


def rows(
    exp: Experiment,
    cfg: TrialConfig,
    spec: CertifySpec,
    counts: Sequence[int],
    idx: Sequence[int] | None = None,
    selected: Sequence[int] | None = None,
):
    """A shard's table of `cfg` certified under `spec` (fixed σ) on digits points `idx`
    (default 0, 1, ...)."""
    idx = list(range(len(counts))) if idx is None else list(idx)
    labels = [DIGIT_LABELS[i % len(DIGIT_LABELS)] for i in idx]
    sigma = spec.sigma if spec.sigma is not None else cfg.sigma
    cols = columns(spec, sigma, idx, counts, labels, selected)
    constants = {"smoothing": "fixed", "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    return shard_table(cfg, exp.name, spec.cert_id, constants, cols, {"config": cfg.to_dict()})


def trained(exp: Experiment, cfg: TrialConfig) -> None:
    """The trial.json a finished trial leaves."""
    write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", cfg.epochs, {})


def model(
    exp: Experiment,
    cfg: TrialConfig,
    spec: CertifySpec,
    counts: Sequence[int],
    idx: Sequence[int] | None = None,
) -> str:
    """A trained trial certified in one shard and compacted; returns its compacted file."""
    trained(exp, cfg)
    write_table(rows(exp, cfg, spec, counts, idx), exp.shard_path(cfg.trial_id, spec.cert_id, 0, 1))
    compaction.compact(exp, CERTIFY, cfg.trial_id, spec, 1)
    return exp.compacted_path("certify", cfg.trial_id, spec.cert_id, 1)


def count_for(radius: float, sigma: float, n: int, alpha: float) -> int:
    """The fewest votes among n whose certified radius at σ reaches `radius` (a third of n,
    an abstention, for radius 0)."""
    if radius <= 0:
        return n // 3
    votes = np.arange(n + 1)
    _, reach = radius_from_counts(votes, n, alpha, sigma)
    assert reach[-1] >= radius, f"no count among {n} certifies {radius} at sigma {sigma}"
    return int(votes[np.argmax(reach >= radius)])


def reaching(n: int, alpha: float, idx, labels, predict, radius, sigmas) -> dict[str, list]:
    """certify_points' columns for points whose CERTIFY predicted `predict` (−1: abstained)
    with radii just reaching `radius`, each at its own σ (DDRS's σ_x)."""
    certs = [
        certificate_from_counts(
            p if p != -1 else y, count_for(r if p != -1 else 0, s, n, alpha), n, alpha, s
        )
        for p, y, r, s in zip(predict, labels, radius, sigmas, strict=True)
    ]
    return _table(certs, idx, labels, sigmas)
