"""`sweeper report`: the paper's tables (exact numbers, bold cells, markdown and LaTeX), its
figures and the command line, on a small digits experiment of real CERTIFY rows (d = 64)."""

from __future__ import annotations

import math
from pathlib import Path

import certified_rows
import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta, norm
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.report.build import (
    build_report,
    run_summary,
    table_latex,
    table_markdown,
    write_report,
)
from sweeper.report.figures import figure_plan, radius_grid, representatives
from sweeper.report.tables import (
    ALL,
    acr_table,
    envelope_summary,
    linf_summary,
    per_model_tables,
    wide_table,
    winners_table,
)
from sweeper.results.certify_rows import load_results, shard_table
from sweeper.results.envelope import model_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from trainables.kernel.config import TrialConfig

runner = CliRunner()
# Certified at σ = 1 whatever σ a model was trained at: every radius below is one CERTIFY can
# give (up to 1.5005 at n = 100).
CERT = CertifySpec(sigma=1.0, n0=10, n=100, alpha=0.001, skip=1, max_points=None)
CID = CERT.cert_id
RADII = [0.0, 0.25, 0.5, 1.0, 1.5]
DIMS = {"digits": 64}


def cfg(method: str, sigma: float, **kw) -> TrialConfig:
    return TrialConfig(dataset="digits", method=method, sigma=sigma, epochs=1, **kw)


def R(votes: int) -> float:
    """The radius CERTIFY gives `votes` of n = 100 at σ = 1, α = 0.001, computed here from
    the papers' formulas: Φ⁻¹ of the Clopper–Pearson lower bound beta.ppf(α, k, n − k + 1)."""
    return float(norm.ppf(beta.ppf(CERT.alpha, votes, CERT.n - votes + 1)))


G1 = cfg("gaussian", 0.25, m_train=1)
G2 = cfg("gaussian", 0.5, m_train=1)
A = cfg("smoothadv", 0.25, attack="pgd", epsilon=0.5, steps=2, m_train=1)
B = cfg("smoothadv", 0.5, attack="pgd", epsilon=1.0, steps=2, m_train=2)
C = cfg("smoothadv", 0.5, attack="ddn", epsilon=0.5, steps=2, m_train=1)
V = cfg("vanilla_pgd", 0.25, attack="pgd", epsilon=0.5, steps=2)
# 4 points per model: (predict, correct, radius); predict −1 = abstain (radius 0). Each radius
# is reached by the fewest of the 100 votes that certify it (VOTES; an abstention has 33), so
# the rows' radii are CERTIFY's, R(votes), at or just above these.
POINTS = {
    # clean .5, certified .25 at r=.25, ACR (R(77) + R(70))/4 ≈ .1034, abstains on 1 of 4
    G1: ([1, 2, 3, -1], [True, True, False, False], [0.3, 0.1, 0.2, 0.0]),
    # clean .75; .25 at r=.25 and r=.5 (the wrong point's radius .43 counts for nothing)
    G2: ([1, 2, 3, 4], [True, True, True, False], [0.6, 0.2, 0.05, 0.4]),
    # clean 1; .75 at r=.25; 0 at r=.5 (.4587 is its largest)
    A: ([1, 2, 3, 4], [True] * 4, [0.26, 0.3, 0.1, 0.45]),
    # clean .5; .5 at r=.5; .25 at r=1; the best ACR; abstains on 2 of 4
    B: ([1, 2, -1, -1], [True, True, False, False], [1.2, 0.7, 0.0, 0.0]),
    # clean .75; .5 at r=.5 (.5607 and .5257: ties B there, wins on clean accuracy)
    C: ([1, 2, 3, -1], [True, True, True, False], [0.55, 0.5, 0.1, 0.0]),
    # clean .75; .25 at r=.5 (.9542)
    V: ([1, 2, 3, 4], [True, False, True, True], [0.9, 0.3, 0.05, 0.02]),
}
VOTES = {
    G1: [77, 70, 74, 33],
    G2: [87, 74, 68, 81],
    A: [76, 77, 70, 82],
    B: [98, 89, 33, 33],
    C: [85, 84, 70, 33],
    V: [94, 77, 68, 67],
}
# The mean radius over the 4 points, the wrong ones and abstentions counting 0.
ACR = {
    G1: (R(77) + R(70)) / 4,  # .1034
    G2: (R(87) + R(74) + R(68)) / 4,  # .2272
    A: (R(76) + R(77) + R(70) + R(82)) / 4,  # .2868
    B: (R(98) + R(89)) / 4,  # .4888
    C: (R(85) + R(84) + R(70)) / 4,  # .2989
    V: (R(94) + R(68) + R(67)) / 4,  # .2601
}


