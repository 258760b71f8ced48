"""`sweeper import`: certification logs of the reference code (Cohen et al., SmoothAdv and the
jh-jeong repositories) in their directory layouts, into the Parquet results (no Ray)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import certified_rows
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.ingest import importer as ingest
from sweeper.ingest import log_reader
from sweeper.ingest.log_reader import parse_row
from sweeper.plan.spec import CertifySpec
from sweeper.plan.sweep_plan import sweep_conflict
from sweeper.results.certify_rows import load_results, shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import read_sweep, write_sweep
from trainables.kernel.catalog import ARCHS
from trainables.kernel.config import TrialConfig

runner = CliRunner()
HEADER = "idx\tlabel\tpredict\tradius\tcorrect\ttime"
PAPER = "n-100000-alpha-0.001"

# SmoothAdv layout, `{:.3}` radii (0.523, 9.01e-01, 0.000123, and 0.953: the largest radius
# at σ = 0.25, n = 10^5, α = 0.001, as printed) and timedelta times.
ADV_DIR = "smoothing-adversarial/data/certify/cifar10/PGD_10steps_multiNoiseSamples/4-multitrain/eps_255/cifar10/resnet110/noise_0.25/test"
ADV_ROWS = [
    "0\t3\t-1\t0.0\t0\t0:00:13.736080",
    "20\t7\t7\t0.523\t1\t0:00:14.500000",
    "40\t4\t4\t9.01e-01\t1\t0:01:02.000001",
    "60\t7\t7\t0.000123\t1\t1:00:00",
    "80\t8\t2\t0.953\t0\t1 day, 0:00:01",
]
# Cohen layout, 4-decimal radii, seconds, CRLF line ends.
COHEN_DIR = "smoothing/data/certify/cifar10/resnet110/noise_0.12/test"
COHEN_ROWS = [
    "0\t3\t3\t0.4570\t1\t13.7361",
    "20\t7\t7\t0.0734\t1\t13.7715",
    "40\t4\t-1\t0.0000\t0\t13.9079",
]
# SmoothAdv-DDN, m_train 1 (no multitrain part), ε = 64/256.
DDN_DIR = (
    "smoothing-adversarial/data/certify/cifar10/DDN_4steps/eps_64/cifar10/resnet110/noise_0.50/test"
)
DDN_ROWS = ["0\t3\t3\t0.75\t1\t2.5", "20\t7\t7\t0.6\t1\t2.5"]

ADV = TrialConfig(
    dataset="cifar10",
    arch="cifar_resnet110",
    method="smoothadv",
    sigma=0.25,
    attack="pgd",
    epsilon=255 / 256,
    steps=10,
    m_train=4,
)
COHEN = TrialConfig(
    dataset="cifar10", arch="cifar_resnet110", method="gaussian", sigma=0.12, m_train=1
)
DDN = TrialConfig(
    dataset="cifar10",
    arch="cifar_resnet110",
    method="smoothadv",
    sigma=0.5,
    attack="ddn",
    epsilon=0.25,
    steps=4,
    m_train=1,
)


def write_log(path: Path, rows: list[str], eol: str = "\n", header: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(line + eol for line in ([HEADER] if header else []) + rows).encode())
    return path


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """Published logs in the reference layouts, plus files to skip or ignore."""
    root = tmp_path / "published"
    write_log(root / ADV_DIR / "sigma_0.25", ADV_ROWS)
    write_log(root / COHEN_DIR / "sigma_0.12", COHEN_ROWS, eol="\r\n")
    write_log(root / DDN_DIR / "sigma_0.50", DDN_ROWS)
    write_log(root / COHEN_DIR / "sigma_0.25", [], eol="\r\n")  # header only
    write_log(root / COHEN_DIR / "sigma_1.00", [])
    (root / COHEN_DIR / "sigma_1.00").write_bytes(b"")  # empty
    write_log(root / DDN_DIR / "sigma_1.00", ["0\t3\t3\t0.75\t1\t2.5", "20\t7\t7\tabc\t1\t2.5"])
    (root / "smoothing" / "stdout.txt").write_text("certifying...\n")
    return root


def exp_at(tmp_path: Path, name: str = "pub") -> Experiment:
    return Experiment(str(tmp_path / "results"), name)


def rows_of(exp: Experiment, cfg: TrialConfig, cert_id: str) -> pd.DataFrame:
    frame = load_results(exp).frame
    return frame[(frame.trial_id == cfg.trial_id) & (frame.cert_id == cert_id)].sort_values("idx")


# ---------------------------------------------------------------------------- values
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("13.7", 13.7),
        ("0:00:13.736080", 13.73608),
        ("0:00:14", 14.0),
        ("1:02:03.5", 3723.5),
        ("1 day, 1:00:00.500000", 90000.5),
        ("2 days, 0:00:01", 172801.0),
        ("0", 0.0),
    ],
)
def test_times_in_seconds_or_timedelta(text, seconds):
    assert log_reader.parse_time(text) == seconds


@pytest.mark.parametrize("text", ["abc", "-1", "nan", "inf", "1:2:3", "0:00:1x", ""])
def test_bad_times(text):
    """parse_time refuses it, and a log line with such a time is refused naming the field."""
    with pytest.raises(ValueError, match=r"^time .* is not seconds or h:mm:ss\.ffffff$"):
        parse_row(["3", "1", "1", "0.5", "1", text])


@pytest.mark.parametrize("value", [0.0001234, 1.0, 12.5, 0.5234, 1234.5, 1.234e-05, 0.0, 3.8115])
def test_radii_as_printed_by_the_reference_code(value):
    for text in (f"{value:.3}", f"{value:.4f}"):  # '0.000123', '1.0', '12.5', '1.23e+03', ...
        cols = log_reader.read_log(f"{HEADER}\n0\t1\t1\t{text}\t1\t0:00:01\n")
        assert cols["radius"] == [float(text)]
    assert f"{1234.5:.3}" == "1.23e+03" and f"{0.0001234:.3}" == "0.000123"


def test_read_log_rows_crlf_bom_blank_lines():
    text = "\ufeff" + HEADER + "\r\n" + "\r\n".join(COHEN_ROWS) + "\r\n\r\n"
    assert log_reader.read_log(text) == {
        "idx": [0, 20, 40],
        "label": [3, 7, 4],
        "predict": [3, 7, -1],
        "radius": [0.457, 0.0734, 0.0],
        "correct": [True, True, False],
        "time_s": [13.7361, 13.7715, 13.9079],
    }


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "empty"),
        ("\r\n", "empty"),
        (HEADER + "\r\n", "header only (no rows)"),
        ("idx label predict radius correct time\n0 1 1 0.5 1 1.0\n", "line 1: not the header"),
        (HEADER + "\n0\t1\t1\t0.5\t1\n", "line 2: expected 6 tab-separated fields, got 5"),
        (
            HEADER + "\n0\t1\t1\t0.5\t1\t1.0\n1\t1\t1\tx\t1\t1.0\n",
            "line 3: radius 'x' is not a number",
        ),
        (HEADER + "\n0\t1\t1\t-0.5\t1\t1.0\n", "line 2: radius '-0.5' is not a number >= 0"),
        (HEADER + "\n0\t1\t2\t0.5\t1\t1.0\n", "line 2: correct is 1 but predict 2 and label 1"),
        (HEADER + "\n0\t1\t1\t0.5\t2\t1.0\n", "line 2: correct '2' is not 0 or 1"),
        (
            HEADER + "\n0\t1\t1\t0.5\t1\tsoon\n",
            "line 2: time 'soon' is not seconds or h:mm:ss.ffffff",
        ),
        (
            HEADER + "\n5\t1\t1\t0.5\t1\t1\n\n5\t1\t1\t0.5\t1\t1\n",
            "line 4: idx 5 again (first on line 2)",
        ),
        (HEADER + "\n0\t1.5\t1\t0.5\t1\t1\n", "line 2: label '1.5' is not an integer"),
    ],
)
def test_unreadable_logs_say_why(body, reason):
    with pytest.raises(log_reader.LogSkip) as e:
        log_reader.read_log(body)
    assert str(e.value).startswith(reason)


def test_abstentions_have_radius_zero():
    cols = log_reader.read_log(f"{HEADER}\n0\t3\t-1\t0.0\t0\t1\n1\t3\t-1\t0.25\t0\t1\n")
    assert cols["predict"] == [-1, -1] and cols["radius"] == [0.0, 0.0]


# ---------------------------------------------------------------------------- layouts
JEONG = dict(lr_step_offset=1, normalize_input=True, scale_input=True)
# Jeong & Shin 2020 appendix A.1: every CIFAR-10 model 150 epochs of batch 256 at lr 0.1, the LR
# dropping every 50 epochs, MACER's too (since issue 40 §5 not MACER's own defaults, main.py's).
JEONG_NUMBERS = dict(epochs=150, batch_size=256, lr=0.1, weight_decay=1e-4, lr_step_size=50)
JEONG_MACER = (
    "data/certify/cifar10/macer/num_16/lbd_4.0/gamma_8.0/beta_16.0/cifar_resnet110/noise_0.50_6947"
)
LAYOUTS = [
    (ADV_DIR + "/sigma_0.25", ADV, 0.25),
    (DDN_DIR + "/sigma_0.50", DDN, 0.5),
    (COHEN_DIR + "/sigma_0.12", COHEN, 0.12),
    (
        "smoothing/data/certify/cifar10/resnet110/noise_1.00/test/sigma_0.50",
        COHEN.replace(sigma=1.0),
        0.5,
    ),
    (
        "smoothing/data/certify/imagenet/resnet50/noise_0.25/test/sigma_0.25",
        COHEN.replace(dataset="imagenet", arch="resnet50", sigma=0.25),
        0.25,
    ),
    (
        "best_models/cifar10/cohen/resnet110/noise_0.50/test/sigma_0.50",
        COHEN.replace(sigma=0.5),
        0.5,
    ),
    (
        "ours/cifar10/PGD_10steps_30epochs/eps_127/cifar10/resnet110/noise_0.12/test/sigma_0.12",
        ADV.replace(sigma=0.12, epsilon=127 / 256, m_train=1, epochs=30),
        0.12,
    ),
    (
        "ours/cifar10/PGD_2steps_multiNoiseSamples/8-multitrain/eps_512/cifar10/resnet110/noise_0.50/test/sigma_0.50",
        ADV.replace(sigma=0.5, epsilon=2.0, steps=2, m_train=8),
        0.5,
    ),
    (
        "num_noise_vec_2/eps_255/cifar10/resnet110/DDN_2steps/noise_1.00/test/sigma_1.00",
        DDN.replace(sigma=1.0, epsilon=255 / 256, steps=2, m_train=2),
        1.0,
    ),
    (
        "m8/PGD_6steps/eps_64/cifar10/resnet110/noise_0.25/test/sigma_0.25",
        ADV.replace(epsilon=0.25, steps=6, m_train=8),
        0.25,
    ),
    # jh-jeong/smoothing-consistency: the log is named noise_<σ>[_<run>], certified at that σ,
    # the model trained with that code's protocol (JEONG: for smoothmix, consistency and
    # stability the methods' own defaults)
    (
        "data/certify/cifar10/salman/pgd_255.0_10_10/num_8/cifar_resnet20/noise_0.50_8916",
        ADV.replace(arch="cifar_resnet20", sigma=0.5, m_train=8, **JEONG),
        0.5,
    ),
    (
        "data/certify/cifar10/salman/ddn_512.0_4_5_128.0_0.1/num_2/cifar_resnet110/noise_1.00",
        # the named DDN init norm 128/256 never took effect (train_salman.py resets it to the ε of
        # the epoch every epoch): ddn_init_norm stays None, the default that does the same
        DDN.replace(sigma=1.0, epsilon=2.0, m_train=2, warmup_epochs=5, ddn_gamma=0.1, **JEONG),
        1.0,
    ),
    (
        "data/certify/cifar10/consistency/cohen/num_2/lbd_20.0/eta_0.5/cifar_resnet110/noise_0.25",
        TrialConfig(method="consistency", sigma=0.25, m_train=2, lam=20.0, eta=0.5),
        0.25,
    ),
    (
        JEONG_MACER,
        TrialConfig(
            method="macer",
            sigma=0.5,
            m_train=16,
            lam=4.0,
            macer_gamma=8.0,
            macer_beta=16.0,
            **JEONG,
            **JEONG_NUMBERS,
        ),
        0.5,
    ),
    (
        "data/certify/mnist/stab/lbd_2.0/lenet/noise_0.50",
        TrialConfig(dataset="mnist", method="stability", sigma=0.5, lam=2.0),
        0.5,
    ),
    (
        "data/certify/cifar10/cohen/cifar_resnet20/noise_0.50_7483",  # jh-jeong's train_cohen.py
        COHEN.replace(arch="cifar_resnet20", sigma=0.5, lr_step_offset=1),
        0.5,
    ),
]


@pytest.mark.parametrize(("layout", "cfg", "sigma_cert"), LAYOUTS)
def test_hyperparameters_from_the_reference_layouts(tmp_path, layout, cfg, sigma_cert):
    write_log(tmp_path / "repo" / layout, ["0\t1\t1\t0.3\t1\t1.0"])  # at most 3.8·0.12
    report = ingest.plan_import(tmp_path / "repo", exp_at(tmp_path), [])
    (model,) = report.imported
    assert model.cfg == cfg and model.cfg.trial_id == cfg.trial_id
    assert model.cert_id == f"imported-sigma-{sigma_cert:g}-{PAPER}"
    assert model.columns()["sigma_cert"] == [sigma_cert]


def test_a_jeong_macer_log_keeps_its_id_when_macer_takes_main_pys_protocol(tmp_path):
    """Issue 40 §5 made main.py's numbers MACER's defaults; a jh-jeong MACER log keeps the
    numbers that code's paper trained with, and so the id it was imported under before."""
    write_log(tmp_path / "repo" / JEONG_MACER, ["0\t1\t1\t0.3\t1\t1.0"])
    (model,) = ingest.plan_import(tmp_path / "repo", exp_at(tmp_path), []).imported
    assert model.cfg.trial_id == "a1aa72110471"
    assert (model.cfg.epochs, model.cfg.lr, model.cfg.lr_drops()) == (150, 0.1, [51, 101])
    assert TrialConfig(method="macer").epochs == 440


