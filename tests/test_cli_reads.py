"""What `sweeper envelope` and `sweeper table` print (sweeper/cli/reads.py) on small experiments
written with the project's own writers, no Ray: the bad-option errors naming the flag, the
tables in every format, the stderr lines saying what was read (models, rows, trials without
results, missing shards, data-dependent models finished or awaiting their memory pass), the
empirical overlay (`--empirical`) and the figure `--plot` draws."""

from __future__ import annotations

import io
from pathlib import Path

import certified_rows
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.results.certify_rows import MEMORY_SCHEMA, shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import MEMORY, Experiment
from sweeper.results.sweep_file import write_sweep
from sweeper.run.empirical_stage import EmpiricalSetting, empirical_table
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings

runner = CliRunner()
CERT = CertifySpec(n0=10, n=100, alpha=0.001, skip=1, max_points=None)
DDRS = CertifySpec(n0=10, n=100, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
G = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
S = TrialConfig(
    dataset="digits",
    method="smoothadv",
    sigma=0.5,
    attack="pgd",
    epsilon=0.5,
    steps=2,
    m_train=1,
    epochs=1,
)
PENDING = G.replace(sigma=1.0)  # in the sweep, never certified
# (predict, label, radius) per test point, certified at the training σ with n = 100: the
# largest radius is 0.375 for G and 0.750 for S. Certified accuracy at 0, 0.25, 0.5, 0.75, 1:
# G 0.75, 0.25, 0, 0, 0; S 0.5, 0.5, 0.25, 0, 0.
POINTS = {
    G: ([1, 2, 3, -1], [1, 2, 3, 4], [0.1, 0.3, 0.2, 0.0]),
    S: ([1, 2, 5, -1], [1, 2, 3, 4], [0.6, 0.4, 0.5, 0.0]),
}


def write_shard(
    exp: Experiment,
    cfg: TrialConfig,
    points,
    shard: int = 0,
    of: int = 1,
    cert: CertifySpec = CERT,
    **extra,
) -> None:
    """`points` = (predict, label, radius) as CERTIFY writes them for shard `shard` of `of`
    (its arithmetic on the fewest votes whose radius reaches each radius: `REACHED`), the
    trial's trial.json beside; `extra`: columns to set (smoothing, sigma_cert per point)."""
    predict, label, radius = points
    k = len(predict)
    idx = list(range(shard * k, shard * k + k))
    sigmas = extra.get("sigma_cert", [cfg.sigma] * k)
    cols = certified_rows.reaching(cert.n, cert.alpha, idx, label, predict, radius, sigmas)
    cols = {**cols, "time_s": [0.01] * k, **extra}
    certified_rows.trained(exp, cfg)
    constants = {"n0": cert.n0, "n": cert.n, "alpha": cert.alpha}
    table = shard_table(cfg, exp.name, cert.cert_id, constants, cols, {"config": cfg.to_dict()})
    write_table(table, exp.shard_path(cfg.trial_id, cert.cert_id, shard, of))


def make(storage: Path, trials=(G, S)) -> Experiment:
    exp = Experiment(str(storage), "exp")
    write_sweep(exp, {"space": {"name": "hand"}, "trials": [c.to_dict() for c in trials]})
    for cfg in (G, S):
        write_shard(exp, cfg, POINTS[cfg])
    return exp


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Path:
    """G and S certified (4 points each), the sweep planned just them; a terminal of 80."""
    monkeypatch.setenv("COLUMNS", "80")
    make(tmp_path)
    return tmp_path


def run(storage: Path, *args: str, code: int = 0):
    result = runner.invoke(app, [*args, "--storage", str(storage), "--experiment", "exp"])
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def errors(storage: Path, *args: str) -> list[str]:
    """Exit 2 and nothing on stdout: the `error:` lines of stderr."""
    result = run(storage, *args, code=2)
    assert result.stdout == "" and isinstance(result.exception, SystemExit)
    return result.stderr.splitlines()


def csv(result) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(result.stdout))