def write_model(exp: Experiment, c: TrialConfig) -> None:
    """`c` trained (its trial.json) and certified under CERT on digits points 0-3, with the
    votes that reach POINTS' radii (labels: the prediction where correct, else 0)."""
    predict, correct, radius = POINTS[c]
    labels = [p if ok else 0 for p, ok in zip(predict, correct, strict=True)]
    columns = certified_rows.reaching(
        CERT.n, CERT.alpha, [0, 1, 2, 3], labels, predict, radius, [CERT.sigma] * 4
    )
    constants = {"smoothing": "fixed", "n0": CERT.n0, "n": CERT.n, "alpha": CERT.alpha}
    meta = {"certify_backend": "test", "normalization": "none", "config": c.to_dict()}
    certified_rows.trained(exp, c)
    table = shard_table(c, exp.name, CID, constants, columns, meta)
    write_table(table, exp.shard_path(c.trial_id, CID, 0, 1))


def make_experiment(storage, name: str = "exp", models=tuple(POINTS)) -> Experiment:
    exp = Experiment(str(storage), name)
    for c in models:
        write_model(exp, c)
    return exp


@pytest.fixture(scope="module")
def frame(tmp_path_factory) -> pd.DataFrame:
    return load_results(make_experiment(tmp_path_factory.mktemp("store"))).frame


def row_of(data: pd.DataFrame, c: TrialConfig) -> int:
    [i] = np.flatnonzero(data["trial_id"].to_numpy() == c.trial_id)
    return int(i)


def test_the_rows_are_certifys_arithmetic_on_the_votes(frame):
    """Each model's counts are VOTES, its radii R(votes) (0 where it abstains), at σ = 1."""
    assert set(frame["cert_id"]) == {CID} and set(frame["sigma_cert"]) == {1.0}
    for c, votes in VOTES.items():
        rows = frame[frame["trial_id"] == c.trial_id].sort_values("idx")
        predict, correct, _ = POINTS[c]
        assert rows["count"].tolist() == votes and rows["predict"].tolist() == predict
        assert rows["correct"].tolist() == correct
        radii = [0.0 if p == -1 else R(k) for p, k in zip(predict, votes, strict=True)]
        assert rows["radius"].tolist() == pytest.approx(radii, rel=1e-12, abs=1e-12)


# -------------------------------------------------------------------------------- tables
def test_per_model_tables_like_appendix_e(frame):
    tables = per_model_tables(frame, RADII)
    assert [t.title for t in tables] == [
        "SmoothAdv-DDN, T = 2 (with the Gaussian (Cohen et al.) baselines)",
        "SmoothAdv-PGD, T = 2 (with the Gaussian (Cohen et al.) baselines)",
        "vanilla PGD, T = 2 (with the Gaussian (Cohen et al.) baselines)",
    ]
    pgd = tables[1].data
    # Baselines first (by σ), then the group's models by m_train, σ, ε.
    assert list(pgd["trial_id"]) == [G1.trial_id, G2.trial_id, A.trial_id, B.trial_id]
    assert list(pgd["section"]) == ["Gaussian (Cohen et al.)"] * 2 + ["SmoothAdv-PGD, T = 2"] * 2
    assert [c for c in pgd.columns if c.startswith("r=")] == [
        "r=0",
        "r=0.25",
        "r=0.5",
        "r=1",
        "r=1.5",
    ]
    assert {"sigma", "epsilon", "m_train", "acr"} <= set(pgd.columns)
    assert pgd.loc[3, ["r=0", "r=0.25", "r=0.5", "r=1", "r=1.5"]].tolist() == [
        0.5,
        0.5,
        0.5,
        0.25,
        0.0,
    ]
    assert pgd["acr"].tolist() == pytest.approx([ACR[G1], ACR[G2], ACR[A], ACR[B]])
    # Bold: the best per radius over the table (baselines included); none where all are 0.
    assert tables[1].bold == {
        "r=0": {2},
        "r=0.25": {2},
        "r=0.5": {3},
        "r=1": {3},
        "acr": {3},
    }
    ddn = tables[0]
    assert ddn.bold["r=0"] == {row_of(ddn.data, G2), row_of(ddn.data, C)}  # a tie: both bold
    assert ddn.bold["r=0.5"] == {row_of(ddn.data, C)}


