"""`sweeper import` of SmoothAdv's ImageNet certification logs (Hadisalman/smoothing-adversarial
`data/certify/imagenet` at cff781d): miniature trees in the real layout and log format, read by
the real importer.

The published tree: `PGD_1step/imagenet/eps_<k>/resnet50/noise_<σ>` (1-step PGD: `step`, not
`steps`), `DDN_2steps/eps_<k>/resnet50/noise_<σ>` and `replication/resnet50/noise_<σ>` (the
Gaussian baselines), each model's log `test/sigma_<σ>`: a header and 427 rows (images 0 to
42,600 by 100), except the 10 `noise_0.12` logs, a header alone. Each imported model is the
`imagenet` space's trial of its settings (its protocol, ε = k/256 as on CIFAR-10: the space's
ε 0.5 and 1 are the paper's units, so the eps_127 and eps_255 models are that trial with
ε = 127/256 or 255/256, deviation 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.ingest import importer as ingest
from sweeper.ingest.layouts import smoothing_adversarial
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.certify_rows import load_results
from sweeper.results.status import StatusReader
from sweeper.results.storage import Experiment
from sweeper.results.summary import summarize
from sweeper.results.sweep_file import SETTINGS, write_sweep
from trainables.kernel.config import TrialConfig

HEADER = "idx\tlabel\tpredict\tradius\tcorrect\ttime"
# Rows as the published logs print them (4-decimal radii, str(timedelta) times): an abstention,
# 0.9529 (the largest radius printed at σ = 0.25, n = 10^5, α = 0.001) and the last image of
# every published log, 42,600: past CIFAR-10's 10,000 test images, so only ImageNet reads it.
ROWS = [
    "0\t65\t-1\t0.0000\t0\t0:04:25.502905",
    "100\t795\t795\t0.9529\t1\t0:02:22.061655",
    "200\t230\t230\t0.4061\t1\t0:02:21.994893",
    "42600\t250\t249\t0.3341\t0\t0:04:14.802921",
]
TREE = "smoothing-adversarial/data/certify/imagenet"
LISTING = Path(__file__).parent / "data" / "smoothadv-imagenet-logs.txt"
PAPER_UNITS = {127 / 256: 0.5, 255 / 256: 1.0}  # the space's ε of the logs' eps_127, eps_255
CERT = "n-100000-alpha-0.001"


def write_log(path: Path, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in [HEADER, *rows]))
    return path


def log_path(model_dir: str, sigma: str) -> str:
    return f"{model_dir}/noise_{sigma}/test/sigma_{sigma}"


# (model directory below data/certify/imagenet, σ as the name spells it, the config it is)
PROTOCOL = dict(smoothing_adversarial.IMAGENET_PROTOCOL)
MODELS = [
    (
        "PGD_1step/imagenet/eps_127/resnet50",
        "0.25",
        dict(method="smoothadv", attack="pgd", steps=1, epsilon=127 / 256, sigma=0.25),
    ),
    (
        "PGD_1step/imagenet/eps_2048/resnet50",
        "1.00",
        dict(method="smoothadv", attack="pgd", steps=1, epsilon=8.0, sigma=1.0),
    ),
    (
        "DDN_2steps/eps_255/resnet50",
        "0.50",
        dict(method="smoothadv", attack="ddn", steps=2, epsilon=255 / 256, sigma=0.5),
    ),
    (
        "DDN_2steps/eps_1024/resnet50",
        "0.25",
        dict(method="smoothadv", attack="ddn", steps=2, epsilon=4.0, sigma=0.25),
    ),
    ("replication/resnet50", "0.50", dict(method="gaussian", sigma=0.5)),
]
HEADER_ONLY = [
    log_path("PGD_1step/imagenet/eps_127/resnet50", "0.12"),
    log_path("DDN_2steps/eps_1024/resnet50", "0.12"),
    log_path("replication/resnet50", "0.12"),
]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A miniature data/certify/imagenet: five models with rows, three header-only noise_0.12."""
    root = tmp_path / TREE
    for model_dir, sigma, _ in MODELS:
        write_log(root / log_path(model_dir, sigma), ROWS)
    for rel in HEADER_ONLY:
        write_log(root / rel, [])
    return root