def settings_line() -> str:
    """What stderr says of G's and S's certification setting."""
    return (
        f"certified with {CERT.cert_id}: n0 = 10, n = 100, α = 0.001, skip = 1, max_points = all, "
        "2 models, 4 points each at most; largest certifiable radius σ·Φ⁻¹(α^(1/n)): 0.375 at "
        "σ = 0.25, 0.750 at σ = 0.5 (n/a: beyond it)"
    )


# ------------------------------------------------------------------------------- options
def test_radius_or_radii_not_both(storage):
    assert errors(storage, "envelope", "--radius", "1", "--radii", "0,1") == [
        "error: pass --radius or --radii, not both"
    ]


def test_a_radius_below_zero_is_refused_and_zero_is_a_radius(storage):
    assert errors(storage, "envelope", "--radius", "-0.5") == [
        "error: --radius must be >= 0 (got -0.5)"
    ]
    at_zero = csv(run(storage, "envelope", "--radius", "0", "--format", "csv"))
    assert at_zero[["radius", "certified_accuracy", "trial_id"]].values.tolist() == [
        [0.0, 0.75, G.trial_id]
    ]
    at_half = csv(run(storage, "envelope", "--radius", "0.5", "--format", "csv"))
    assert at_half[["radius", "certified_accuracy", "trial_id"]].values.tolist() == [
        [0.5, 0.25, S.trial_id]
    ]


@pytest.mark.parametrize("command", ["envelope", "table"])
def test_an_unknown_format_is_one_error_naming_the_formats(storage, command):
    assert errors(storage, command, "--format", "xml") == [
        "error: --format 'xml' is not one of table, csv, json, markdown"
    ]


@pytest.mark.parametrize("name", ["figure", "figure.jpg", "e.png.txt"])
def test_plot_needs_a_figure_suffix(storage, name):
    assert errors(storage, "envelope", "--plot", name) == [
        f"error: --plot {name!r}: the file name must end in .png, .pdf or .svg"
    ]
    assert not Path(name).exists()


@pytest.mark.parametrize(
    ("name", "magic"),
    [
        ("e.pdf", b"%PDF"),
        ("e.svg", b"<?xml"),
        ("E.PNG", b"\x89PNG"),
        ("v1.d/run.2.png", b"\x89PNG"),
    ],
)
def test_plot_writes_png_pdf_and_svg_whatever_the_case_and_the_dots(storage, name, magic):
    result = run(storage, "envelope", "--radii", "0,0.5", "--plot", name)
    assert Path(name).read_bytes().startswith(magic)
    assert f"figure written to {name}" in result.stderr.splitlines()


# ------------------------------------------------------------------------------- reading
def test_only_selects_by_a_setting_the_envelope_does_not_show(storage):
    longer = G.replace(epochs=3)  # right everywhere, up to its reach
    make(storage, (G, S, longer))
    write_shard(Experiment(str(storage), "exp"), longer, ([1, 2, 3, 4], [1, 2, 3, 4], [0.3] * 4))
    every = csv(run(storage, "envelope", "--radii", "0,0.25,0.5", "--format", "csv"))
    assert every["trial_id"].tolist() == [longer.trial_id, longer.trial_id, S.trial_id]
    one_epoch = run(
        storage, "envelope", "--radii", "0,0.25,0.5", "--format", "csv", "--only", "epochs=1"
    )
    assert csv(one_epoch)["certified_accuracy"].tolist() == [0.75, 0.5, 0.25]
    assert csv(one_epoch)["trial_id"].tolist() == [G.trial_id, S.trial_id, S.trial_id]


def damage_column(path: str, column: str) -> None:
    """Overwrite `column`'s pages in the Parquet file: reading that column fails."""
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    [chunk] = [
        row_group.column(i)
        for i in range(row_group.num_columns)
        if row_group.column(i).path_in_schema == column
    ]
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(Path(path).read_bytes())
    data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    Path(path).write_bytes(bytes(data))


