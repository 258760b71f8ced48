"""What the read commands print and draw (issue 17): no winner where nothing is certified in
any format, one precision and whole integers, tables that fit 80 columns with whole numbers
and ids, the certification settings and the largest certifiable radius (n/a beyond it),
--only and a conflicting sweep explained, and the figures' plotted data."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import certified_rows
import numpy as np
import pandas as pd
import pytest
import typer
from scipy.stats import beta, norm
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import CertifySpec
from sweeper.report.build import build_report
from sweeper.report.figures import GROUPED, draw_figure, figure_plan
from sweeper.report.render import envelope_figure
from sweeper.results.certify_rows import load_results, max_radius, shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import record_settings, write_sweep
from trainables.kernel.config import TrialConfig

runner = CliRunner()
CERT = CertifySpec(n0=10, n=100, alpha=0.001, skip=1, max_points=None)
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
# (predict, label, radius) per test point; certified at the training σ with n = 100, so the
# largest radius is 0.3751 for G and 0.7502 for S. Each radius is reached by the fewest of the
# 100 votes that certify it (VOTES; an abstention has 33): the rows' radii are CERTIFY's, at or
# just above these (G: .1066, .3103, .2003; S: .6207, .4007, .5068).
POINTS = {
    G: ([1, 2, 3, -1], [1, 2, 3, 4], [0.1, 0.3, 0.2, 0.0]),
    S: ([1, 2, 5, -1], [1, 2, 3, 4], [0.6, 0.4, 0.5, 0.0]),
}
VOTES = {G: [81, 98, 91, 33], S: [98, 91, 95, 33]}
RADII = "0:1:0.25"
REACH = {cfg: float(max_radius(cfg.sigma, CERT.n, CERT.alpha)) for cfg in POINTS}


def radius(votes: int, sigma: float) -> float:
    """The radius CERTIFY gives `votes` of n = 100 at σ, from the papers' formulas:
    σ·Φ⁻¹ of the Clopper–Pearson lower bound beta.ppf(α, k, n − k + 1)."""
    return sigma * float(norm.ppf(beta.ppf(CERT.alpha, votes, CERT.n - votes + 1)))


def write_model(exp: Experiment, cfg: TrialConfig, spec: CertifySpec) -> None:
    """`cfg` certified under `spec` (at its training σ) on digits points 0-3: the votes that
    reach POINTS' radii."""
    predict, label, radii = POINTS[cfg]
    sigmas = [cfg.sigma] * 4
    cols = certified_rows.reaching(spec.n, spec.alpha, [0, 1, 2, 3], label, predict, radii, sigmas)
    constants = {"smoothing": "fixed", "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    table = shard_table(cfg, exp.name, spec.cert_id, constants, cols, {"config": cfg.to_dict()})
    write_table(table, exp.shard_path(cfg.trial_id, spec.cert_id, 0, 1))


def make(storage: Path) -> Experiment:
    exp = Experiment(str(storage), "exp")
    write_sweep(
        exp,
        {
            "space": {"name": "hand", "certify": {"batch_size": 400}},
            "trials": [c.to_dict() for c in POINTS],
            "certify_settings": [CERT.cert_id],  # as `sweeper certify` records it
        },
    )
    for cfg in POINTS:
        certified_rows.trained(exp, cfg)
        write_model(exp, cfg, CERT)
    return exp


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("COLUMNS", "80")
    make(tmp_path)
    return tmp_path


def invoke(storage: Path, *args: str):
    result = runner.invoke(app, [*args, "--storage", str(storage), "--experiment", "exp"])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_the_reach_of_the_fixture():
    assert round(REACH[G], 4) == 0.3751 and round(REACH[S], 4) == 0.7502


def test_the_rows_are_certifys_arithmetic_on_the_votes(storage):
    """Each model's counts are VOTES and its radii the ones they give (0 where it abstains);
    its ACR (the wrong point and the abstention count 0) is what the tables below print."""
    frame = load_results(Experiment(str(storage), "exp")).frame
    acr = {}
    for cfg, votes in VOTES.items():
        rows = frame[frame["trial_id"] == cfg.trial_id].sort_values("idx")
        predict, label, _ = POINTS[cfg]
        assert rows["count"].tolist() == votes and rows["predict"].tolist() == predict
        radii = [
            0.0 if p == -1 else radius(k, cfg.sigma) for p, k in zip(predict, votes, strict=True)
        ]
        assert rows["radius"].tolist() == pytest.approx(radii, rel=1e-12, abs=1e-12)
        assert set(rows["sigma_cert"]) == {cfg.sigma}
        right = [r for r, p, y in zip(radii, predict, label, strict=True) if p == y]
        acr[cfg] = sum(right) / 4
    assert (round(acr[G], 3), round(acr[S], 3)) == (0.154, 0.255)


# ---------------------------------------------------------------------- no winner at 0
def test_no_winner_where_nothing_is_certified_in_csv_json_and_markdown(storage):
    csv = pd.read_csv(
        io.StringIO(invoke(storage, "envelope", "--radii", RADII, "--format", "csv").stdout)
    )
    assert csv["certified_accuracy"].tolist() == [0.75, 0.5, 0.25, 0.0, 0.0]
    assert csv["trial_id"].fillna("-").tolist() == [G.trial_id, S.trial_id, S.trial_id, "-", "-"]
    assert csv.loc[3:, ["clean_acc", "acr", "method", "sigma", "steps"]].isna().all().all()
    assert csv["max_radius"].round(4).tolist() == [0.7502] * 5  # the best any model can reach
    records = json.loads(invoke(storage, "envelope", "--radii", RADII, "--format", "json").stdout)
    assert [r["trial_id"] for r in records] == [G.trial_id, S.trial_id, S.trial_id, None, None]
    assert records[4]["method"] is None and records[4]["models"] == 2
    md = invoke(storage, "envelope", "--radii", RADII, "--format", "markdown").stdout.splitlines()
    assert (
        md[5]
        == "| 0.75 | 0.000 | - | - | - | - | - | - | - | - | - | - | - | - | - | 2 | 0.750 | - |"
    )
    assert (
        md[6] == "| 1 | n/a | - | - | - | - | - | - | - | - | - | - | - | - | - | 2 | 0.750 | - |"
    )


def test_integers_stay_integers_in_csv_and_json(storage):
    text = invoke(storage, "envelope", "--radii", "0.25", "--format", "csv").stdout
    header, row = text.splitlines()
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert (values["steps"], values["m_train"], values["points"], values["models"]) == (
        "2",
        "1",
        "4",
        "2",
    )
    [record] = json.loads(invoke(storage, "envelope", "--radii", "0.25", "--format", "json").stdout)
    assert record["steps"] == 2 and isinstance(record["steps"], int)
    table = invoke(storage, "table", "--radii", "0,0.5", "--format", "csv").stdout
    assert table.splitlines()[0] == (
        "trial_id,method,sigma,r=0,r=0_ci_low,r=0_ci_high,r=0.5,r=0.5_ci_low,r=0.5_ci_high,"
        "acr,points,max_radius,cert_id"
    )


# ----------------------------------------------------------------------- at 80 columns
ELLIPSIS = "…"


@pytest.mark.parametrize(
    "args",
    [
        ["envelope", "--radii", RADII],
        ["envelope", "--radii", RADII, "--by", "sigma"],
        ["envelope", "--radii", "0:2.25:0.25", "--by", "method"],
        ["table"],
        ["table", "--radii", "0:2.25:0.25"],
    ],
)
def test_every_table_fits_80_columns_with_whole_numbers_and_ids(storage, args):
    result = invoke(storage, *args)
    lines = result.stdout.splitlines()
    assert ELLIPSIS not in result.stdout and max(len(line) for line in lines) <= 80
    assert G.trial_id in result.stdout and S.trial_id in result.stdout
    body = [line for line in lines if line.startswith("│")]
    numbers = re.findall(r"(?<![\w.=])\d+\.\d+(?![\w.])", "\n".join(body))
    assert numbers and all(len(n.split(".")[1]) in (1, 2, 3) for n in numbers)


def test_the_envelope_at_80_columns_exactly(storage):
    result = invoke(storage, "envelope", "--radii", RADII)
    assert result.stdout.splitlines() == [
        "                            upper envelope of exp                            ",
        "┏━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┓",
        "┃ radius ┃ cert. acc ┃ 95% CI      ┃ winner         ┃ clean acc ┃ method    ┃",
        "┡━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━┩",
        f"│      0 │     0.750 │ 0.194–0.994 │ {G.trial_id} ≈ │     0.750 │ gaussian  │",
        f"│   0.25 │     0.500 │ 0.068–0.932 │ {S.trial_id} ≈ │     0.500 │ smoothadv │",
        f"│    0.5 │     0.250 │ 0.006–0.806 │ {S.trial_id} ≈ │     0.500 │ smoothadv │",
        "│   0.75 │     0.000 │ -           │ -              │         - │ -         │",
        "│      1 │       n/a │ -           │ -              │         - │ -         │",
        "└────────┴───────────┴─────────────┴────────────────┴───────────┴───────────┘",
    ]
    err = result.stderr.splitlines()
    assert (
        "8 more columns with --wide (ACR, attack, σ, ε, T, m, models, max r): "
        "a table 132 columns wide (this one fits 80)" in err
    )
    # 4 points: the intervals are wide, and no winner is told apart from its runner-up
    assert (
        "95% CI: Clopper–Pearson interval of the winner's certified accuracy over 4 test points; "
        "≈: the test points do not tell the winner from the runner-up (McNemar's exact test on "
        "the points both certified, p ≥ 0.05; csv/json: paired_p)" in err
    )
    assert (
        f"certified with {CERT.cert_id}: n0 = 10, n = 100, α = 0.001, skip = 1, max_points = all, "
        "2 models, 4 points each at most; largest certifiable radius σ·Φ⁻¹(α^(1/n)): 0.375 at "
        "σ = 0.25, 0.750 at σ = 0.5 (n/a: beyond it)"
    ) in err
    assert "2 models, 8 certified points" in err


def test_wide_shows_every_column_whole_when_piped(storage):
    result = invoke(storage, "envelope", "--radii", RADII, "--wide")
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert [h.strip() for h in header.strip("┃").split("┃")] == [
        "radius",
        "cert. acc",
        "95% CI",
        "winner",
        "clean acc",
        "ACR",
        "method",
        "attack",
        "σ",
        "ε",
        "T",
        "m",
        "models",
        "max r",
    ]
    assert ELLIPSIS not in result.stdout and "more columns" not in result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) > 80  # not cut to fit


