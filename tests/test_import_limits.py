"""`sweeper import` within limits (issue 16 item 5, issue 25 section 3): every row is one
CERTIFY can write on the log's data set with the n, α and σ_cert its rows are stored with (a
radius beyond that bound refuses the import, naming the file and line), a log has a capped
number of rows, the parse streams, and an import that imported nothing exits 1 without leaving
an experiment behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import norm
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.ingest import importer as ingest
from sweeper.ingest.log_reader import LogLimits, LogRefused, LogSkip, max_printed_radius, read_log
from sweeper.results.certify_rows import load_results, max_radius
from sweeper.results.storage import Experiment
from trainables.kernel.catalog import NUM_CLASSES
from trainables.kernel.catalog import STANDARD_TEST_SIZE as TEST_SIZE
from trainables.kernel.certificates import radius_from_counts

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
HEADER = "idx\tlabel\tpredict\tradius\tcorrect\ttime"
COHEN = "cifar10/resnet110/noise_0.25/test/sigma_0.25"  # CIFAR-10, σ = 0.25: at most 0.953
GOOD = ["0\t3\t3\t0.5\t1\t1.0", "20\t7\t7\t0.9\t1\t1.0"]


def write_log(path: Path, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


# ------------------------------------------------------------------------------ the bounds
def test_the_import_bound_is_certifys_largest_radius_as_printed():
    for n, alpha, sigma in [(100_000, 0.001, 0.25), (1000, 0.01, 1.0), (10**8, 0.001, 0.5)]:
        exact = sigma * norm.ppf(alpha ** (1 / n))  # Clopper-Pearson with nA = n: α^(1/n)
        assert max_radius(sigma, n, alpha) == pytest.approx(exact, rel=1e-9)
        assert max_radius(sigma, n, alpha) == pytest.approx(
            radius_from_counts(n, n, alpha, sigma)[1], rel=1e-12
        )
        assert max_printed_radius(n, alpha, sigma) == pytest.approx(exact * 1.005, rel=1e-9)
    assert max_radius(1.0, 100_000, 0.001) == pytest.approx(3.8114, abs=1e-4)  # "about 4σ"
    assert max_printed_radius(5, 0.001, 1.0) == 5e-5  # n too small to certify: only 0


def test_class_counts_and_test_sizes_are_the_loaders():
    from trainables.datasets import INFO, load_dataset

    assert {name: info.num_classes for name, info in INFO.items()} == NUM_CLASSES
    assert len(load_dataset("digits", "test")) == TEST_SIZE["digits"]


# ------------------------------------------------------------------------------ one log
LIMITS = LogLimits.of(100_000, "cifar10", 100_000, 0.001, 0.25)


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (
            "99999999999999\t3\t3\t0.5\t1\t1.0",
            "idx 99999999999999 is past the cifar10 test set (10,000 points, idx 0..9999)",
        ),
        ("10000\t3\t3\t0.5\t1\t1.0", "idx 10000 is past the cifar10 test set"),
        ("40\t999\t999\t0.5\t1\t1.0", "label 999 or predict 999 is not a cifar10 class (0..9)"),
        ("40\t3\t10\t0.5\t0\t1.0", "label 3 or predict 10 is not a cifar10 class (0..9)"),
        (
            "99999\t3\t3\t1e300\t1\t1.0",
            "idx 99999 is past the cifar10 test set",
        ),  # the first problem
    ],
)
def test_impossible_rows_skip_the_log_naming_the_line(row, reason):
    with pytest.raises(LogSkip) as skipped:
        read_log("\n".join([HEADER, *GOOD, row]), LIMITS)
    assert str(skipped.value).startswith(f"line 4: {reason}"), str(skipped.value)


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (
            "40\t3\t3\t1e300\t1\t1.0",
            "radius 1e+300 is larger than CERTIFY can certify with n=100000, α=0.001, σ_cert=0.25 (at most 0.9576 as printed): pass --set n=..., alpha=... or sigma_cert=... as the log was certified",
        ),
        ("40\t3\t3\t0.96\t1\t1.0", "radius 0.96 is larger than CERTIFY can certify"),
        ("40\t3\t-1\t5.0\t0\t1.0", "radius 5 is larger than CERTIFY can certify"),
    ],
)
def test_a_radius_beyond_the_bound_refuses_the_log_naming_the_line(row, reason):
    with pytest.raises(LogRefused) as refused:
        read_log("\n".join([HEADER, *GOOD, row]), LIMITS)
    assert str(refused.value).startswith(f"line 4: {reason}"), str(refused.value)


def test_rows_at_the_bounds_are_read():
    rows = [
        "9999\t9\t9\t0.957\t1\t1.0",
        "0\t0\t-1\t0.0\t0\t1.0",
    ]  # last idx, last class, max radius
    cols = read_log("\n".join([HEADER, *rows]), LIMITS)
    assert cols["idx"] == [9999, 0] and cols["radius"] == [0.957, 0.0]


def test_the_row_cap_and_long_lines():
    rows = [f"{i}\t1\t1\t0.5\t1\t1.0" for i in range(5)]
    limits = LogLimits.of(4, "cifar10", 100_000, 0.001, 0.25)
    with pytest.raises(LogSkip, match=r"^line 6: more than 4 rows \(--max-rows\)$"):
        read_log("\n".join([HEADER, *rows]), limits)
    assert len(read_log("\n".join([HEADER, *rows[:4]]), limits)["idx"]) == 4
    with pytest.raises(LogSkip, match=r"^line 3: longer than 4096 characters$"):
        read_log("\n".join([HEADER, GOOD[0], "0\t" * 5000]), LIMITS)


# ------------------------------------------------------------------------------ the command
def test_a_hostile_log_is_refused_with_exit_1_and_no_experiment_left(tmp_path):
    rows = [*GOOD, "99999999999999\t999\t999\t1e300\t1\t0:00:01"]
    write_log(tmp_path / "logs" / COHEN, rows)
    store = tmp_path / "store"
    args = ["import", str(tmp_path / "logs"), "--storage", str(store), "--experiment", "pub"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    said = " ".join(result.stdout.split())  # the reason wrapped at the terminal's width
    assert f"1 {COHEN}: line 4: idx 99999999999999 is past the cifar10 test set" in said
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"error: nothing imported from {tmp_path / 'logs'}: every log was skipped"
    )
    assert not store.exists()


def test_a_larger_radius_is_imported_when_set_n_allows_it(tmp_path):
    write_log(tmp_path / "logs" / COHEN, ["0\t3\t3\t1.25\t1\t1.0"])  # σ=0.25, n=10^8: at most 1.31
    store = str(tmp_path / "store")
    args = ["import", str(tmp_path / "logs"), "--storage", store, "--experiment", "pub"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "pass --set n=..." in refused.stderr
    done = runner.invoke(app, [*args, "--set", "n=100000000"])
    assert done.exit_code == 0, done.output
    assert "imported 1 logs (1 rows)" in done.stdout


def test_max_rows_option(tmp_path):
    write_log(tmp_path / "logs" / COHEN, [f"{i}\t1\t1\t0.5\t1\t1.0" for i in range(10)])
    store = str(tmp_path / "store")
    args = ["import", str(tmp_path / "logs"), "--storage", store, "--experiment", "pub"]
    said = " ".join(runner.invoke(app, [*args, "--max-rows", "9"]).stdout.split())
    assert "line 11: more than 9 rows (--max-rows)" in said
    assert runner.invoke(app, [*args, "--max-rows", "10"]).exit_code == 0
    assert runner.invoke(app, [*args, "--max-rows", "0"]).exit_code == 2


@pytest.mark.parametrize("changed", [GOOD[:1], [*GOOD, "40\t3\t3\t5.0\t1\t1.0"], ["x"]])
def test_a_log_changed_between_check_and_write_is_an_error(tmp_path, changed):
    log = write_log(tmp_path / "logs" / COHEN, GOOD)
    exp = Experiment(str(tmp_path / "store"), "pub")
    report = ingest.plan_import(tmp_path / "logs", exp, [])
    write_log(log, changed)  # fewer rows, a radius beyond the bound, an unparseable line
    with pytest.raises(ingest.IngestError, match="changed during the import"):
        ingest.write_import(report)


# ------------------------------------------------------------------------------ issue 25 §3
# The radius bound is σ_cert·Φ⁻¹(α^(1/n)) with the σ_cert, n and α the rows are stored with.
# σ_cert is certify.py's `sigma` argument, which the reference code names the log by
# (sigma_<σ>); the model directory noise_<σ> is the training σ, and the two may differ: Cohen
# et al. published noise_0.25/test/sigma_0.50 (analyze.py's "vary train noise").
ISSUE = "cifar10/resnet110/noise_0.25/test/sigma_1000"


def cohen_bound(sigma: float, n: int = 100_000, alpha: float = 0.001) -> float:
    """CERTIFY's largest radius, from its definition (nA = n: p̲A = α^(1/n)), not the code."""
    return sigma * float(norm.ppf(alpha ** (1 / n)))