def test_the_envelope_reads_only_the_columns_it_needs(storage):
    """Of 80-odd columns the envelope reads the few it shows (a 6,440-model read is mostly
    the others): a file whose time_s pages are damaged still gives the envelope."""
    path = Experiment(str(storage), "exp").shard_path(G.trial_id, CERT.cert_id, 0, 1)
    damage_column(path, "time_s")
    with pytest.raises(OSError):
        pq.read_table(path, columns=["time_s"])
    envelope = csv(run(storage, "envelope", "--radii", "0,0.25,0.5", "--format", "csv"))
    assert envelope["certified_accuracy"].tolist() == [0.75, 0.5, 0.25]
    assert envelope["trial_id"].tolist() == [G.trial_id, S.trial_id, S.trial_id]


def write_garbage(path: str) -> str:
    Path(path).parent.mkdir(parents=True)
    Path(path).write_bytes(b"\x00garbage" * 50)
    return path


def test_a_corrupt_file_stops_the_read(storage):
    bad = write_garbage(
        Experiment(str(storage), "exp").shard_path("0123456789ab", CERT.cert_id, 0, 1)
    )
    [line] = errors(storage, "envelope", "--radii", "0,0.5", "--format", "csv")
    assert line.startswith(f"error: corrupt results file {bad}: not a readable Parquet file")
    assert line.endswith("recomputes what is missing)")


def test_an_invalid_file_is_named_and_left_out(storage, capsys):
    from sweeper.cli.reads import load_selected

    before = csv(run(storage, "envelope", "--radii", "0,0.5", "--format", "csv"))
    exp = Experiment(str(storage), "exp")
    bad = exp.shard_path("0123456789ab", CERT.cert_id, 0, 1)
    Path(bad).parent.mkdir(parents=True)
    pq.write_table(pa.table({"idx": [0, 1]}), bad)  # readable, not a results file
    skipped = run(storage, "envelope", "--radii", "0,0.5", "--format", "csv")
    assert skipped.stderr.splitlines()[0].startswith(f"warning: left out {bad}: column ")
    assert csv(skipped).equals(before)  # never a number from it
    strict = run(storage, "envelope", "--radii", "0,0.5", "--format", "csv", "--strict", code=1)
    assert strict.stdout == skipped.stdout
    assert strict.stderr.splitlines()[-1].startswith("error: --strict: 1 files and 0 models")
    capsys.readouterr()
    read = load_selected(str(storage), "exp", None, [])  # as the commands do
    assert [line.partition(": ")[0] for line in read.left_out] == [bad]
    assert read.left_out == read.results.invalid
    assert capsys.readouterr().err.startswith(f"warning: left out {bad}: ")


# ----------------------------------------------------------------------- what was read
CI_NOTE = (
    "95% CI: Clopper–Pearson interval of the winner's certified accuracy over 4 test points; "
    "≈: the test points do not tell the winner from the runner-up (McNemar's exact test on the "
    "points both certified, p ≥ 0.05; csv/json: paired_p)"
)


@pytest.mark.parametrize("fmt", ["csv", "table"])
def test_stderr_says_what_was_read_and_which_planned_trials_have_no_results(tmp_path, fmt):
    make(tmp_path, trials=(G, S, PENDING))
    result = run(tmp_path, "envelope", "--radii", "0,0.5", "--format", fmt)
    assert result.stderr.splitlines() == [
        *(
            [
                "8 more columns with --wide (ACR, attack, σ, ε, T, m, models, max r): a table "
                "132 columns wide (this one fits 80)",
                CI_NOTE,
            ]
            if fmt == "table"
            else []
        ),
        settings_line(),
        "2 models, 8 certified points",
        "1 of the sweep's 3 trials have no results yet",
    ]


def test_without_a_sweep_no_trial_is_counted_missing(storage):
    """Results with no sweep.json (hand-made ones) declare nothing to compare with."""
    exp = Experiment(str(storage), "exp")
    Path(exp.sweep_json).unlink()
    result = run(storage, "envelope", "--radii", "0,0.5", "--format", "csv")
    assert result.stderr.splitlines() == [settings_line(), "2 models, 8 certified points"]