def test_per_model_table_marks_radii_beyond_reach(storage):
    result = invoke(storage, "table", "--radii", "0,0.5,1", "--wide")
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
        for line in result.stdout.splitlines()
        if line.startswith("│")
    }
    g = ["gaussian", "0.25", "0.750*", "0.194–0.994", "n/a", "n/a", "n/a", "n/a"]
    assert rows[G.trial_id] == [*g, "0.154", "4", "0.375"]
    s = ["smoothadv", "0.5", "0.500", "0.068–0.932", "0.250*", "0.006–0.806", "n/a", "n/a"]
    assert rows[S.trial_id] == [*s, "0.255*", "4", "0.750"]


def test_the_per_model_table_gives_each_accuracy_its_interval_in_every_format(storage):
    """Issue 30 item 9 for `sweeper table`: each model's certified accuracy at each radius
    with its 95% Clopper–Pearson interval over its 4 points (the envelope's arithmetic,
    `envelope_uncertainty`): numbers in csv and json, a `r=0 95% CI` column at 80 columns and
    in markdown, none where nothing was measured (beyond reach), and stderr names it."""

    def cp(k: int, n: int = 4) -> tuple[float, float]:
        low = beta.ppf(0.025, k, n - k + 1) if k else 0.0
        return float(low), float(beta.ppf(0.975, k + 1, n - k) if k < n else 1.0)

    rows = {
        r["trial_id"]: r
        for r in json.loads(invoke(storage, "table", "--radii", "0,0.5", "--format", "json").stdout)
    }
    g, s = rows[G.trial_id], rows[S.trial_id]
    assert (g["r=0_ci_low"], g["r=0_ci_high"]) == pytest.approx(cp(3))  # 3 of 4 at r = 0
    assert (s["r=0.5_ci_low"], s["r=0.5_ci_high"]) == pytest.approx(cp(1))
    assert g["r=0.5"] == 0 and g["r=0.5_ci_low"] is None  # beyond G's reach: not measured
    csv = invoke(storage, "table", "--radii", "0,0.5", "--format", "csv").stdout
    assert "r=0_ci_low,r=0_ci_high" in csv.splitlines()[0]
    md = invoke(storage, "table", "--radii", "0,0.5", "--format", "markdown").stdout
    assert md.splitlines()[0].startswith("| trial_id | method | sigma | r=0 | r=0 95% CI | r=0.5 |")
    assert f"| {G.trial_id} | gaussian | 0.25 | **0.750** | 0.194–0.994 | n/a | n/a |" in md
    result = invoke(storage, "table", "--radii", "0,0.5")
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert [h.strip() for h in header.strip("┃").split("┃")][3:6] == ["r=0", "r=0 95% CI", "r=0.5"]
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert (
        "95% CI: Clopper–Pearson interval of each model's certified accuracy at that radius "
        "over 4 test points (csv/json: r=..._ci_low, r=..._ci_high)"
    ) in result.stderr.splitlines()