def printed_bound(sigma: float, n: int = 100_000, alpha: float = 0.001) -> float:
    """The largest radius a `{:.3}` print of it can show: half a unit of the third digit."""
    exact = cohen_bound(sigma, n, alpha)
    return exact + max(5e-3 * exact, 5e-5)


def _import(tmp_path: Path, rel: str, rows: list[str], *sets: str):
    """`sweeper import` of one log at `rel` with --set `sets`; (result, storage directory)."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    write_log(logs / rel, rows)
    args = ["import", str(logs), "--storage", str(store), "--experiment", "pub"]
    return runner.invoke(app, [*args, *(a for kv in sets for a in ("--set", kv))]), store


def _refused(result, store: Path, rel: str, line: int) -> str:
    """The one error line of a refused import that names the file and line; nothing written."""
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and not store.exists()
    (error,) = result.stderr.splitlines()
    assert error.startswith(f"error: {rel}: line {line}: radius "), error
    assert "pass --set n=..., alpha=... or sigma_cert=..." in error
    return error


def test_issue_case_sigma_1000_is_bounded_by_the_sigma_its_rows_store(tmp_path):
    """noise_0.25/…/sigma_1000 radius 3000: certify.py ran with σ = 1000 (the file's name), so
    CERTIFY allows up to 3811 and the rows are stored with σ_cert = 1000. Bounded by the
    training σ 0.25 instead, Cohen et al.'s own vary-train-noise logs would be refused."""
    row = "0\t3\t3\t3000\t1\t1.0"
    assert printed_bound(0.25) < 3000 < cohen_bound(1000)
    done, store = _import(tmp_path, ISSUE, [row])
    assert done.exit_code == 0, done.output
    frame = load_results(Experiment(str(store), "pub")).frame
    assert frame.sigma_cert.tolist() == [1000.0] and frame.sigma.tolist() == [0.25]
    assert frame.cert_id.tolist() == ["imported-sigma-1000-n-100000-alpha-0.001"]


@pytest.mark.parametrize(
    ("sets", "radius", "sigma", "n"),
    [
        (["sigma_cert=0.25"], "3000", 0.25, 100_000),
        ([], "4000", 1000, 100_000),
        (["n=1000"], "3000", 1000, 1000),
    ],
)
def test_issue_case_radius_beyond_the_stored_settings_is_refused(tmp_path, sets, radius, sigma, n):
    """The issue's log certified at σ 0.25 (--set sigma_cert), radius 4000 (beyond σ = 1000's
    3811), or n = 1000 (at most 1000·Φ⁻¹(0.001^(1/1000)) = 2.9e3): refused, file and line named."""
    rows = ["20\t7\t7\t0.5\t1\t1.0", f"0\t3\t3\t{radius}\t1\t1.0"]
    assert float(radius) > printed_bound(sigma, n)
    error = _refused(*_import(tmp_path, ISSUE, rows, *sets), ISSUE, 3)
    assert (
        f"radius {radius} is larger than CERTIFY can certify with n={n}, α=0.001, σ_cert={sigma:g}"
        in error
    )


def test_cohen_vary_train_noise_log_is_bounded_by_its_certification_sigma(tmp_path):
    """locuslab/smoothing data/certify/cifar10/resnet110/noise_0.25/test/sigma_0.50, its
    largest radius (line 4800 of the published file): above what σ 0.25 allows, within σ 0.5."""
    rel, row = "cifar10/resnet110/noise_0.25/test/sigma_0.50", "4800\t9\t9\t1.62\t1\t0:00:14.497391"
    assert printed_bound(0.25) < 1.62 < cohen_bound(0.5)
    done, store = _import(tmp_path, rel, [row])
    assert done.exit_code == 0, done.output
    assert load_results(Experiment(str(store), "pub")).frame.sigma_cert.tolist() == [0.5]
    _refused(*_import(tmp_path / "at-0.25", rel, [row], "sigma_cert=0.25"), rel, 2)


@pytest.mark.parametrize(
    ("rel", "sets", "sigma", "n", "alpha"),
    [
        (COHEN, [], 0.25, 100_000, 0.001),  # σ_cert from the file name
        ("cifar10/resnet110/noise_1.00/test/sigma_0.50", [], 0.5, 100_000, 0.001),
        ("mnist/cohen/lenet/noise_0.50", [], 0.5, 100_000, 0.001),  # jh-jeong: the training σ
        (COHEN, ["sigma_cert=0.12"], 0.12, 100_000, 0.001),
        (COHEN, ["n=1000"], 0.25, 1000, 0.001),
        (COHEN, ["alpha=0.01"], 0.25, 100_000, 0.01),
        (COHEN, ["n=100000000", "alpha=1e-6", "sigma_cert=2"], 2.0, 10**8, 1e-6),
    ],
)
def test_just_under_the_bound_is_imported_just_over_is_refused(
    tmp_path, rel, sets, sigma, n, alpha
):
    bound = printed_bound(sigma, n, alpha)
    under = [
        f"0\t3\t3\t{bound * (1 - 1e-9)!r}\t1\t1.0",
        f"1\t3\t3\t{cohen_bound(sigma, n, alpha):.3}\t1\t1.0",
    ]
    done, store = _import(tmp_path / "under", rel, under, *sets)
    assert done.exit_code == 0, done.output
    frame = load_results(Experiment(str(store), "pub")).frame
    assert set(frame.sigma_cert) == {sigma} and set(frame.n) == {n} and set(frame.alpha) == {alpha}
    over = [under[1], f"0\t3\t3\t{bound * (1 + 1e-9)!r}\t1\t1.0"]
    error = _refused(*_import(tmp_path / "over", rel, over, *sets), rel, 3)
    assert f"with n={n}, α={alpha:g}, σ_cert={sigma:g} (at most {bound:.4g} as printed)" in error


def test_a_refused_log_refuses_the_whole_import(tmp_path):
    write_log(tmp_path / "logs" / COHEN, GOOD)
    result, store = _import(tmp_path, ISSUE, ["0\t3\t3\t5000\t1\t1.0"])
    _refused(result, store, ISSUE, 2)  # the good log is not written either


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("n=-1", "error: --set n: must be an integer >= 1 (got -1)"),
        ("n=0", "error: --set n: must be an integer >= 1 (got 0)"),
        ("alpha=1", "error: --set alpha: must be a number in (0, 1) (got 1)"),
        ("alpha=0", "error: --set alpha: must be a number in (0, 1) (got 0)"),
        ("alpha=.nan", "error: --set alpha: must be a number in (0, 1) (got nan)"),
        ("sigma_cert=0", "error: --set sigma_cert: must be a number > 0 (got 0)"),
    ],
)
def test_certification_settings_the_bound_cannot_use_are_refused(tmp_path, value, error):
    result, store = _import(tmp_path, COHEN, GOOD, value)
    assert result.exit_code == 2 and result.stdout == "" and not store.exists()
    assert result.stderr.splitlines() == [error]


