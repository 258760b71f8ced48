"""`sweeper envelope --by method`: the SmoothAdv-vs-Gaussian comparison of the paper, per radius,
from the CLI on a hand-made experiment of real CERTIFY rows (no Ray)."""

from __future__ import annotations

import io

import certified_rows
import pandas as pd
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.results.certify_rows import shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from trainables.kernel.config import TrialConfig

# Certified at a fixed σ_cert = 1 (`--sigma-cert 1`): the radii below are ones CERTIFY can
# give at n = 100 (up to 1.5), which the trials' σ = 0.25 could not.
CERT = CertifySpec(sigma=1.0, n0=10, n=100, alpha=0.001, skip=1, max_points=None)
BASE = dict(dataset="digits", sigma=0.25, epochs=1)
GAUSS = TrialConfig(method="gaussian", m_train=1, **BASE)
PGD = TrialConfig(method="smoothadv", attack="pgd", epsilon=0.5, steps=2, m_train=2, **BASE)
DDN = TrialConfig(method="smoothadv", attack="ddn", epsilon=0.5, steps=4, m_train=2, **BASE)
# Digits' test points 0-4 per model: (prediction correct?, the radius its votes just reach:
# `certified_rows.reaching`, the fewest of the 100 votes that do, so each lies between the one
# named and the next of RADII); abstentions are wrong with radius 0.
POINTS = {
    GAUSS: [(True, 0.9), (True, 0.6), (True, 0.3), (True, 0.1), (False, 0.0)],  # clean 0.8
    PGD: [(True, 0.9), (True, 0.8), (True, 0.55), (False, 0.4), (False, 0.0)],  # clean 0.6
    DDN: [(True, 1.2), (True, 0.3), (False, 0.2), (False, 0.0), (False, 0.0)],  # clean 0.4
}
RADII = "0,0.25,0.5,0.75,1"
EXPECTED = {  # best certified accuracy per method and radius (ties: higher clean accuracy)
    "gaussian": [0.8, 0.6, 0.4, 0.2, 0.0],
    "smoothadv": [0.6, 0.6, 0.6, 0.4, 0.2],
}
WINNERS = {"gaussian": [GAUSS] * 4, "smoothadv": [PGD, PGD, PGD, PGD, DDN]}


def _experiment(storage) -> Experiment:
    exp = Experiment(str(storage), "compare")
    write_sweep(exp, {"space": {"name": "hand"}, "trials": [c.to_dict() for c in POINTS]})
    for cfg, points in POINTS.items():
        certified_rows.trained(exp, cfg)
        idx = list(range(len(points)))
        labels = [certified_rows.DIGIT_LABELS[i] for i in idx]
        radius = [r for _, r in points]
        # correct: the label; wrong: the next class; radius 0: an abstention
        predict = [
            y if c else ((y + 1) % 10 if r > 0 else -1)
            for (c, r), y in zip(points, labels, strict=True)
        ]
        sigmas = [CERT.sigma] * len(idx)
        cols = certified_rows.reaching(CERT.n, CERT.alpha, idx, labels, predict, radius, sigmas)
        constants = {"smoothing": "fixed", "n0": CERT.n0, "n": CERT.n, "alpha": CERT.alpha}
        meta = {"certify_backend": "test", "normalization": "none", "config": cfg.to_dict()}
        table = shard_table(cfg, exp.name, CERT.cert_id, constants, cols, meta)
        write_table(table, exp.shard_path(cfg.trial_id, CERT.cert_id, 0, 1))
    return exp


def test_envelope_by_method_compares_smoothadv_with_gaussian_per_radius(tmp_path):
    _experiment(tmp_path)
    args = ["envelope", "--storage", str(tmp_path), "--experiment", "compare", "--radii", RADII]
    result = CliRunner().invoke(app, [*args, "--by", "method", "--format", "csv"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert sorted(set(frame["method"])) == ["gaussian", "smoothadv"]
    for method, accuracies in EXPECTED.items():
        rows = frame[frame["method"] == method].sort_values("radius")
        assert rows["radius"].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
        assert rows["certified_accuracy"].tolist() == accuracies
        winners = [cfg.trial_id for cfg in WINNERS[method]]
        assert rows["trial_id"].tolist()[: len(winners)] == winners
    # the comparison as text: SmoothAdv above Gaussian at r = 0.5 and 0.75, as the paper claims
    md = CliRunner().invoke(app, [*args, "--by", "method", "--format", "markdown"])
    assert md.exit_code == 0
    rows = [line.split("|")[1:4] for line in md.stdout.splitlines() if line.startswith("| ")]
    cells = {(m.strip(), r.strip()): a.strip() for m, r, a in rows[1:]}
    assert (cells["smoothadv", "0.5"], cells["gaussian", "0.5"]) == ("0.600", "0.400")
    assert (cells["smoothadv", "0.75"], cells["gaussian", "0.75"]) == ("0.400", "0.200")