def exp_at(tmp_path: Path) -> Experiment:
    return Experiment(str(tmp_path / "results"), "imagenet-pub")


def space_trials() -> dict[tuple, TrialConfig]:
    """The `imagenet` space's trials by (method, attack, T, ε in the paper's units, σ)."""
    return {
        (t.method, t.attack, t.steps, t.epsilon, t.sigma): t for t in expand(load_space("imagenet"))
    }


def space_key(cfg: TrialConfig) -> tuple:
    return (cfg.method, cfg.attack, cfg.steps, PAPER_UNITS.get(cfg.epsilon, cfg.epsilon), cfg.sigma)


def test_each_imagenet_log_is_imported_with_its_hyperparameters(tree, tmp_path):
    report = ingest.plan_import(tree, exp_at(tmp_path), [])
    got = {m.rel: m for m in report.imported}
    assert sorted(got) == sorted(log_path(d, s) for d, s, _ in MODELS)
    for model_dir, sigma, values in MODELS:
        model = got[log_path(model_dir, sigma)]
        want = TrialConfig(dataset="imagenet", **PROTOCOL, **values)
        assert model.cfg == want and model.cfg.trial_id == want.trial_id, model_dir
        cfg = model.cfg
        assert (cfg.dataset, cfg.arch, cfg.m_train, cfg.epochs) == ("imagenet", "resnet50", 1, 90)
        assert (cfg.batch_size, cfg.lr_step_size, cfg.data_parallel) == (400, 30, 4)
        assert model.cert_id == f"imported-sigma-{float(sigma):g}-{CERT}"
        assert model.rows == len(ROWS)  # what the log holds, not the 500 the space certifies
    by_dir = {m.rel.split("/noise_")[0]: m.cfg for m in report.imported}
    pgd = by_dir["PGD_1step/imagenet/eps_127/resnet50"]
    assert (pgd.method, pgd.attack, pgd.steps, pgd.epsilon) == ("smoothadv", "pgd", 1, 0.49609375)
    ddn = by_dir["DDN_2steps/eps_1024/resnet50"]
    assert (ddn.method, ddn.attack, ddn.steps, ddn.epsilon) == ("smoothadv", "ddn", 2, 4.0)
    gauss = by_dir["replication/resnet50"]
    assert (gauss.method, gauss.attack, gauss.steps, gauss.epsilon) == (
        "gaussian",
        None,
        None,
        None,
    )


def test_the_header_only_noise_012_logs_are_skipped_with_the_reason(tree, tmp_path):
    report = ingest.plan_import(tree, exp_at(tmp_path), [])
    assert sorted(report.skipped) == sorted((rel, "header only (no rows)") for rel in HEADER_ONLY)
    assert all(m.cfg.sigma != 0.12 and m.sigma_cert != 0.12 for m in report.imported)


def test_imported_models_are_the_imagenet_spaces_trials(tree, tmp_path):
    """Same settings, same trial_id: ε 2, 4, 8 and the Gaussian baselines as they are; the
    eps_127 and eps_255 models are the space's ε 0.5 and 1 trials at the logs' k/256."""
    space = space_trials()
    for model in ingest.plan_import(tree, exp_at(tmp_path), []).imported:
        trial = space[space_key(model.cfg)]
        if model.cfg.epsilon in PAPER_UNITS:
            assert model.cfg.trial_id != trial.trial_id
            assert model.cfg.identity() == trial.replace(epsilon=model.cfg.epsilon).identity()
        else:  # the identity: num_workers (where the data is loaded) is no part of it
            assert model.cfg.identity() == trial.identity()
            assert model.cfg.trial_id == trial.trial_id