def test_bad_settings_are_one_line_each(tmp_path):
    result, store = _import(tmp_path, COHEN, GOOD, "n=-1", "alpha=1")
    assert result.exit_code == 2 and not store.exists()
    assert result.stderr.splitlines() == [
        "error: --set n: must be an integer >= 1 (got -1)",
        "error: --set alpha: must be a number in (0, 1) (got 1)",
    ]


def test_a_certification_sigma_of_zero_in_the_name_is_refused(tmp_path):
    rel = "cifar10/resnet110/noise_0.25/test/sigma_0.00"
    result, store = _import(tmp_path, rel, GOOD)
    assert result.exit_code == 2 and not store.exists()
    assert result.stderr.splitlines() == [
        f"error: {rel}: the file name says certification σ 0; CERTIFY needs σ > 0: "
        "pass --set sigma_cert=... as the log was certified"
    ]
    assert _import(tmp_path / "set", rel, GOOD, "sigma_cert=0.25")[0].exit_code == 0


# ------------------------------------------------------------------------------ memory
def _peak_rss_kb(args: list[str]) -> int:
    """Peak resident memory (kB) of `sweeper ARGS` in a fresh process."""
    code = (
        "import resource, sys\nfrom sweeper.cli import app\ntry:\n    app()\nfinally:\n"
        "    print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600
    )
    return int(proc.stderr.rsplit("maxrss ", 1)[1].split()[0])