def test_envelope_summary_winners_clean_accuracy_abstention_acr(frame):
    s = envelope_summary(frame, RADII)
    whole = s[s["group"] == ALL].reset_index(drop=True)
    assert whole["certified_accuracy"].tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    # r=0.5: B and C both certify 0.5; C wins on clean accuracy (0.75 > 0.5).
    winners = [A.trial_id, A.trial_id, C.trial_id, B.trial_id, None]
    assert whole["trial_id"].tolist() == winners
    assert whole["clean_acc"].tolist()[:4] == [1.0, 1.0, 0.75, 0.5]
    assert whole["abstain_rate"].tolist()[:4] == [0.0, 0.0, 0.25, 0.5]
    assert whole["acr"].tolist()[:4] == pytest.approx([ACR[A], ACR[A], ACR[C], ACR[B]])
    assert whole.loc[4, ["clean_acc", "acr", "abstain_rate"]].isna().all()  # nobody at r=1.5
    gauss = s[s["group"] == "gaussian"].reset_index(drop=True)
    assert gauss["certified_accuracy"].tolist() == [0.75, 0.25, 0.25, 0.0, 0.0]
    assert gauss["trial_id"].tolist()[:3] == [G2.trial_id] * 3  # r=.25: tie with G1, G2 cleaner
    assert set(s["group"]) == {"gaussian", "smoothadv", "vanilla_pgd", ALL}


def test_wide_envelope_row_bolds_the_best_method(frame):
    s = envelope_summary(frame, RADII)
    t = wide_table(
        s, [("certified_accuracy", "acc"), ("clean_acc", "clean")], "envelope", bold=True
    )
    models = t.data["models"].tolist()
    assert models == [
        "Gaussian (Cohen et al.)",
        "Gaussian (Cohen et al.)",
        "SmoothAdv",
        "SmoothAdv",
        "vanilla PGD",
        "vanilla PGD",
        "upper envelope (all models)",
        "upper envelope (all models)",
    ]
    assert t.data.loc[6, ["r=0", "r=0.25", "r=0.5", "r=1"]].tolist() == [1.0, 0.75, 0.5, 0.25]
    assert t.data.loc[7, ["r=0", "r=0.25", "r=0.5", "r=1"]].tolist() == [1.0, 1.0, 0.75, 0.5]
    assert t.bold == {"r=0": {2}, "r=0.25": {2}, "r=0.5": {2}, "r=1": {2}}  # SmoothAdv's rows


def test_linf_accuracy_is_l2_accuracy_at_rho_sqrt_d(frame):
    s = linf_summary(frame, 64, (1, 4, 8))
    whole = s[s["group"] == ALL].reset_index(drop=True)
    assert whole["l2_radius"].tolist() == pytest.approx([8 / 255, 32 / 255, 64 / 255])
    assert whole["column"].tolist() == ["linf=1/255", "linf=4/255", "linf=8/255"]
    # ℓ2 radii 0.0314, 0.1255, 0.2510: A keeps 4, 3 (R(70) = .1091 < .1255), 3 (R(76) = .2752)
    # of its 4 points.
    assert whole["certified_accuracy"].tolist() == [1.0, 0.75, 0.75]
    assert whole["trial_id"].tolist() == [A.trial_id] * 3
    vanilla = s[s["group"] == "vanilla_pgd"]["certified_accuracy"].tolist()
    assert vanilla == [0.5, 0.25, 0.25]  # V's correct radii .9542, .0562, .0301
    # CIFAR-10's d = 3072: 1/255 needs ℓ2 radius √3072/255 = 0.2174.
    cifar = linf_summary(frame, 3072, (1,))
    assert cifar["l2_radius"].iloc[0] == pytest.approx(math.sqrt(3072) / 255)
    assert cifar[cifar["group"] == ALL]["certified_accuracy"].tolist() == [0.75]