def test_a_sweep_that_cannot_be_read_counts_nothing(storage):
    """A sweep.json that is not JSON is one error naming it (nothing is declared, so no row
    could count); one whose trial is no config declares no trial: every model is left out,
    named."""
    exp = Experiment(str(storage), "exp")
    Path(exp.sweep_json).write_bytes(b"{not json")
    (line,) = errors(storage, "envelope", "--radii", "0,0.5")
    assert line.startswith(f"error: cannot read {exp.sweep_json} (not JSON: ")
    Path(exp.sweep_json).write_bytes(b'{"trials": [{"sigma": "x"}]}')
    result = run(storage, "envelope", "--radii", "0,0.5", code=2)
    left = [x for x in result.stderr.splitlines() if x.startswith("warning: left out ")]
    assert len(left) == 2 and all("not a trial of the sweep" in x for x in left), left


def test_models_missing_shards_are_counted_and_the_first_ten_named(tmp_path):
    exp = make(tmp_path)
    partial = [G.replace(sigma=0.3 + i / 100) for i in range(11)]
    write_sweep(exp, {"space": {"name": "hand"}, "trials": [c.to_dict() for c in (G, S, *partial)]})
    for i, cfg in enumerate(partial):  # shard 0 of 2 (1 missing) or of 3 (2 missing)
        write_shard(exp, cfg, POINTS[G], 0, 2 + i % 2)
    missing = {cfg.trial_id: 1 + i % 2 for i, cfg in enumerate(partial)}
    named = ", ".join(
        f"{t} ({missing[t]} shard{'s' * (missing[t] > 1)})" for t in sorted(missing)[:10]
    )
    err = run(tmp_path, "envelope", "--radii", "0", "--format", "csv").stderr.splitlines()
    assert err[-1] == f"11 models are missing shards (partial results): {named}"
    assert err[-2] == "13 models, 52 certified points"


def test_an_empty_selection_is_zero_models(storage, capsys):
    """What `load_selected` returns for an experiment with no rows (the commands stop there)."""
    from sweeper.api.reading import Reading
    from sweeper.cli.read_notes import print_coverage
    from sweeper.results.certify_rows import load_results

    exp = Experiment(str(storage), "exp")
    results = load_results(exp)
    print_coverage(Reading(exp, results, results.frame.iloc[:0], 0))
    assert capsys.readouterr().err.splitlines() == ["0 models, 0 certified points"]


# ----------------------------------------------------------------- data-dependent models
D = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=2, epochs=1)
AWAITING = D.replace(sigma=0.12)
DEPENDENT = {"smoothing": ["data-dependent"] * 4}


@pytest.fixture
def ddrs_storage(tmp_path, monkeypatch) -> Path:
    """G and S at fixed σ; D certified with DDRS (per-point σ up to 1.2, reach 1.801) and
    its memory pass written (it changed points 1 and 2: 0.75 at r = 0, 0.5 at r = 0.5);
    AWAITING certified with DDRS, right at radius 2 everywhere, before its memory pass."""
    monkeypatch.setenv("COLUMNS", "80")
    exp = make(tmp_path, trials=(G, S, D, AWAITING))
    write_shard(
        exp,
        D,
        ([1, 2, 3, 4], [1, 2, 3, 4], [0.9, 0.8, 0.4, 0.3]),
        cert=DDRS,
        sigma_cert=[1.0, 1.2, 1.1, 1.0],
        **DEPENDENT,
    )
    shard = exp.shard_path(D.trial_id, DDRS.cert_id, 0, 1)
    raw = pq.read_table(shard).column("radius").to_pylist()  # the points it did not change
    memory = {
        "trial_id": [D.trial_id] * 4,
        "cert_id": [DDRS.cert_id] * 4,
        "idx": [0, 1, 2, 3],
        "predict_memory": [1, 2, -1, 4],
        "radius_memory": [raw[0], 0.7, 0.0, raw[3]],
        "correct_memory": [True, True, False, True],
        "memory_changed": [False, True, True, False],
    }
    folder = Path(exp.setting_dir("certify", D.trial_id, DDRS.cert_id))
    pq.write_table(pa.Table.from_pydict(memory, schema=MEMORY_SCHEMA), folder / MEMORY)
    write_shard(
        exp,
        AWAITING,
        ([1, 2, 3, 4], [1, 2, 3, 4], [2.0] * 4),
        cert=DDRS,
        sigma_cert=[2.0] * 4,
        **DEPENDENT,
    )
    return tmp_path