# --------------------------------------------------------------- --only and the sweep
def test_only_with_no_such_models_names_the_values_there_are(storage):
    result = runner.invoke(app, ["envelope", "--storage", str(storage), "--only", "sigma=0.3"])
    assert result.exit_code == 2
    assert (
        result.stderr.splitlines()[-1]
        == "error: --only sigma=0.3 matches no model (sigma values: 0.25, 0.5)"
    )


def test_a_trial_without_an_attack_is_none_in_only_by_and_the_value_lists(storage):
    """Issue 30 item 10: `--by attack` labelled the Gaussian group blank, `run --only` listed
    `None, ddn, pgd` and `envelope --only attack=none` matched nothing: `none` everywhere."""
    only = invoke(storage, "envelope", "--radii", "0", "--only", "attack=none", "--format", "csv")
    assert G.trial_id in only.stdout and S.trial_id not in only.stdout
    by = invoke(storage, "envelope", "--radii", "0,0.5", "--by", "attack")
    groups = [line.split("│")[1].strip() for line in by.stdout.splitlines() if line[:1] == "│"]
    assert groups == ["pgd", "pgd", "none", "none"]
    csv = invoke(storage, "envelope", "--radii", "0", "--by", "attack", "--format", "csv").stdout
    assert [line.split(",")[0] for line in csv.splitlines()] == ["attack", "pgd", "none"]
    dry = ["run", "grid", "digits", "--dry-run", "--storage", str(storage / "d"), "--only"]
    listed = runner.invoke(app, [*dry, "attack=xyz"])
    assert listed.exit_code == 2
    assert "(attack values: ddn, none, pgd)" in listed.stderr
    chosen = runner.invoke(app, [*dry, "attack=none"])
    assert chosen.exit_code == 0 and "2 of 34 in the sweep" in chosen.stdout


