"""The final step on the SmoothAdv authors' published logs (issue 40 item 1): their CIFAR-10
selection logs (every 20th test point, 500) and their re-certifications of the winners on all
10,000 (`data/certify/best_models/cifar10/ours`) imported into one experiment (the second with
`--set final=true`), the selection's envelope over the SmoothAdv models and the final step's
numbers beside it, compared with the paper's Table (`analysis/radii_to_best_models/cifar10_ours`:
per radius, the authors' pick and its 10,000-point accuracy).

    .venv/bin/python benchmarks/final_step_published.py [--mirror GIT_DIR] [--work DIR]

Reads a git mirror of Hadisalman/smoothing-adversarial; writes the extracted logs and the
experiment under --work (default: a temporary directory). Prints one line per radius and
exits 1 if `final_best` differs from the paper anywhere. Measured (docs/guide/final-step.md):
`final_best` equals the paper's number at all ten radii 0:2.25:0.25; the selection winner's own
10,000-point number (`final_accuracy`) at 4 of them, the authors' picks being close runners-up.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

MIRROR = "/work/.mirror/Hadisalman+smoothing-adversarial/repo/.git"
SELECTION = "data/certify/cifar10"  # from-scratch models, every 20th test point
FINAL = "data/certify/best_models/cifar10/ours/cifar10"  # the winners on all 10,000
PAPER = "analysis/radii_to_best_models/cifar10_ours"
NOT_OURS = ("finetune_cifar_from_imagenetPGD2steps", "self_training")  # other tables' models
RADII = "0:2.25:0.25"


def extract(mirror: str, work: Path) -> tuple[Path, Path, pd.DataFrame]:
    """(the selection logs' folder, the final logs' folder, the paper's table)."""
    archive = subprocess.run(
        ["git", "--git-dir", mirror, "archive", "HEAD", SELECTION, FINAL],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(work / "repo", filter="data")
    for name in NOT_OURS:
        shutil.rmtree(work / "repo" / SELECTION / name, ignore_errors=True)
    paper = subprocess.run(
        ["git", "--git-dir", mirror, "show", f"HEAD:{PAPER}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return (
        work / "repo" / SELECTION,
        work / "repo" / FINAL,
        pd.read_csv(io.StringIO(paper), sep="\t"),
    )


def sweeper(*args: str) -> str:
    run = "import sys; from sweeper.cli import app; sys.argv[0] = 'sweeper'; app()"
    done = subprocess.run([sys.executable, "-c", run, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sweeper {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="final-step-"))
    selection, final, paper = extract(args.mirror, work)
    where = ["--storage", str(work / "store"), "--experiment", "published"]
    sweeper("import", str(selection), *where)
    sweeper("import", str(final), *where, "--set", "final=true")
    shown = sweeper(
        "envelope", *where, "--radii", RADII, "--only", "method=smoothadv", "--format", "csv"
    )
    table = pd.read_csv(io.StringIO(shown))
    wrong = 0
    paper_at = {
        round(r, 3): a for r, a in zip(paper["radius"], paper["best_cert_accuracy"], strict=True)
    }
    for row in table.itertuples():
        number = paper_at.get(round(row.radius, 3))
        same = number is not None and abs(row.final_best - number) < 1e-9
        wrong += not same
        print(
            f"r={row.radius:<5g} selection {row.certified_accuracy:.3f} ({row.trial_id}) "
            f"winner on 10,000 {row.final_accuracy:.4f}  final_best {row.final_best:.4f} "
            f"({row.final_best_trial_id})  paper {number}  {'=' if same else 'DIFFERS'}"
        )
    print(f"{len(table) - wrong} of {len(table)} radii equal the paper's number")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