def test_the_parse_streams_a_log_much_larger_than_the_memory_it_takes(tmp_path):
    """A 2,000,000-row log (43 MB) is refused at its first impossible row without being
    read into memory: the import's peak RSS stays within 25 MB of importing a 2-row log."""
    rows = 2_000_000
    big = tmp_path / "big" / COHEN
    big.parent.mkdir(parents=True)
    with big.open("w") as f:
        f.write(HEADER + "\n")
        f.writelines(f"{i}\t{i % 10}\t{i % 10}\t0.5\t1\t1.5\n" for i in range(rows))
    write_log(tmp_path / "small" / COHEN, GOOD)
    common = ["--storage", str(tmp_path / "store"), "--experiment", "pub"]
    small_kb = _peak_rss_kb(["import", str(tmp_path / "small"), *common])
    big_kb = _peak_rss_kb(["import", str(tmp_path / "big"), *common, "--max-rows", str(rows)])
    assert big.stat().st_size > 40e6
    assert big_kb - small_kb < 25_000, (small_kb, big_kb)


def test_a_full_imagenet_log_takes_under_a_kilobyte_a_row(tmp_path):
    """The largest log that can be valid (ImageNet's 50,000 validation images)."""
    rows = TEST_SIZE["imagenet"]
    lines = [f"{i}\t{i % 1000}\t{i % 1000}\t{(i % 95) / 100}\t1\t1.5" for i in range(rows)]
    write_log(tmp_path / "big" / "imagenet/resnet50/noise_0.25/test/sigma_0.25", lines)
    write_log(tmp_path / "small" / "imagenet/resnet50/noise_0.25/test/sigma_0.25", GOOD)
    common = ["--storage", str(tmp_path / "store"), "--experiment"]
    small_kb = _peak_rss_kb(["import", str(tmp_path / "small"), *common, "small"])
    big_kb = _peak_rss_kb(["import", str(tmp_path / "big"), *common, "big"])
    assert (tmp_path / "store" / "big" / "sweep.json").is_file()
    assert (big_kb - small_kb) * 1024 / rows < 1024, (small_kb, big_kb)