def test_acr_table_ranks_models(frame):
    t = acr_table(frame)
    assert t.data["trial_id"].tolist() == [c.trial_id for c in sorted(ACR, key=lambda c: -ACR[c])]
    assert t.data["acr"].tolist() == pytest.approx(sorted(ACR.values(), reverse=True))
    assert t.bold == {"acr": {0}, "clean_acc": {row_of(t.data, A)}}
    assert t.data.loc[0, "method"] == "SmoothAdv-PGD" and t.data.loc[0, "abstain_rate"] == 0.5


# ----------------------------------------------------------------------------- rendering
def markdown_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert len({len(r) for r in cells}) == 1, "ragged markdown table"
    return cells


def latex_rows(text: str) -> list[list[str]]:
    body = text.split(r"\begin{tabular}", 1)[1].split(r"\end{tabular}", 1)[0]
    lines = [line for line in body.splitlines()[1:] if line.strip() not in ("", r"\hline")]
    assert all(line.endswith(r"\\") for line in lines)
    cells = [[c.strip() for c in line[:-2].split(" & ")] for line in lines]
    assert len({len(r) for r in cells}) == 1, "ragged tabular"
    return cells


def test_markdown_and_latex_mark_the_best_cells(frame):
    t = per_model_tables(frame, RADII)[1]  # SmoothAdv-PGD
    md = markdown_rows(table_markdown(t))
    header, body = md[0], md[2:]
    assert header[:2] == ["", "σ"] and "ACR" in header
    b = body[3]  # model B
    assert b[header.index("r=0.5")] == "**0.500**" and b[header.index("r=0")] == "0.500"
    assert b[header.index("ACR")] == "**0.489**" and b[0] == ""  # the section is printed once
    assert body[2][0] == "SmoothAdv-PGD, T = 2" and body[2][header.index("r=0")] == "**1.000**"
    tex = table_latex(t)
    assert tex.count(r"\begin{tabular}") == 1 and r"\caption{SmoothAdv-PGD, T = 2" in tex
    rows = latex_rows(tex)
    head = rows[0]
    assert head[1] == r"$\sigma$" and "$r=0.5$" in head
    assert rows[4][head.index("$r=0.5$")] == r"\textbf{0.500}"
    assert rows[4][head.index("$r=1.5$")] == "0.000"  # all zero: nobody in bold
    assert sum(cell.startswith(r"\textbf") for row in rows for cell in row) == 5
    assert r"\textbf{" not in "".join(rows[1] + rows[2])  # the baselines win nothing here


def test_tex_escapes_names():
    frame = pd.DataFrame({"section": ["a_b & 50%"], "r=0": [0.5]})
    from sweeper.report.tables import PaperTable

    tex = table_latex(PaperTable("σ_x in ℓ2", frame, {"r=0": {0}}, sections="section"))
    assert r"a\_b \& 50\%" in tex and r"\caption{$\sigma$\_x in $\ell_2$}" in tex


# ------------------------------------------------------------------------------- figures
def test_figure_plan_makes_the_figures_the_data_supports(frame):
    figures, notes = figure_plan(frame)
    names = [f.name for f in figures]
    assert names == [
        "envelope",
        "envelope_by_sigma",
        "representative_per_sigma",
        "envelope_by_method",
        "envelope_by_attack",
        "envelope_by_m_train",
        "envelope_by_epsilon",
    ]
    assert notes == [
        "envelope_by_smoothing: skipped, smoothing does not vary among all models (fixed)"
    ]
    grid = radius_grid(frame)
    assert grid[-1] == pytest.approx(1.02 * R(98))  # just past the largest radius, B's
    # C's smaller certified radius, R(84) = .5257: the last grid radius at most it, the next
    c_radius = R(84)
    at = int(np.searchsorted(grid, c_radius, side="right")) - 1
    assert c_radius - 0.01 < grid[at] <= c_radius < grid[at + 1] < c_radius + 0.01
    by_m = {c.label: (c.accuracy[at], c.accuracy[at + 1]) for c in figures[5].curves}
    # SmoothAdv models only: m=1 is A and C (C certifies radii .5607 and .5257; A's largest is
    # .4587), m=2 is B (1.2413, .7139).
    assert by_m == {
        "m_train = 1": (0.5, 0.25),
        "m_train = 2": (0.5, 0.5),
        "upper envelope": (0.5, 0.5),
    }
    picks = representatives(model_table(frame))
    assert picks["trial_id"].tolist() == [A.trial_id, B.trial_id]  # best ACR per σ
    assert (
        figures[2].curves[1].label
        == "σ = 0.5: SmoothAdv-PGD, ε = 1, T = 2, m_train = 2 (ACR 0.489)"
    )