def test_eps_is_k_over_256_of_the_unit(tmp_path):
    write_log(tmp_path / "repo" / ADV_DIR / "sigma_0.25", ["0\t1\t1\t0.5\t1\t1.0"])
    (model,) = ingest.plan_import(tmp_path / "repo", exp_at(tmp_path), []).imported
    assert model.cfg.epsilon == 0.99609375


def test_names_above_the_directory_count_up_to_the_first_that_is_no_hyperparameter(tmp_path):
    """Importing the leaf directory (or the log itself) gives the model the same identity as
    importing the whole tree; `data/` and the tmp directories above stop the walk."""
    log = write_log(tmp_path / "repo" / ADV_DIR / "sigma_0.25", ["0\t1\t1\t0.5\t1\t1.0"])
    for where in (tmp_path / "repo", log.parent, log.parent.parent, log):
        (model,) = ingest.plan_import(where, exp_at(tmp_path), []).imported
        assert model.cfg == ADV, where


def test_self_training_and_fine_tuning_logs_are_skipped_unless_set_says_more(tmp_path):
    pre = "ours_pretraining/cifar10/finetune_cifar_from_imagenetPGD2steps/PGD_10steps_30epochs/eps_127/cifar10/resnet110/noise_0.12/test/sigma_0.12"
    selftrain = "ours_selftraining/cifar10/self_training_PGD_2steps/weight_0.5/eps_64/cifar10/resnet110/noise_0.25/test/sigma_0.25"
    write_log(tmp_path / "r" / pre, ["0\t1\t1\t0.5\t1\t1"])
    write_log(tmp_path / "r" / selftrain, ["0\t1\t1\t0.5\t1\t1"])
    write_log(tmp_path / "r" / ADV_DIR / "sigma_0.25", ["0\t1\t1\t0.5\t1\t1"])
    report = ingest.plan_import(tmp_path / "r", exp_at(tmp_path), [])
    assert [m.cfg for m in report.imported] == [ADV]
    assert report.skipped == [
        (
            pre,
            "pre-training then fine-tuning (finetune_cifar_from_imagenetPGD2steps) is not "
            "described by the path alone: pass --set init_from (the pre-trained model's trial_id)",
        ),
        (
            selftrain,
            "self-training (self_training_PGD_2steps) is not described by the path alone: "
            "pass --set pseudo_data, pseudo_fingerprint and pseudo_eta",
        ),
    ]