def test_a_different_sweep_names_what_differs_and_the_likely_fix_first(tmp_path):
    spec = load_space("digits").smoked()
    trials = expand(spec, {"data_dir": None, "download": False})
    write_sweep(
        Experiment(str(tmp_path), "digits"),
        {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in trials]},
    )
    result = runner.invoke(app, ["run", "grid", "digits", "--dry-run", "--storage", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: experiment 'digits' at {tmp_path / 'digits'} holds a different sweep (epochs 1 "
        "there, 8 here; train_subset 256 there, None here): it was run with --smoke: add --smoke "
        "to continue it; or pass --experiment NEW for a new experiment; or --restart to start "
        "this one over (the old one is kept aside)"
    ]
    smoke = runner.invoke(
        app,
        [
            "run",
            "grid",
            "digits",
            "--smoke",
            "--dry-run",
            "--storage",
            str(tmp_path),
            "--experiment",
            "digits",
        ],
    )
    assert smoke.exit_code == 0, smoke.output  # the suggested fix works


# ---------------------------------------------------------------------------- figures
def _lines(fig):
    [ax] = fig.axes
    return {line.get_label(): line for line in ax.get_lines()}, ax


def test_envelope_plot_by_sigma_keeps_every_curve_visible_and_honours_radii(storage):
    frame = load_results(Experiment(str(storage), "exp")).frame
    fig = draw_figure(envelope_figure(frame, "sigma", radii=[0.0, 0.25, 0.5, 0.75, 1.0]))
    lines, ax = _lines(fig)
    assert list(lines) == ["upper envelope", "σ = 0.25", "σ = 0.5"]
    envelope, low = lines["upper envelope"], lines["σ = 0.25"]
    # drawn first and underneath: the σ = 0.25 curve, equal to the envelope up to r = .2003, shows
    assert envelope.get_zorder() < min(low.get_zorder(), lines["σ = 0.5"].get_zorder())
    assert envelope.get_linewidth() > low.get_linewidth()
    x = envelope.get_xdata()
    assert x[0] == 0 and x[-1] == 1.0 and ax.get_xlim() == (0.0, 1.0)  # --radii 0:1:0.25
    same = np.asarray(low.get_ydata()) == np.asarray(envelope.get_ydata())
    assert same[x <= 0.1].all() and not same.all()
    at = int(np.searchsorted(x, 0.5))
    assert (low.get_ydata()[at], lines["σ = 0.5"].get_ydata()[at], envelope.get_ydata()[at]) == (
        0,
        0.25,
        0.25,
    )


def test_the_plot_command_honours_radii(storage, tmp_path):
    plot = tmp_path / "e.png"
    result = invoke(storage, "envelope", "--radii", "0:0.5:0.25", "--plot", str(plot))
    assert plot.read_bytes().startswith(b"\x89PNG") and f"figure written to {plot}" in result.stderr


def test_report_legends_sit_outside_the_axes_and_titles_name_the_methods_drawn(storage):
    frame = load_results(Experiment(str(storage), "exp")).frame
    figures = {f.name: f for f in figure_plan(frame)[0]}
    for name in ("representative_per_sigma", "envelope_by_sigma", "envelope_by_method"):
        fig = draw_figure(figures[name])
        fig.canvas.draw()
        [ax] = fig.axes
        legend, box = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert legend.x0 >= box.x1, name  # right of the axes: over no curve
    assert figures["envelope_by_method"].caption == (
        "Upper envelope per method (Fig. 4): Gaussian (Cohen et al.) vs SmoothAdv, over all models"
    )
    only_gauss = frame[frame["method"] == "gaussian"]
    assert "envelope_by_method" not in {f.name for f in figure_plan(only_gauss)[0]}


def test_the_demo_figure_and_the_report_figures_have_distinct_names():
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    [plot] = re.findall(r"--plot \S+/reports/(\S+)\.png", makefile)
    report_names = {"envelope", "representative_per_sigma", *(g[0] for g in GROUPED)}
    assert plot == "demo_envelope_by_sigma" and plot not in report_names


# ----------------------------------------------------------------------------- report
def test_the_report_states_its_settings_and_marks_radii_beyond_reach(storage):
    frame = load_results(Experiment(str(storage), "exp")).frame
    report = build_report(
        frame, [0.0, 0.25, 0.5, 0.75, 1.0], {"digits": 64}, ("png",), name="exp", batch=400
    )
    files = {f.name: f.data.decode() for f in report.files if f.name.endswith(".md")}
    index = files["index.md"]
    assert "## Certification settings" in index
    assert (
        f"- {CERT.cert_id}: n0 = 10, n = 100, α = 0.001, skip = 1, max_points = all, "
        "batch_size = 400, 2 models, 4 points each at most; largest certifiable radius "
        "σ·Φ⁻¹(α^(1/n)): 0.375 at σ = 0.25, 0.750 at σ = 0.5"
    ) in index
    winners = files["envelope.md"].split("## Upper envelope per ℓ2 radius and its winner")[1]
    rows = [line for line in winners.splitlines() if line.startswith(("| 0.75 ", "| 1 "))]
    assert rows == [
        "| 0.75 | 0.000 | - | - | - | - | - | - | - | - | - | 2 |",
        "| 1 | n/a | - | - | - | - | - | - | - | - | - | 2 |",
    ]
    per_model = files["per_model.md"].splitlines()
    assert (
        f"| Gaussian (Cohen et al.) | 0.25 |  | 1 | **0.750** | 0.250 | n/a | n/a | n/a | 0.154 | {G.trial_id} |"
        in per_model
    )
    assert (
        f"| SmoothAdv-PGD, T = 2 | 0.5 | 0.5 | 1 | 0.500 | **0.500** | **0.250** | 0.000 | n/a | **0.255** | {S.trial_id} |"
        in per_model
    )
    wide = files["envelope.md"].splitlines()
    assert (
        "| Gaussian (Cohen et al.) | certified accuracy | **0.750** | 0.250 | n/a | n/a | n/a |"
        in wide
    )
    assert (
        "| upper envelope (all models) | certified accuracy | 0.750 | 0.500 | 0.250 | 0.000 | n/a |"
        in wide
    )


# ------------------------------------------------------- other tables, digits, wording
def test_digits_sets_the_precision_of_measured_values_only(storage):
    md = invoke(storage, "envelope", "--radii", "0.25", "--format", "markdown", "--digits", "1")
    row = md.stdout.splitlines()[2]
    assert row.startswith(
        f"| 0.25 | 0.5 | 0.1–0.9 | {S.trial_id} ≈ | {CERT.cert_id} | 0.5 | 0.3 | 4 | smoothadv | pgd | 0.5 | 0.5 | 2 | 1 | 0.5 | 2 | 0.8 | {G.trial_id} |"
    )


def test_a_trial_certified_twice_is_two_models_and_stderr_says_so(storage):
    exp = Experiment(str(storage), "exp")
    other = CertifySpec(n0=10, n=100, alpha=0.01, skip=1, max_points=None)
    write_model(exp, G, other)  # G's radii at α = 0.01: 77, 96, 89 votes
    record_settings(exp, [other.cert_id])  # as `sweeper certify` with `other` does
    err = invoke(storage, "envelope", "--radii", "0").stderr.splitlines()
    assert (
        "3 models (a model is a trial certified under one setting: 2 trials here), 12 certified points"
        in err
    )
    assert sum(line.startswith("certified with ") for line in err) == 2


def test_the_dry_run_cost_table_and_the_failures_table_keep_numbers_and_ids_whole(
    monkeypatch, capsys
):
    from sweeper.cli.driver import finish

    monkeypatch.setenv("COLUMNS", "80")  # a terminal 80 columns wide, or COLUMNS=80 piped
    result = runner.invoke(
        app, ["run", "grid", "digits", "--dry-run", "--storage", "/nonexistent-h17"]
    )
    assert result.exit_code == 0, result.output
    assert ELLIPSIS not in result.stdout and "trials like" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    # issue 30 item 7: the cifar10 grid's 21 groups, a line each at 80 columns (their shared
    # words in the title), a count headed `trials` (never `n`: CERTIFY's n)
    result = runner.invoke(
        app, ["run", "grid", "cifar10", "--dry-run", "--gpus", "8", "--storage", "/nonexistent"]
    )
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 21 and rows[0].split("│")[1].strip() == "smoothadv T=2 m=1"
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert [h.strip() for h in header.strip("┃").split("┃")] == [
        "trials like",
        "trials",
        "passes",
        "train",
        "certify",
        "total",
    ]
    assert "every trial: cifar10 cifar_resnet110 150 ep" in " ".join(result.stdout.split())
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    error = "RuntimeError: " + "a very long message " * 20
    with pytest.raises(typer.Exit) as exited:
        finish(False, [(G.trial_id, "certify", error)])
    assert exited.value.exit_code == 1
    out = capsys.readouterr().out
    assert G.trial_id in out and ELLIPSIS not in out and out.count("message") == 20  # folded, whole


@pytest.mark.parametrize(
    "args", [["spaces"], ["run", "grid", "cifar10", "--dry-run", "--storage", "/nonexistent"]]
)
def test_piped_output_honours_columns_and_is_100_wide_without(monkeypatch, args):
    """Issue 30 item 10: piped, `spaces` was 480 columns wide and the dry run 351, whatever
    COLUMNS said. The console is made per invocation (never fixed at import): COLUMNS=60,
    then 120, then none (100) in one process, each honoured."""
    for columns, widest in (("60", 60), ("120", 120), (None, 100)):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= widest, (columns, args)
        assert max(len(line) for line in lines) > widest - 25, (columns, args)  # filled


def test_the_per_invocation_console_serves_rich_live(capsys):
    """`status --watch` and a run's progress hold the console in rich's Live, which uses it as
    a context manager and swaps stdout for a proxy meanwhile: the same console throughout."""
    from rich.live import Live

    from sweeper.cli.common import console

    with Live(console=console, auto_refresh=False) as live:
        live.update("refreshed", refresh=True)
    assert "refreshed" in capsys.readouterr().out


def test_a_command_to_copy_stays_on_one_line_at_any_width(monkeypatch, capsys):
    """COLUMNS is honoured when piped (issue 30 item 10), but a command to re-run or run next
    is never wrapped mid-command: it is copied whole."""
    from sweeper.cli.driver import finish

    monkeypatch.setenv("COLUMNS", "40")
    args = ["run", "grid", "digits", "--storage", "a/long/path/" * 4]
    monkeypatch.setattr("sys.argv", ["sweeper", *args])
    with pytest.raises(typer.Exit):
        finish(True, [])
    line = f"interrupted: re-run `sweeper {' '.join(args)}` to resume"
    assert line in capsys.readouterr().out.splitlines()


def test_fit_takes_columns_by_priority_while_they_fit():
    from sweeper.cli.display import Column, fit, table_width

    cols = [Column("a", ["1" * 10]), Column("b", ["2" * 30]), Column("c", ["3" * 5])]
    assert table_width(cols) == 13 + 33 + 8 + 1
    shown, left = fit(cols, ["a", "c", "b"], 30)
    assert [c.header for c in shown] == ["a", "c"] and left == ["b"]
    shown, left = fit(cols, ["b", "a"], 10)  # the first is always shown
    assert [c.header for c in shown] == ["b"] and left == ["a", "c"]


def test_a_wide_table_on_a_narrow_terminal_wraps_text_then_overflows_never_cuts(
    monkeypatch, capsys
):
    """Text wraps down to its longest word; a terminal narrower than that and the numbers and
    ids gets the table at that width (its lines overflow), never a cut number or id."""
    from sweeper.cli import display
    from sweeper.cli.display import Column, print_table

    monkeypatch.setattr(display, "on_terminal", lambda: True)
    cols = [
        Column("trial_id", [G.trial_id]),
        Column("value", ["0.123456789012345"], True),
        Column("note", ["a long note " * 3]),
    ]
    for columns, widest in (("50", 50), ("40", 43)):  # 43: 12 + 17 + 4 ("note"), rules, pads
        monkeypatch.setenv("COLUMNS", columns)
        print_table("t", cols, [], wide=True)
        out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
        assert ELLIPSIS not in out and max(len(line) for line in out.splitlines()) == widest
        assert G.trial_id in out and "0.123456789012345" in out  # the text column gave way


@pytest.mark.parametrize(
    "args", [["envelope", "--radii", "0:0.5:0.25", "--wide"], ["table", "--wide"]]
)
def test_wide_on_an_80_column_terminal_prints_every_number_and_id_whole(storage, monkeypatch, args):
    """Issue 30 item 1: `--wide` on a terminal of 80 columns (COLUMNS=80, stdout a tty) lets
    the table overflow rather than cut 0.25 to 0.2, σ to 0. or an id to its first letters."""
    from sweeper.cli import display

    monkeypatch.setattr(display, "on_terminal", lambda: True)
    out = re.sub(r"\x1b\[[0-9;]*m", "", invoke(storage, *args).stdout)
    assert ELLIPSIS not in out and max(len(line) for line in out.splitlines()) > 80
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    cells = {cell for row in rows for cell in row}
    assert {G.trial_id, S.trial_id} <= {c.removesuffix(" ≈") for c in cells}
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert "max r" in header and "…" not in header
    if args[0] == "envelope":
        assert {"0.25", "0.5", "0.750", "0.194–0.994", "gaussian", "smoothadv"} <= cells
        assert [r[-6:-2] for r in rows if r and r[0] == "0.25"] == [["0.5", "0.5", "2", "1"]]
    else:
        assert {"0.500*", "0.250*", "n/a", "0.255*", "smoothadv", "gaussian", "0.375"} <= cells