def test_figures_skip_with_a_note_when_nothing_varies(tmp_path):
    frame = load_results(make_experiment(tmp_path, models=(G1,))).frame
    figures, notes = figure_plan(frame)
    assert [f.name for f in figures] == ["envelope"]
    assert len(notes) == 7 and all("skipped" in n for n in notes)
    assert "representative_per_sigma: skipped, σ does not vary" in notes


# ------------------------------------------------------------------------ files and CLI
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "svg": b"<?xml"}
TABLES = ["per_model", "envelope", "abstention", "acr", "linf"]


@pytest.fixture(scope="module")
def built(frame):
    return build_report(frame, RADII, DIMS, ("png", "svg"), name="exp")


def test_build_and_write_report(built, frame, tmp_path):
    report = built
    names = [f.name for f in report.files]
    assert names[:10] == [f"{t}.{s}" for t in TABLES for s in ("md", "tex")]
    assert names[-1] == "index.md" and "envelope_by_epsilon.svg" in names
    written = write_report(report, str(tmp_path / "out"))
    assert len(written) == len(names) == 10 + 7 * 2 + 1
    for name in names:
        data = (tmp_path / "out" / name).read_bytes()
        if name.rsplit(".", 1)[1] in MAGIC:
            assert data.startswith(MAGIC[name.rsplit(".", 1)[1]]) and len(data) > 1000
    index = (tmp_path / "out" / "index.md").read_text()
    assert all(f"[{n}]({n})" in index for n in names if n != "index.md")
    assert "1/255, 2/255, 4/255, 8/255" in index and "digits (d = 64)" in index
    models = frame.groupby(["trial_id", "cert_id"]).ngroups
    assert f"- Base classifier run at: fp32 ({models} models)." in index
    linf = (tmp_path / "out" / "linf.md").read_text()
    assert "d = 64" in linf and "1/255 (ℓ2 0.03137)" in linf


def test_run_summary_counts_models_per_run_setting(frame):
    fast = CertifySpec(
        sigma=1.0,
        n0=10,
        n=100,
        alpha=0.001,
        skip=1,
        max_points=None,
        precision="bf16",
        channels_last=True,
    ).cert_id
    mixed = pd.concat([frame, frame[frame["trial_id"] == A.trial_id].assign(cert_id=fast)])
    models = frame.groupby(["trial_id", "cert_id"]).ngroups
    assert run_summary(mixed) == f"bf16, channels_last (1 model); fp32 ({models} models)"


def run(args: list[str]):
    result = runner.invoke(app, args)
    assert "Traceback" not in result.output, result.output
    return result


