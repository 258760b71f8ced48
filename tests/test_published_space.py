"""`cifar10-published` is what the SmoothAdv authors trained (issue 26 §4): its SmoothAdv
trials are exactly the models of their published CIFAR-10 certification logs, derived from the
logs' directory names (Hadisalman/smoothing-adversarial at cff781d, `data/certify/cifar10`
without the fine-tuned, self-trained and base-attack experiments) with the parser `sweeper
import` uses, so an imported log and the space's trial of the same model share a trial_id.
`cifar10` stays the stated grid in full and says so, and each dry run prices its space."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.ingest.importer import _config
from sweeper.ingest.path_names import path_values
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space

LOGS = Path(__file__).parent / "data" / "smoothadv-cifar10-logs.txt"
runner = CliRunner()


def published_logs() -> dict[str, str]:
    """trial_id -> the log directory it was read from, as `sweeper import` reads the path."""
    root = Path("/published/data/certify/cifar10")
    ids = {}
    for line in LOGS.read_text().split():
        values, methods = path_values(root / line, root)
        ids[_config(values, methods, {}).trial_id] = line
    return ids


def test_the_listing_is_the_464_published_models():
    lines = LOGS.read_text().split()
    assert len(lines) == len(set(lines)) == 464
    assert len(published_logs()) == 464  # one model each, none read as another


def test_cifar10_published_trains_exactly_the_published_models():
    trials = expand(load_space("cifar10-published"))
    smoothadv = {t.trial_id: t for t in trials if t.method == "smoothadv"}
    assert set(smoothadv) == set(published_logs())
    assert Counter(t.method for t in trials) == {"smoothadv": 464, "gaussian": 4}
    by_m = Counter((t.attack, t.m_train) for t in smoothadv.values())
    assert by_m == {
        ("pgd", 1): 80,
        ("ddn", 1): 80,
        ("pgd", 2): 48,
        ("pgd", 4): 48,
        ("pgd", 8): 48,
        ("ddn", 2): 40,
        ("ddn", 4): 40,
        ("ddn", 8): 40,
        ("ddn", 16): 40,
    }
    assert {t.epsilon for t in smoothadv.values()} == {0.25, 127 / 256, 255 / 256, 2.0, 4.0}
    # multiNoiseSamples (at m = 1 the setting means nothing and is unset)
    assert all(t.train_multi_noise is (True if t.m_train > 1 else None) for t in smoothadv.values())


def test_the_published_space_is_within_the_full_grid_but_for_its_units_and_m16():
    """The same protocol as `cifar10`: each published model is a `cifar10` trial once its ε is
    read in the paper's units (127/256 -> 0.5, 255/256 -> 1), except DDN's m = 16 and ε = 4."""
    full = {
        (t.attack, t.steps, t.m_train, t.epsilon, t.sigma)
        for t in expand(load_space("cifar10"))
        if t.method == "smoothadv"
    }
    paper = {127 / 256: 0.5, 255 / 256: 1.0}
    outside = Counter()
    for t in expand(load_space("cifar10-published")):
        if t.method != "smoothadv":
            continue
        key = (t.attack, t.steps, t.m_train, paper.get(t.epsilon, t.epsilon), t.sigma)
        if key not in full:
            outside[(t.m_train == 16, t.epsilon == 4.0)] += 1
    assert outside == {(True, False): 32, (False, True): 24, (True, True): 8}


@pytest.mark.parametrize(("space", "claims"), [("cifar10", False), ("cifar10-published", True)])
def test_each_description_says_which_it_is(space, claims):
    text = load_space(space).description
    assert ("Tables 4" in text) is False
    assert ("464" in text) is claims and ("cifar10-published" in text) is (not claims)


def test_each_dry_run_prices_its_space(tmp_path):
    totals = {}
    for space in ("cifar10", "cifar10-published"):
        result = runner.invoke(app, ["run", "grid", space, "--dry-run", "--storage", str(tmp_path)])
        assert result.exit_code == 0, result.output
        line = next(ln for ln in result.stdout.splitlines() if ln.startswith("training ≈"))
        totals[space] = float(line.split()[2].replace(",", ""))
        trials = {"cifar10": 644, "cifar10-published": 468}[space]
        assert f"for {trials} trials" in " ".join(result.stdout.split())
    assert 0.8 * totals["cifar10"] < totals["cifar10-published"] < totals["cifar10"]