DDRS_STDERR = [
    f"certified with {DDRS.cert_id}: n0 = 10, n = 100, α = 0.001, skip = 1, max_points = all, "
    "1 model, 4 points each at most; largest certifiable radius σ·Φ⁻¹(α^(1/n)) "
    "(data-dependent: at the largest σ_x): 1.801 at σ = 0.5 (n/a: beyond it)",
    "3 models, 12 certified points",
    "data-dependent smoothing: 1 model; the memory pass adjusted 2 of 4 certificates",
]
AWAITS = (
    "1 data-dependent model awaits its memory pass and is left out: re-run `sweeper "
    "certify <space> --ddrs` to finish them"
)


def test_fixed_and_data_dependent_side_by_side_at_80_columns(ddrs_storage):
    result = run(ddrs_storage, "envelope", "--radii", "0,0.5")
    g, s, d = G.trial_id, S.trial_id, D.trial_id
    assert result.stdout.splitlines() == [
        "                            upper envelope of exp                            ",
        "┏━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━┓",
        "┃ smoothing      ┃ radius ┃ cert. acc ┃ 95% CI      ┃ winner         ┃    σ ┃",
        "┡━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━┩",
        f"│ data-dependent │      0 │     0.750 │ 0.194–0.994 │ {d}   │  0.5 │",
        f"│ data-dependent │    0.5 │     0.500 │ 0.068–0.932 │ {d}   │  0.5 │",
        f"│ fixed          │      0 │     0.750 │ 0.194–0.994 │ {g} ≈ │ 0.25 │",
        f"│ fixed          │    0.5 │     0.250 │ 0.006–0.806 │ {s} ≈ │  0.5 │",
        "└────────────────┴────────┴───────────┴─────────────┴────────────────┴──────┘",
    ]
    assert result.stderr.splitlines() == [
        AWAITS,
        "9 more columns with --wide (clean acc, ACR, method, attack, ε, T, m, models, max r): "
        "a table 149 columns wide (this one fits 80)",
        CI_NOTE,
        settings_line(),
        *DDRS_STDERR,
    ]


MODEL_CI_NOTE = (
    "95% CI: Clopper–Pearson interval of each model's certified accuracy at that radius over 4 "
    "test points (csv/json: r=..._ci_low, r=..._ci_high)"
)


def test_a_model_awaiting_its_memory_pass_is_left_out_of_every_format(ddrs_storage):
    envelope = run(ddrs_storage, "envelope", "--radii", "0,0.5,2", "--format", "csv")
    assert envelope.stdout.splitlines()[0].startswith("smoothing,radius,certified_accuracy,")
    got = csv(envelope)[["smoothing", "radius", "certified_accuracy", "trial_id"]]
    assert got.fillna("-").values.tolist() == [
        ["data-dependent", 0.0, 0.75, D.trial_id],
        ["data-dependent", 0.5, 0.5, D.trial_id],
        ["data-dependent", 2.0, 0.0, "-"],
        ["fixed", 0.0, 0.75, G.trial_id],
        ["fixed", 0.5, 0.25, S.trial_id],
        ["fixed", 2.0, 0.0, "-"],
    ]
    assert envelope.stderr.splitlines() == [AWAITS, settings_line(), *DDRS_STDERR]
    table = run(ddrs_storage, "table", "--radii", "0,0.5", "--format", "csv")
    assert csv(table)["trial_id"].tolist() == [D.trial_id, S.trial_id, G.trial_id]
    assert table.stderr.splitlines() == [AWAITS, MODEL_CI_NOTE, settings_line(), *DDRS_STDERR]


def test_fixed_sigma_models_await_nothing(storage):
    result = run(storage, "envelope", "--radii", "0", "--format", "csv")
    assert result.stderr.splitlines() == [settings_line(), "2 models, 8 certified points"]