def test_cli_report_writes_the_reports_directory(tmp_path):
    exp = make_experiment(tmp_path)
    result = run(
        [
            "report",
            "--storage",
            f"file://{tmp_path}",
            "--experiment",
            "exp",
            "--radii",
            "0:1.5:0.25",
            "--formats",
            "pdf",
        ]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    listed = result.stdout.split()
    reports = Path(exp.reports_dir)
    on_disk = sorted(p.name for p in reports.iterdir())
    assert sorted(Path(p).name for p in listed) == on_disk and len(on_disk) == 10 + 7 + 1
    assert all(p.startswith(f"{tmp_path}/exp/reports/") for p in listed)  # file:// is local
    assert (reports / "envelope.pdf").read_bytes().startswith(b"%PDF-")
    assert (reports / "representative_per_sigma.pdf").stat().st_size > 1000
    assert "note: envelope_by_smoothing: skipped" in result.stderr
    env = markdown_rows((reports / "envelope.md").read_text().split("## ")[1])
    assert env[0][2:] == ["r=0", "r=0.25", "r=0.5", "r=0.75", "r=1", "r=1.25", "r=1.5"]
    assert env[-2][2:] == ["1.000", "0.750", "0.500", "0.250", "0.250", "0.000", "0.000"]
    # r=0.75: B (1.2413) and V (0.9542) both certify .25; V has the higher clean accuracy.
    # r=1.25: B's 1.2413 falls short.
    assert env[-1][2:] == ["1.000", "1.000", "0.750", "0.750", "0.500", "-", "-"]
    assert env[4][:3] == ["SmoothAdv", "certified accuracy", "**1.000**"]
    assert r"\begin{tabular}" in (reports / "abstention.tex").read_text()


def test_cli_only_writes_a_slice_beside_the_report(tmp_path):
    make_experiment(tmp_path)
    result = run(
        [
            "report",
            "--storage",
            str(tmp_path),
            "--experiment",
            "exp",
            "--only",
            "method=gaussian",
            "--formats",
            "svg",
        ]
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "exp" / "reports" / "only-method=gaussian"
    assert (out / "index.md").exists() and (out / "envelope_by_sigma.svg").exists()
    assert not (tmp_path / "exp" / "reports" / "index.md").exists()
    assert "2 models" in (out / "index.md").read_text()


def errors_of(args: list[str]) -> list[str]:
    result = run(args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [x for x in result.stderr.splitlines() if not x.startswith("experiment: ")]
    assert lines and all(x.startswith("error: ") for x in lines), result.stderr
    return lines


def test_cli_bad_input_exits_2_with_one_line_per_problem(tmp_path):
    assert run(["report", "--help"]).exit_code == 0
    make_experiment(tmp_path)
    base = ["report", "--storage", str(tmp_path), "--experiment", "exp"]
    lines = errors_of([*base, "--radii", "x", "--formats", "png,gif", "--linf", "0"])
    assert len(lines) == 3
    assert "--radii 'x'" in lines[1] and "--formats 'png,gif'" in lines[0] and "--linf" in lines[2]
    assert errors_of([*base, "--formats", ""])[0].startswith("error: --formats")
    assert "nosuch" in errors_of([*base, "--only", "nosuch=1"])[0]
    [line] = errors_of([*base, "--only", "sigma=9"])
    assert line == "error: --only sigma=9 matches no model (sigma values: 0.25, 0.5)"
    [line] = errors_of(["report", "--storage", str(tmp_path), "--experiment", "absent"])
    assert line.startswith("error: no experiment 'absent' under --storage")
    (tmp_path / "empty" / "certify").mkdir(parents=True)
    [line] = errors_of(["report", "--storage", str(tmp_path), "--experiment", "empty"])
    assert "no certification results to report in empty" in line
    assert not (tmp_path / "exp" / "reports").exists()


def test_markdown_tables_of_every_file_parse(built):
    for f in built.files:
        if f.name.endswith(".md") and f.name != "index.md":
            text = f.data.decode()
            for section in text.split("\n## ")[1:]:
                assert len(markdown_rows(section)) >= 3
        if f.name.endswith(".tex"):
            text = f.data.decode()
            tables = text.split(r"\begin{table}")[1:]
            assert tables and all(r"\end{tabular}" in t for t in tables)
            for t in tables:
                latex_rows(t)


def test_data_dependent_winners_say_so(frame):
    """DDRS rows (σ_cert per point): the winners table names the smoothing, not σ_cert, and
    the fixed vs data-dependent figure is made."""
    dd = frame.copy()
    rows = (dd["trial_id"] == B.trial_id).to_numpy()
    dd.loc[rows, "smoothing"] = "data-dependent"
    dd.loc[rows, "sigma_cert"] = [0.45, 0.5, 0.55, 0.6]
    winners = winners_table(envelope_summary(dd, RADII)).data
    assert "smoothing" in winners and "sigma_cert" not in winners
    assert winners["smoothing"].tolist() == ["fixed"] * 3 + ["data-dependent", "-"]  # no winner
    assert winners.loc[3, "trial_id"] == B.trial_id and winners.loc[4, "trial_id"] == "-"
    figures, notes = figure_plan(dd)
    smoothing = next(f for f in figures if f.name == "envelope_by_smoothing")
    assert [c.label for c in smoothing.curves] == ["data-dependent", "fixed", "upper envelope"]
    assert not notes