def test_the_base_attack_comparison_and_a_self_training_directory(tmp_path):
    """SmoothAdv's appendix C.1 runs (PGD_2steps_baseAttackExp): without_noise/noise_<σ> is
    vanilla PGD + noise, without_noise/noise_0.00 vanilla PGD smoothed at its log's σ, and
    with_noise a second SmoothAdv run of PGD_2steps' settings (skipped unless --set seed=...);
    a `self_training` directory above PGD_<T>steps is self-training (skipped, as its prefix
    form is). The published tree imports whole."""
    base = "PGD_2steps_baseAttackExp/{}/eps_127/cifar10/resnet110/noise_{}/test/sigma_0.25"
    noisy, plain = base.format("without_noise", "0.25"), base.format("without_noise", "0.00")
    again = base.format("with_noise", "0.25")
    selftrain = (
        "self_training/PGD_8steps/weight_1.0/eps_64/cifar10/resnet110/noise_0.25/test/sigma_0.25"
    )
    for rel in (noisy, plain, again, selftrain):
        write_log(tmp_path / "r" / rel, ["0\t1\t1\t0.5\t1\t1"])
    report = ingest.plan_import(tmp_path / "r", exp_at(tmp_path), [])
    common = {"dataset": "cifar10", "arch": "cifar_resnet110", "attack": "pgd", "steps": 2}
    want = [
        TrialConfig(method="pgd_noise", sigma=0.25, epsilon=127 / 256, m_train=1, **common),
        TrialConfig(method="vanilla_pgd", sigma=0.25, epsilon=127 / 256, **common),
    ]
    assert sorted(m.cfg.trial_id for m in report.imported) == sorted(c.trial_id for c in want)
    skipped = dict(report.skipped)
    assert "pass --set seed=1" in skipped[again] and "pseudo_fingerprint" in skipped[selftrain]
    seeded = ingest.plan_import(tmp_path / "r" / again, exp_at(tmp_path), ["seed=1"])
    (model,) = seeded.imported
    assert model.cfg.method == "smoothadv" and model.cfg.seed == 1