# ---------------------------------------------------------------------- terminal columns
def test_columns_with_nothing_in_them_are_left_out_even_wide(tmp_path):
    """Gaussian models only: no attack, ε or T column, whether their cells are empty (the
    winners have none) or "-" (nobody wins at 0.5, beyond G's reach)."""
    exp = Experiment(str(tmp_path), "exp")
    write_shard(exp, G, POINTS[G])
    result = run(tmp_path, "envelope", "--radii", "0,0.5", "--wide")
    rows = [line for line in result.stdout.splitlines() if line[:1] in ("┃", "│")]
    shown = ["radius", "cert. acc", "95% CI", "winner", "clean acc", "ACR", "method", "σ", "m"]
    assert [[c.strip() for c in row[1:-1].split(row[0])] for row in rows] == [
        [*shown, "models", "max r"],
        [
            "0",
            "0.750",
            "0.194–0.994",
            G.trial_id,
            "0.750",
            "0.154",
            "gaussian",
            "0.25",
            "1",
            "1",
            "0.375",
        ],
        ["0.5", "n/a", "-", "-", "-", "-", "-", "-", "-", "1", "0.375"],
    ]


def test_an_envelope_printed_fits_the_terminal_unless_told_wide(storage, capsys):
    from sweeper.cli.reads import _print_table
    from sweeper.results.certify_rows import load_results
    from sweeper.results.envelope import envelope

    table = envelope(load_results(Experiment(str(storage), "exp")).frame, [0.0, 0.5])
    _print_table(table, "table", "the envelope")
    out, err = capsys.readouterr()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert err.splitlines() == [
        "8 more columns with --wide (ACR, attack, σ, ε, T, m, models, max r): a table 132 "
        "columns wide (this one fits 80)",
        CI_NOTE,
    ]


# ------------------------------------------------------------------ the empirical overlay
def attacks(
    exp: Experiment,
    cfg: TrialConfig,
    eps: float,
    m_test: int | None,
    correct: list,
    shard: int = 0,
    of: int = 1,
) -> str:
    """SmoothAdv-PGD (T = 2) with `m_test` noise draws at radius `eps` (0: no attack) and
    PREDICT on the points of shard `shard` of `of`, each `correct` or not; the file's path."""
    setting = EmpiricalSetting(
        eps,
        m_test,
        2 if eps else None,
        "plugin" if eps else None,
        n=100,
        alpha=0.001,
        skip=1,
        max_points=None,
        shard_size=4,
        batch_size=400,
    )
    k = len(correct)
    cols = {
        "idx": list(range(shard * k, shard * k + k)),
        "label": [1] * k,
        "predict": [1 if c else 2 for c in correct],
        "correct": correct,
        "perturbation_norm": [eps] * k,
        "time_s": [0.01] * k,
    }
    path = exp.shard_path(cfg.trial_id, setting.emp_id, shard, of, "empirical")
    write_table(empirical_table(cfg, exp.name, setting, cols, {"config": cfg.to_dict()}), path)
    return path


@pytest.fixture
def attacked(storage) -> Path:
    """G and S attacked at ε = 0.5 with m_test 1 and 8. Under its strongest attack G is right
    on 1 of 4 points (0.75 unattacked), S on 2 of 4 (0.5 unattacked)."""
    exp = Experiment(str(storage), "exp")
    yes, no = True, False
    attacks(exp, G, 0.0, None, [yes, yes, yes, no])
    attacks(exp, G, 0.5, 1, [yes, yes, no, no])
    attacks(exp, G, 0.5, 8, [yes, no, no, no])
    attacks(exp, S, 0.0, None, [yes, yes, no, no])
    attacks(exp, S, 0.5, 1, [yes, yes, no, no])
    attacks(exp, S, 0.5, 8, [yes, no, yes, no])
    return storage


EMPIRICAL = (
    "accuracy under each model's strongest attack (lowest over m_test), best model per radius"
)


def test_the_best_accuracy_under_attack_beside_the_envelope(attacked):
    """At 0 the best unattacked accuracy (G's 0.75), at 0.5 the best under the strongest
    attack (S's 0.5, not G's 0.5 under its weaker attack), none at 0.25 (not attacked)."""
    result = run(attacked, "envelope", "--radii", "0,0.25,0.5", "--empirical", "--format", "csv")
    got = csv(result)[["radius", "certified_accuracy", "empirical_accuracy"]]
    assert got.fillna(-1).values.tolist() == [[0.0, 0.75, 0.75], [0.25, 0.5, -1], [0.5, 0.25, 0.5]]
    assert result.stderr.splitlines() == [
        f"empirical: 2 models, 24 attacked points; {EMPIRICAL}",
        settings_line(),
        "2 models, 8 certified points",
    ]