def test_the_30_published_logs_import_as_the_30_trials_of_the_space(tmp_path):
    """Every listed log of data/certify/imagenet (tests/data/smoothadv-imagenet-logs.txt),
    written as a miniature log at its path, plus its model's header-only noise_0.12 log:
    30 models, one per trial of `imagenet`, 18 of them with the trial's own id; 10 skipped."""
    root = tmp_path / TREE
    lines = LISTING.read_text().split()
    for line in lines:
        write_log(root / line, ROWS)
        write_log(root / log_path(line.split("/noise_")[0], "0.12"), [])
    report = ingest.plan_import(root, exp_at(tmp_path), [])
    assert sorted(m.rel for m in report.imported) == sorted(lines)
    assert [why for _, why in report.skipped] == ["header only (no rows)"] * 10
    space = space_trials()
    keys = [space_key(m.cfg) for m in report.imported]
    assert sorted(keys, key=str) == sorted(space, key=str)  # each trial once
    same = {m.cfg.trial_id for m in report.imported} & {t.trial_id for t in space.values()}
    assert len(same) == 18  # 9 PGD, 6 DDN at ε 2, 4, 8; 3 Gaussian


@pytest.mark.parametrize(
    "leaf",
    [
        "replication/resnet50/noise_0.50",
        "replication",
        "PGD_1step/imagenet/eps_2048/resnet50/noise_1.00/test/sigma_1.00",
        "DDN_2steps/eps_255",
    ],
)
def test_importing_part_of_the_tree_gives_the_same_models(tree, tmp_path, leaf):
    """The names above the imported directory count (`replication`, `PGD_1step` and the
    `imagenet` of data/certify/imagenet included), so a part imports as the whole tree does."""
    whole = {m.rel: m.cfg for m in ingest.plan_import(tree, exp_at(tmp_path), []).imported}
    part = ingest.plan_import(tree / leaf, exp_at(tmp_path), []).imported
    assert part
    for m in part:
        rel = str(m.source.relative_to(tree))
        assert m.cfg == whole[rel], rel


def test_set_dataset_gives_a_tree_without_imagenet_in_its_path_the_same_models(tmp_path):
    """A copy of DDN_2steps/ alone names no data set: --set dataset=imagenet says it, and the
    model is the one the published tree gives (without it, read as CIFAR-10: skipped)."""
    rel = log_path("DDN_2steps/eps_1024/resnet50", "0.25")
    write_log(tmp_path / "copy" / rel, ROWS)
    write_log(tmp_path / TREE / rel, ROWS)
    (copied,) = ingest.plan_import(
        tmp_path / "copy", exp_at(tmp_path), ["dataset=imagenet"]
    ).imported
    (published,) = ingest.plan_import(tmp_path / TREE, exp_at(tmp_path), []).imported
    assert copied.cfg == published.cfg
    skipped = ingest.plan_import(tmp_path / "copy", exp_at(tmp_path), []).skipped
    assert skipped == [(rel, "line 2: label 65 or predict -1 is not a cifar10 class (0..9)")]


def test_imported_models_count_their_own_rows_not_the_spaces_500(tree, tmp_path):
    """In an experiment of the `imagenet` space, the imported models are read with the rows
    their logs hold, and the status counts none of them as the space's certification (500
    points a trial): no shard or row of the plan done, the models counted as imported."""
    exp = exp_at(tmp_path)
    spec = load_space("imagenet")
    trials = expand(spec)
    write_sweep(
        exp,
        {
            "space": {
                "name": "imagenet",
                "certify": {"skip": 100, "max_points": 500, "shard_size": 500},
            },
            "trials": [t.to_dict() for t in trials],
            SETTINGS: [spec.certify.cert_id],
        },
    )
    report = ingest.import_logs(tree, exp)
    assert len(report.imported) == len(MODELS) and report.rows == len(MODELS) * len(ROWS)
    frame = load_results(exp).frame
    assert frame.groupby(["trial_id", "cert_id"]).size().tolist() == [len(ROWS)] * len(MODELS)
    summary = summarize(StatusReader(exp).read())
    assert summary.rows == (0, 500 * len(trials))
    assert summary.shards["certify"] == (0, len(trials))  # shard_size 500: one shard a trial
    assert summary.extra_models == len(MODELS)