def test_training_split_logs_are_skipped(tmp_path):
    write_log(tmp_path / "r/imagenet/resnet50/noise_0.50/train/sigma_0.50", ["0\t1\t1\t0.5\t1\t1"])
    write_log(tmp_path / "r/imagenet/resnet50/noise_0.50/test/sigma_0.50", ["0\t1\t1\t0.5\t1\t1"])
    report = ingest.plan_import(tmp_path / "r", exp_at(tmp_path), [])
    assert len(report.imported) == 1
    assert report.skipped == [
        (
            "imagenet/resnet50/noise_0.50/train/sigma_0.50",
            "certified on the training split (a 'train' directory)",
        )
    ]


# ---------------------------------------------------------------------------- importing
def test_import_writes_one_shard_per_log_with_the_exact_rows(tmp_path, logs):
    exp = exp_at(tmp_path)
    report = ingest.import_logs(logs, exp)
    assert [m.rel for m in report.imported] == [  # in path order
        f"{COHEN_DIR}/sigma_0.12",
        f"{DDN_DIR}/sigma_0.50",
        f"{ADV_DIR}/sigma_0.25",
    ]
    assert report.rows == 10 and report.ignored == 1 and report.wrote_sweep
    assert (
        set(report.skipped)
        == {
            (f"{COHEN_DIR}/sigma_0.25", "header only (no rows)"),
            (f"{COHEN_DIR}/sigma_1.00", "empty"),
            (f"{DDN_DIR}/sigma_1.00", "line 3: radius 'abc' is not a number"),
        }
        and len(report.skipped) == 3
    )
    adv = rows_of(exp, ADV, f"imported-sigma-0.25-{PAPER}")
    assert adv.idx.tolist() == [0, 20, 40, 60, 80]
    assert adv.label.tolist() == [3, 7, 4, 7, 8]
    assert adv.predict.tolist() == [-1, 7, 4, 7, 2]
    assert adv.radius.tolist() == [0.0, 0.523, 0.901, 0.000123, 0.953]
    assert adv.correct.tolist() == [False, True, True, True, False]
    assert adv.time_s.tolist() == [13.73608, 14.5, 62.000001, 3600.0, 86401.0]
    assert adv["count"].isna().all() and adv.p_lower.isna().all()
    assert (adv.sigma_cert == 0.25).all() and (adv.smoothing == "fixed").all()
    assert (adv.n0 == 100).all() and (adv.n == 100_000).all() and (adv.alpha == 0.001).all()
    assert (adv.experiment == "pub").all() and (adv.epsilon == 0.99609375).all()
    assert (
        (adv.method == "smoothadv").all() and (adv.m_train == 4).all() and (adv.steps == 10).all()
    )
    cohen = rows_of(exp, COHEN, f"imported-sigma-0.12-{PAPER}")
    assert cohen.radius.tolist() == [0.457, 0.0734, 0.0] and cohen.predict.tolist() == [3, 7, -1]
    assert cohen.time_s.tolist() == [13.7361, 13.7715, 13.9079]
    assert cohen.attack.isna().all() and cohen.epsilon.isna().all()
    shard = Path(exp.compacted_path("certify", ADV.trial_id, f"imported-sigma-0.25-{PAPER}", 1))
    assert shard.name == "compacted-of-00001.parquet"
    assert Path(exp.cache_path("certify")).is_file()  # read through the cache
    meta = pq.read_schema(shard).metadata
    assert (
        meta[b"sweeper.certify_backend"].decode()
        == f"imported from {logs / ADV_DIR / 'sigma_0.25'}"
    )
    assert json.loads(meta[b"sweeper.config"]) == ADV.to_dict()
    assert not list(shard.parent.glob(".*"))  # written atomically: no temporary left
    assert read_sweep(exp)["trials"] == []