def test_the_empirical_column_at_80_columns(attacked):
    result = run(attacked, "envelope", "--radii", "0,0.25,0.5", "--empirical")
    g, s = G.trial_id, S.trial_id
    assert result.stdout.splitlines() == [
        "                             upper envelope of exp                              ",
        "┏━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━┳━━━━━━━━━━┓",
        "┃ radius ┃ cert. acc ┃ 95% CI      ┃ winner         ┃ clean acc ┃ T ┃ emp. acc ┃",
        "┡━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━╇━━━━━━━━━━┩",
        f"│      0 │     0.750 │ 0.194–0.994 │ {g} ≈ │     0.750 │   │    0.750 │",
        f"│   0.25 │     0.500 │ 0.068–0.932 │ {s} ≈ │     0.500 │ 2 │          │",
        f"│    0.5 │     0.250 │ 0.006–0.806 │ {s} ≈ │     0.500 │ 2 │    0.500 │",
        "└────────┴───────────┴─────────────┴────────────────┴───────────┴───┴──────────┘",
    ]


def test_the_empirical_overlay_follows_only_and_by(attacked):
    base = ["envelope", "--radii", "0,0.5", "--empirical", "--format", "csv"]
    only_g = run(attacked, *base, "--only", "sigma=0.25")
    assert csv(only_g)["empirical_accuracy"].tolist() == [0.75, 0.25]
    assert only_g.stderr.splitlines()[0] == f"empirical: 1 model, 12 attacked points; {EMPIRICAL}"
    by_sigma = csv(run(attacked, *base, "--by", "sigma"))
    assert by_sigma[["sigma", "radius", "empirical_accuracy"]].values.tolist() == [
        [0.25, 0.0, 0.75],
        [0.25, 0.5, 0.25],
        [0.5, 0.0, 0.5],
        [0.5, 0.5, 0.5],
    ]


def test_no_empirical_results_is_one_error(storage):
    assert errors(storage, "envelope", "--empirical") == [
        "error: no empirical robustness results in exp (check --only, or run `sweeper "
        "empirical <space>`)"
    ]


def test_an_invalid_empirical_file_is_left_out_of_the_overlay(attacked):
    exp = Experiment(str(attacked), "exp")
    bad = write_garbage(exp.shard_path(G.trial_id, "clean_x", 0, 1, "empirical"))
    [line] = errors(attacked, "envelope", "--radii", "0", "--empirical")
    assert line.startswith(f"error: corrupt results file {bad}: not a readable Parquet file")
    Path(bad).unlink()
    pq.write_table(pa.table({"idx": [0]}), bad)  # readable, not an empirical results file
    skipped = run(attacked, "envelope", "--radii", "0", "--empirical", "--format", "csv")
    assert skipped.stderr.splitlines()[0].startswith(f"warning: left out {bad}: column ")
    assert csv(skipped)["empirical_accuracy"].tolist() == [0.75]


def test_empirical_settings_missing_shards_are_counted(attacked):
    exp = Experiment(str(attacked), "exp")
    attacks(exp, S, 1.0, 8, [True, False], 0, 2)  # shard 1 of 2 not written
    attacks(exp, G, 1.0, 8, [False, False], 1, 3)  # shards 0 and 2 of 3 not written
    result = run(attacked, "envelope", "--radii", "0,1", "--empirical", "--format", "csv")
    assert csv(result)["empirical_accuracy"].tolist() == [0.75, 0.5]
    assert result.stderr.splitlines()[:2] == [
        f"empirical: 2 models, 28 attacked points; {EMPIRICAL}",
        "2 empirical settings are missing shards",
    ]


