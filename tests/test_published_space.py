"""`cifar10-published` is what the SmoothAdv authors trained (issue 26 §4): its SmoothAdv
trials are exactly the models of their published CIFAR-10 certification logs, derived from the
logs' directory names (Hadisalman/smoothing-adversarial at cff781d, `data/certify/cifar10`
without the fine-tuned, self-trained and base-attack experiments) with the parser `sweeper
import` uses, so an imported log and the space's trial of the same model share a trial_id.
`cifar10` stays the stated grid in full and says what it adds and lacks (issue 40 §6), and
each dry run prices its space. `imagenet` is the authors' ImageNet grid: the 30 certified
models of `data/certify/imagenet`, ε in the paper's units."""

from __future__ import annotations

import re
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
# The 30 logs of data/certify/imagenet with rows (427 each, images 0-42,600 by 100); its 10
# noise_0.12 logs are a header alone (no model certified at σ = 0.12).
IMAGENET_LOGS = Path(__file__).parent / "data" / "smoothadv-imagenet-logs.txt"
PAPER_UNITS = {127 / 256: 0.5, 255 / 256: 1.0}  # deviation 3: the k/256 the logs name
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


def _keys(space: str) -> set[tuple]:
    """A space's SmoothAdv trials as (attack, T, m, ε in the paper's units, σ)."""
    return {
        (t.attack, t.steps, t.m_train, PAPER_UNITS.get(t.epsilon, t.epsilon), t.sigma)
        for t in expand(load_space(space))
        if t.method == "smoothadv"
    }


def test_cifar10_states_what_it_adds_to_and_lacks_of_the_published_grid():
    full, published = _keys("cifar10"), _keys("cifar10-published")
    added, lacking = full - published, published - full
    assert (len(full & published), len(added), len(lacking)) == (400, 240, 64)
    assert all(m > 1 for _, _, m, _, _ in added)
    assert Counter(attack for attack, *_ in added) == {"pgd": 96, "ddn": 144}
    assert {(a, t) for a, t, *_ in added} == {
        *(("pgd", t) for t in (6, 8)),
        *(("ddn", t) for t in (2, 6, 8)),
    }
    assert all(attack == "ddn" for attack, *_ in lacking)
    assert sum(m == 16 for _, _, m, _, _ in lacking) == 40
    assert {(m, eps) for _, _, m, eps, _ in lacking if m != 16} == {(2, 4.0), (4, 4.0), (8, 4.0)}
    text = " ".join(load_space("cifar10").description.split())
    for claim in (
        "240 of these trials have no published model",
        "96 PGD at T = 6, 8 and 144 DDN at T = 2, 6, 8",
        "64 published models are not here",
        "40 DDN at m = 16; 24 DDN at epsilon 4 with m = 2, 4 or 8",
    ):
        assert claim in text


def _imagenet_log(line: str) -> tuple:
    """(method, attack, T, ε in the paper's units, σ) of a data/certify/imagenet directory."""
    m = re.fullmatch(
        r"(?:(PGD_1step/imagenet|DDN_2steps)/eps_(\d+)/|replication/)resnet50/"
        r"noise_([\d.]+)/test/sigma_\3",
        line,
    )
    assert m, line
    attack, k, sigma = m.groups()
    if attack is None:
        return ("gaussian", None, None, None, float(sigma))
    eps = PAPER_UNITS.get(int(k) / 256, int(k) / 256)
    pgd = attack.startswith("PGD")
    return ("smoothadv", "pgd" if pgd else "ddn", 1 if pgd else 2, eps, float(sigma))


def test_imagenet_trains_exactly_the_published_imagenet_models():
    lines = IMAGENET_LOGS.read_text().split()
    assert len(lines) == len(set(lines)) == 30
    published = {_imagenet_log(line) for line in lines}
    trials = expand(load_space("imagenet"))
    assert {(t.method, t.attack, t.steps, t.epsilon, t.sigma) for t in trials} == published
    assert len(trials) == 30 and all(t.m_train == 1 for t in trials)
    assert {t.epsilon for t in trials if t.attack == "pgd"} == {0.5, 1.0, 2.0, 4.0, 8.0}
    assert 0.25 not in {t.epsilon for t in trials}