def test_reimporting_is_idempotent(tmp_path, logs):
    exp = exp_at(tmp_path)
    ingest.import_logs(logs, exp)
    files = sorted(Path(exp.root).rglob("*"))
    before = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files if f.is_file()}
    again = ingest.import_logs(logs, exp)
    assert again.imported == [] and len(again.already) == 3 and not again.wrote_sweep
    assert sorted(Path(exp.root).rglob("*")) == files
    assert {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in before} == before
    # The same log elsewhere (moved, or with other line ends) holds the same rows: skipped too.
    moved = tmp_path / "moved"
    write_log(moved / ADV_DIR / "sigma_0.25", ADV_ROWS, eol="\r\n")
    assert len(ingest.import_logs(moved, exp).already) == 1


def test_identical_copies_in_one_tree_are_imported_once(tmp_path):
    write_log(tmp_path / "r/data/certify" / ADV_DIR / "sigma_0.25", ADV_ROWS)
    write_log(tmp_path / "r/best_models" / ADV_DIR / "sigma_0.25", ADV_ROWS)
    report = ingest.import_logs(tmp_path / "r", exp_at(tmp_path))
    assert len(report.imported) == 1
    assert report.skipped == [
        (f"data/certify/{ADV_DIR}/sigma_0.25", f"the same rows as best_models/{ADV_DIR}/sigma_0.25")
    ]