def test_an_experiment_removed_while_read_is_one_error(attacked, monkeypatch):
    """Another process moves the experiment away (`--restart`) between reading the
    certificates and the attacks."""
    from sweeper.results import envelope as env

    exp = Experiment(str(attacked), "exp")
    real = env.envelope

    def then_moved(*args):
        table = real(*args)
        Path(exp.root).rename(attacked / "moved")
        return table

    monkeypatch.setattr(env, "envelope", then_moved)
    assert errors(attacked, "envelope", "--empirical") == [
        f"error: no experiment at {exp.root}: check --storage and --experiment"
    ]


# ---------------------------------------------------------------------------- the figure
@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures `--plot` draws (the FigureData its file is rendered from)."""
    from sweeper.report import render

    figures, real = [], render.render_figure

    def keep(figure, fmt):
        figures.append(figure)
        return real(figure, fmt)

    monkeypatch.setattr(render, "render_figure", keep)
    return figures


def test_the_figure_draws_each_group_the_attacks_and_the_asked_radii(attacked, drawn):
    result = run(
        attacked,
        "envelope",
        "--radii",
        "0:0.5:0.25",
        "--by",
        "sigma",
        "--empirical",
        "--plot",
        "e.svg",
    )
    assert Path("e.svg").read_bytes().startswith(b"<?xml")
    assert result.stderr.splitlines()[-1] == "figure written to e.svg"
    [figure] = drawn
    assert figure.caption == "exp: 2 models"
    assert [c.label for c in figure.curves] == ["σ = 0.25", "σ = 0.5", "upper envelope"]
    assert figure.radii[0] == 0.0 and figure.radii[-1] == 0.5  # as asked, not to S's reach
    [(x, y, label)] = figure.dashed
    assert (x.tolist(), y.tolist(), label) == ([0.0, 0.5], [0.75, 0.5], "empirical (SmoothAdv-PGD)")


def test_the_figure_counts_models_not_trials(storage, drawn):
    other = CertifySpec(n0=10, n=100, alpha=0.01, skip=1, max_points=None)
    write_shard(Experiment(str(storage), "exp"), G, POINTS[G], cert=other)
    run(storage, "envelope", "--radii", "0,0.5", "--plot", "e.png")
    [figure] = drawn
    assert figure.caption == "exp: 3 models" and not figure.dashed


def test_the_per_model_table_at_80_columns_shows_the_radii_that_matter(storage):
    """Issue 41 item 4: without --radii the terminal shows the radii up to the last one a
    model certifies a point at (G and S: 0, 0.25, 0.5), before the other hyperparameters and
    the intervals, and says what it left out and how to see it; csv keeps every radius."""

    def radii(result) -> list[str]:
        header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
        cells = [c.strip() for c in header[1:-1].split("┃")]
        return [c for c in cells if c.startswith("r=") and not c.endswith("CI")]

    result = run(storage, "table")
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert radii(result) == ["r=0", "r=0.25", "r=0.5"]
    hint, note = result.stderr.splitlines()[:2]
    assert hint.startswith("4 more columns with --wide (r=0 95% CI, r=0.25 95% CI, r=0.5 95% CI,")
    assert note == (
        "r=0.75 to r=2.25 left out: no model certifies a point there (--radii chooses the "
        "radii; csv and json hold 0:2.25:0.25)"
    )
    chosen = run(storage, "table", "--radii", "0.5,1")
    assert radii(chosen) == ["r=0.5", "r=1"] and "left out: no model" not in chosen.stderr
    every = csv(run(storage, "table", "--format", "csv"))
    assert [c for c in every.columns if c.startswith("r=") and "_ci_" not in c][-1] == "r=2.25"


def test_a_hint_of_many_columns_left_out_names_nine(capsys, monkeypatch):
    """The --wide hint names at most 9 columns (8 and how many more): 22 names made a line
    of 300 characters."""
    from sweeper.cli import display

    monkeypatch.setenv("COLUMNS", "40")
    columns = [display.Column(f"c{i}", ["1234567"]) for i in range(20)]
    display.print_table("t", columns, [c.header for c in columns], wide=False)
    (hint,) = capsys.readouterr().err.splitlines()
    assert hint.startswith("17 more columns with --wide (c3, c4, c5, c6, c7, c8, c9, c10, 9 more)")
