"""Truth files for `benchmarks/envelope_certify.py`: one row per model and test point, columns
`model, sigma, idx, label, top, p_top` (the smoothed classifier's top class under noise and its
probability), written as Parquet to the path given (nothing large is committed).

    .venv/bin/python benchmarks/envelope_truth.py smoothadv /tmp/smoothadv-truth.parquet
    .venv/bin/python benchmarks/envelope_truth.py digits /tmp/digits-truth.parquet \\
        --storage results --experiment digits

`smoothadv`: the SmoothAdv authors' CIFAR-10 per-point CERTIFY logs (tab-separated
`idx label predict radius correct time`, n = 100,000, α = 0.001), read from a git mirror of
Hadisalman/smoothing-adversarial, the from-scratch models listed in
tests/data/smoothadv-cifar10-logs.txt (σ = the log's `sigma_X` directory). A certified row's
radius = σ·Φ⁻¹(pABar) with pABar = Clopper–Pearson lower(nA, n, α): p_top = nA/n for the nA
whose radius (by the kernel's `radius_from_counts`) is nearest the logged one (4 decimals),
top = predict (a wrong prediction keeps its class: it is never certified-correct). An
abstention (predict −1) says only that pABar < 1/2: top = label, p_top = 1/2, the hardest case
(selection a coin flip against one runner-up, the full count at the edge of abstaining).

`digits`: a sweep's certification rows (`load_results`): p_top = count/n of the predicted class
(its maximum-likelihood estimate), abstentions as above.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from trainables.kernel.certificates import radius_from_counts

REPO = Path(__file__).resolve().parent.parent
MIRROR = "/work/.mirror/Hadisalman+smoothing-adversarial/repo/.git"
LOGS = REPO / "tests" / "data" / "smoothadv-cifar10-logs.txt"
LOG_N, LOG_ALPHA = 100_000, 0.001


@lru_cache(maxsize=16)
def _certifying(sigma: float, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    counts = np.arange(n + 1)
    p_lower, radii = radius_from_counts(counts, n, alpha, sigma)
    certifying = counts[np.asarray(p_lower) >= 0.5]
    return certifying, np.asarray(radii)[certifying]


def p_top_from_radius(radius: np.ndarray, sigma: float, n: int = LOG_N, alpha: float = LOG_ALPHA):
    """nA/n of the count whose certified radius is nearest each logged radius."""
    certifying, table = _certifying(sigma, n, alpha)
    at = np.clip(np.searchsorted(table, radius), 1, len(table) - 1)
    nearer = np.where(np.abs(table[at - 1] - radius) <= np.abs(table[at] - radius), at - 1, at)
    return certifying[nearer] / n


def smoothadv_model(mirror: str, path: str) -> pd.DataFrame:
    text = subprocess.run(
        ["git", f"--git-dir={mirror}", "show", f"HEAD:data/certify/cifar10/{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("\t") for line in text.splitlines()[1:] if line.strip()]
    log = pd.DataFrame(rows, columns=["idx", "label", "predict", "radius", "correct", "time"])
    sigma = float(path.rsplit("sigma_", 1)[1])
    predict = log["predict"].astype(int).to_numpy()
    label = log["label"].astype(int).to_numpy()
    p = p_top_from_radius(log["radius"].astype(float).to_numpy(), sigma)
    abstain = predict == -1
    return pd.DataFrame(
        {
            "model": path,
            "sigma": sigma,
            "idx": log["idx"].astype(int),
            "label": label,
            "top": np.where(abstain, label, predict),
            "p_top": np.where(abstain, 0.5, p),
        }
    )


def smoothadv(mirror: str, listing: Path) -> pd.DataFrame:
    paths = [p.strip() for p in listing.read_text().splitlines() if p.strip()]
    return pd.concat([smoothadv_model(mirror, p) for p in paths], ignore_index=True)


def digits(storage: str, experiment: str) -> pd.DataFrame:
    from sweeper.results.certify_rows import load_results
    from sweeper.results.storage import Experiment

    cols = ["trial_id", "cert_id", "sigma_cert", "idx", "label", "predict", "count", "n"]
    frame = load_results(Experiment(storage, experiment), cols).frame
    abstain = frame["predict"] == -1
    return pd.DataFrame(
        {
            "model": frame["trial_id"] + "/" + frame["cert_id"],
            "sigma": frame["sigma_cert"],
            "idx": frame["idx"],
            "label": frame["label"],
            "top": frame["predict"].where(~abstain, frame["label"]),
            "p_top": (frame["count"] / frame["n"]).where(~abstain, 0.5),
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", choices=["smoothadv", "digits"])
    ap.add_argument("out", help="the Parquet file to write")
    ap.add_argument("--mirror", default=MIRROR, help="git dir of Hadisalman/smoothing-adversarial")
    ap.add_argument("--logs", default=str(LOGS), help="the log paths under data/certify/cifar10/")
    ap.add_argument("--storage", default="results")
    ap.add_argument("--experiment", default="digits")
    args = ap.parse_args(argv)
    if args.source == "smoothadv":
        truth = smoothadv(args.mirror, Path(args.logs))
    else:
        truth = digits(args.storage, args.experiment)
    truth.to_parquet(args.out, index=False)
    print(f"{args.out}: {truth['model'].nunique()} models, {len(truth)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