def test_set_overrides_and_adds_hyperparameters(tmp_path, logs):
    sets = [
        "epochs=90",
        "seed=3",
        "n=10000",
        "alpha=1e-3",
        "n0=50",
        "sigma_cert=0.5",
        "epsilon=1.0",
        "lr_step_size=30",
    ]
    report = ingest.import_logs(logs / ADV_DIR, exp_at(tmp_path), sets)
    (model,) = report.imported
    assert model.cfg == ADV.replace(epochs=90, seed=3, epsilon=1.0, lr_step_size=30)
    assert model.cert_id == "imported-sigma-0.5-n-10000-alpha-0.001"
    assert model.constants == {"smoothing": "fixed", "n0": 50, "n": 10000, "alpha": 0.001}
    (gauss,) = ingest.plan_import(
        logs / ADV_DIR, exp_at(tmp_path, "g"), ["method=gaussian"]
    ).imported
    assert gauss.cfg == COHEN.replace(sigma=0.25, m_train=4)
    assert gauss.cfg.attack is None and gauss.cfg.epsilon is None


def test_same_config_as_ours_gets_our_trial_id_beside_our_results(tmp_path, logs):
    """Import into an experiment of ours: its sweep.json is kept as it is (`sweeper run` sees
    the same sweep), the imported rows sit under the same trial_id with their own cert_id."""
    exp = exp_at(tmp_path, "cifar10")
    ours = [COHEN, COHEN.replace(sigma=0.5)]
    write_sweep(exp, {"space": {"name": "cifar10"}, "trials": [t.to_dict() for t in ours]})
    sweep_bytes = Path(exp.sweep_json).read_bytes()
    # Our CERTIFY of the trained COHEN (the paper's setting, at its σ 0.12) on points 0 and 20
    spec = CertifySpec()
    certified_rows.trained(exp, COHEN)
    cols = certified_rows.columns(spec, COHEN.sigma, [0, 20], [99000, 90000], [3, 7])
    constants = {"n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    write_table(
        shard_table(COHEN, "cifar10", spec.cert_id, constants, cols, {}),
        exp.shard_path(COHEN.trial_id, spec.cert_id, 0, 1),
    )
    report = ingest.import_logs(logs / COHEN_DIR, exp)
    assert [m.cfg.trial_id for m in report.imported] == [COHEN.trial_id] and not report.wrote_sweep
    assert Path(exp.sweep_json).read_bytes() == sweep_bytes
    assert sweep_conflict(exp, ours) == []
    frame = load_results(exp).frame
    assert sorted(frame.groupby(["trial_id", "cert_id"]).size().items()) == [
        ((COHEN.trial_id, f"imported-sigma-0.12-{PAPER}"), 3),
        ((COHEN.trial_id, spec.cert_id), 2),
    ]
    result = runner.invoke(
        app,
        [
            "envelope",
            "--storage",
            exp.storage,
            "--experiment",
            "cifar10",
            "--radius",
            "0",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        "2 models (a model is a trial certified under one setting: 1 trial here), 5 certified points"
        in result.stderr
    )
    assert "1 of the sweep's 2 trials have no results yet" in result.stderr


# ---------------------------------------------------------------------------- the CLI
def test_cli_import_then_envelope_gives_the_certified_accuracy_by_hand(tmp_path, logs):
    storage = str(tmp_path / "results")
    args = ["import", str(logs), "--storage", storage, "--experiment", "pub", "--verbose"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "imported 3 logs (10 rows) into pub" in out
    assert f"skipped {DDN_DIR}/sigma_1.00: line 3: radius 'abc' is not a number" in out
    assert f"skipped {COHEN_DIR}/sigma_0.25: header only (no rows)" in out
    assert f"skipped {COHEN_DIR}/sigma_1.00: empty" in out
    assert "1 other files (not certification logs) ignored" in out
    assert "smoothadv σ=0.25 pgd ε=0.99609375 T=10 m=4" in out
    # By hand, certified accuracy at r = 0 / 0.5 / 0.9:
    #   ADV   (5 points): correct radii 0.523, 0.901, 0.000123 -> 3/5, 2/5, 1/5
    #   COHEN (3 points): correct radii 0.457, 0.0734        -> 2/3, 0,   0
    #   DDN   (2 points): correct radii 0.75, 0.6            -> 1,   1,   0
    result = runner.invoke(
        app, ["envelope", "--storage", storage, "--radii", "0,0.5,0.9", "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    assert "experiment: pub" in result.stderr  # found by its sweep.json
    table = pd.read_csv(io.StringIO(result.stdout))
    assert table.radius.tolist() == [0.0, 0.5, 0.9]
    assert table.certified_accuracy.tolist() == [1.0, 1.0, 0.2]
    assert table.trial_id.tolist() == [DDN.trial_id, DDN.trial_id, ADV.trial_id]
    assert table.cert_id.tolist() == [f"imported-sigma-0.5-{PAPER}"] * 2 + [
        f"imported-sigma-0.25-{PAPER}"
    ]
    assert table.models.tolist() == [3, 3, 3]
    result = runner.invoke(
        app,
        [
            "table",
            "--storage",
            storage,
            "--experiment",
            "pub",
            "--radii",
            "0,0.5,0.9",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.output
    per_model = pd.read_csv(io.StringIO(result.stdout)).set_index("trial_id")
    assert per_model.loc[ADV.trial_id, ["r=0", "r=0.5", "r=0.9"]].tolist() == [0.6, 0.4, 0.2]
    assert per_model.loc[COHEN.trial_id, "r=0"] == pytest.approx(2 / 3)
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "imported 0 logs (0 rows)" in result.stdout
    assert (
        f"skipped {ADV_DIR}/sigma_0.25: already imported ({ADV.trial_id} imported-sigma-0.25-{PAPER})"
        in result.stdout
    )
    assert (
        runner.invoke(app, ["status", "--storage", storage, "--experiment", "pub"]).exit_code == 0
    )


def test_cli_import_counts_the_skipped_logs_per_reason_and_verbose_lists_each(
    tmp_path, monkeypatch
):
    """At 80 columns: a line per method and per reason with its count (the reason wrapped
    under itself), not a line per log; --verbose lists each log as it was."""
    monkeypatch.chdir(tmp_path)  # a short storage path: the first line names it
    root = tmp_path / "published"
    write_log(root / ADV_DIR / "sigma_0.25", ADV_ROWS)
    write_log(root / DDN_DIR / "sigma_0.50", DDN_ROWS)
    for sigma in ("0.12", "0.25", "0.50", "1.00"):
        write_log(root / COHEN_DIR / f"sigma_{sigma}", [])  # header only
    finetune = "finetune_cifar_from_imagenetPGD2steps/PGD_10steps_30epochs/eps_127/cifar10"
    for sigma in ("0.12", "0.25", "0.50"):
        write_log(root / finetune / f"resnet110/noise_{sigma}/test/sigma_{sigma}", DDN_ROWS)
    args = ["import", "published", "--storage", "s", "--experiment", "pub"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    placed = [line for line in lines if str(tmp_path) in line]  # where: as long as the path
    assert [line.split()[0] for line in placed] == ["new"]
    assert all(len(line) <= 80 for line in lines if line not in placed), lines
    finetune = (
        "pre-training then fine-tuning (finetune_cifar_from_imagenetPGD2steps) is not described "
        "by the path alone: pass --set init_from (the pre-trained model's trial_id)"
    )
    assert lines[:6] == [
        "imported 2 logs (7 rows) into pub",
        "  1 cifar10 cifar_resnet110 smoothadv ddn",
        "  1 cifar10 cifar_resnet110 smoothadv pgd",
        "skipped 7 logs (per reason; --verbose lists each):",
        "  4 header only (no rows)",
        "  3 pre-training then fine-tuning (finetune_cifar_from_imagenetPGD2steps) is not",
    ]
    assert " ".join(line.strip() for line in lines[5:8]) == f"3 {finetune}"
    assert len(lines) == 10 and lines[-1].startswith("next: sweeper envelope")
    assert not any("sigma_" in line for line in lines)  # no file named
    args[3] = "other"
    verbose = runner.invoke(app, [*args, "--verbose"], env={"COLUMNS": "80"}).stdout
    each = [line for line in verbose.splitlines() if line.startswith("skipped ")]
    assert len(each) == 7 and f"skipped {COHEN_DIR}/sigma_1.00: header only (no rows)" in each
    assert sum(line.startswith(f"  {ADV_DIR}/sigma_0.25 -> ") for line in verbose.splitlines())


def _bad(tmp_path: Path, args: list[str]) -> list[str]:
    """Run `sweeper import`, expect exit 2, only `error:` lines, and nothing written."""
    storage = tmp_path / "results"
    result = runner.invoke(app, ["import", *args, "--storage", str(storage)])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert not storage.exists()
    return lines


def test_cli_bad_input_one_error_line_each_nothing_written(tmp_path, logs):
    assert _bad(tmp_path, [str(tmp_path / "nowhere"), "--experiment", "x"]) == [
        f"error: {tmp_path / 'nowhere'}: no such directory"
    ]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello\n")
    assert (
        "no certification logs" in _bad(tmp_path, [str(tmp_path / "empty"), "--experiment", "x"])[0]
    )
    assert "--experiment is required" in _bad(tmp_path, [str(logs)])[0]
    lines = _bad(
        tmp_path,
        [
            str(tmp_path / "nowhere"),
            "--experiment",
            "x",
            "--set",
            "foo=1",
            "--set",
            "epochs",
            "--set",
            "epochs=[1, 2]",
            "--set",
            "alpha=2",
            "--set",
            "n=1.5",
            "--set",
            "seed=1",
            "--set",
            "seed=2",
        ],
    )
    assert len(lines) == 7
    assert lines[0].endswith("no such directory")
    assert lines[1].startswith("error: --set foo: unknown key (valid: ")
    assert lines[2:] == [
        "error: --set 'epochs': expected key=value",
        "error: --set epochs: expected one number, word, true/false or null, got '[1, 2]'",
        "error: --set seed: given twice",
        "error: --set n: must be an integer >= 1 (got 1.5)",
        "error: --set alpha: must be a number in (0, 1) (got 2)",
    ]


def test_cli_hyperparameters_trialconfig_rejects(tmp_path, logs):
    # One line for a --set every log rejects, not one per log (the configuration is checked
    # before a log is read: the header-only and the empty log count too).
    lines = _bad(tmp_path, [str(logs), "--experiment", "x", "--set", "arch=foo"])
    assert lines == [
        f"error: {COHEN_DIR}/sigma_0.12 and 4 more logs: unknown arch 'foo' (valid: {', '.join(ARCHS)})"
    ]
    write_log(tmp_path / "dense/cifar10/cohen/cifar_densenet40/noise_0.50", ["0\t1\t1\t0.5\t1\t1"])
    (line,) = _bad(tmp_path, [str(tmp_path / "dense"), "--experiment", "x"])
    assert line.startswith(
        "error: cifar10/cohen/cifar_densenet40/noise_0.50: unknown arch 'cifar_densenet40'"
    )
    write_log(tmp_path / "nosigma/cifar10/resnet110/test/sigma_0.25", ["0\t1\t1\t0.5\t1\t1"])
    (line,) = _bad(tmp_path, [str(tmp_path / "nosigma"), "--experiment", "x"])
    assert "no training σ in the path" in line and "--set sigma=" in line
    write_log(
        tmp_path / "two/consistency/salman/pgd_255_2/num_8/lbd_2.0/noise_0.25",
        ["0\t1\t1\t0.5\t1\t1"],
    )
    (line,) = _bad(tmp_path, [str(tmp_path / "two"), "--experiment", "x"])
    assert "the path names several methods (consistency, smoothadv): pass --set method=" in line


def test_cli_two_logs_for_one_model_or_changed_rows_are_errors(tmp_path, logs):
    write_log(tmp_path / "runs/mnist/cohen/noise_0.25_4067", ["0\t1\t1\t0.5\t1\t1"])
    write_log(tmp_path / "runs/mnist/cohen/noise_0.25_919", ["0\t1\t1\t0.7\t1\t1"])
    (line,) = _bad(tmp_path, [str(tmp_path / "runs"), "--experiment", "x"])
    assert "resolve to the same model" in line and "--set" in line
    storage = str(tmp_path / "results")
    assert (
        runner.invoke(
            app, ["import", str(logs), "--storage", storage, "--experiment", "pub"]
        ).exit_code
        == 0
    )
    write_log(logs / ADV_DIR / "sigma_0.25", ADV_ROWS[:-1])  # the log changed since
    before = {f: f.read_bytes() for f in Path(storage).rglob("*") if f.is_file()}
    result = runner.invoke(app, ["import", str(logs), "--storage", storage, "--experiment", "pub"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "already holds different rows" in result.stderr
    assert {f: f.read_bytes() for f in Path(storage).rglob("*") if f.is_file()} == before


def test_an_import_with_a_key_signs_each_model_from_its_logs_digest_and_verifies(
    tmp_path, logs, signing_env, monkeypatch
):
    """Issue 38: an imported model is attested (step import, the log's sha256); the inventory
    is signed; `sweeper verify` holds; a reader with the key counts them as attested."""
    import pyarrow.parquet as pq

    from sweeper.results.attested_rows import statement_of
    from sweeper.results.verification import verify_experiment
    from trainables.kernel.attestation import sha256_file

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    exp = exp_at(tmp_path)
    report = ingest.import_logs(logs, exp)
    for m in report.imported:
        statement = statement_of(pq.read_table(m.out), signing_env.public)
        assert statement is not None and statement.step == "import"
        assert statement.inputs == {"log": sha256_file(m.source)}
        assert statement.settings["trial_id"] == m.cfg.trial_id
    checked = verify_experiment(exp, signing_env.public)
    assert checked.failed == [] and checked.unattested == [] and checked.inventory == 1
    results = load_results(exp)
    assert results.attestations is not None and results.attestations.unattested == frozenset()
