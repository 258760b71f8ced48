"""`sweeper report`: an experiment's paper-style tables (markdown and LaTeX) and figures.

`build_report` assembles every file in memory from a results table (no I/O; the tables are
`report_tables`' DataFrames, the figures `report_figures`'); `write_report` writes them
atomically into a directory (a path or a URI), `index.md` last.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import pandas as pd

from sweeper.plan.run_settings import run_settings
from sweeper.report.figures import Cover, figure_plan, render_figure
from sweeper.report.formats import COLUMN_LABELS, is_fraction
from sweeper.report.render import BEYOND, cell, to_markdown
from sweeper.report.tables import (
    LINF_RADII_255,
    PaperTable,
    acr_table,
    envelope_summary,
    linf_summary,
    linf_table,
    per_model_tables,
    settings_lines,
    wide_table,
    winners_table,
)
from trainables.kernel import fileio

# The report's tables keep m_train as the papers print it (no label) and head their section
# and quantity columns with nothing.
HEADERS = {
    **{k: v for k, v in COLUMN_LABELS.items() if k not in ("m_train", "empirical_accuracy")},
    "section": "",
    "quantity": "",
}
TEX_HEADERS = {
    "sigma": r"$\sigma$",
    "epsilon": r"$\epsilon$",
    "steps": "$T$",
    "m_train": r"$m_{\mathrm{train}}$",
    "lam": r"$\lambda$",
    "eta": r"$\eta$",
    "sigma_cert": r"$\sigma_{\mathrm{cert}}$",
}
TEX_SPECIAL = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
    }
)
TEX_UNICODE = {
    "ℓ2": r"$\ell_2$",
    "ℓ∞": r"$\ell_\infty$",
    "√d": r"$\sqrt{d}$",
    "σ": r"$\sigma$",
    "ε": r"$\epsilon$",
    "λ": r"$\lambda$",
    "η": r"$\eta$",
    "·": r"$\cdot$",
    "≥": r"$\geq$",
}


@dataclass
class ReportFile:
    name: str  # relative to the report directory
    data: bytes
    what: str


@dataclass
class Report:
    files: list[ReportFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was skipped, and why


# ------------------------------------------------------------------------- rendering
@functools.lru_cache(maxsize=4096)  # a report escapes the same few labels thousands of times
def _tex(text: str) -> str:
    text = text.translate(TEX_SPECIAL)
    for symbol, command in TEX_UNICODE.items():
        text = text.replace(symbol, command)
    return text


def tex(text: str) -> str:
    return _tex(str(text))


def _cells(table: PaperTable, bold, escape=str) -> pd.DataFrame:
    """Cell texts: scores with 3 decimals ("-" where there is none), others as `cell`; bold
    cells wrapped by `bold`; a sections column printed once per section."""
    columns = {}
    for c in table.data.columns:
        values = table.data[c].tolist()  # plain Python values: no per-cell Arrow scalars
        if is_fraction(c):
            texts = ["-" if pd.isna(v) else f"{float(v):.3f}" for v in values]
        else:
            texts = [cell(v) for v in values]
        for i in table.partial.get(c, ()):
            texts[i] = texts[i] if texts[i] == "-" else f"≥{texts[i]}"
        texts = [escape(t) for t in texts]
        for i in table.beyond.get(c, ()):
            texts[i] = BEYOND
        for i in table.bold.get(c, ()):
            texts[i] = bold(texts[i])
        columns[c] = texts
    out = pd.DataFrame(columns, index=table.data.index, dtype=object)
    if table.sections:
        repeated = table.data[table.sections].eq(table.data[table.sections].shift())
        out.loc[repeated, table.sections] = ""
    return out


def _header(column: str) -> str:
    if column.startswith("linf="):
        return f"ℓ∞ {column[5:]}"
    return HEADERS.get(column, column)


def table_markdown(table: PaperTable) -> str:
    text = _cells(table, lambda s: f"**{s}**")
    text.columns = [_header(c) for c in text.columns]
    return to_markdown(text)


def table_latex(table: PaperTable) -> str:
    """A `table` float holding a `tabular` (no package needed), sections split by rules."""
    text = _cells(table, lambda s: rf"\textbf{{{s}}}", escape=tex)
    numeric = [is_fraction(c) or table.data[c].dtype.kind in "fiu" for c in text.columns]
    header = [
        f"$r={c[2:]}$" if c.startswith("r=") else TEX_HEADERS.get(c) or tex(_header(c))
        for c in text.columns
    ]
    lines = [r"\begin{table}[htbp]", r"\centering", rf"\caption{{{tex(table.title)}}}"]
    lines += [rf"\begin{{tabular}}{{{''.join('r' if n else 'l' for n in numeric)}}}", r"\hline"]
    lines += [" & ".join(header) + r" \\", r"\hline"]
    for i, row in enumerate(text.itertuples(index=False)):
        if table.sections and i > 0 and row[text.columns.get_loc(table.sections)]:
            lines.append(r"\hline")
        lines.append(" & ".join(row) + r" \\")
    return "\n".join([*lines, r"\hline", r"\end{tabular}", r"\end{table}"])


def table_files(stem: str, heading: str, intro: str, tables: list[PaperTable]) -> list[ReportFile]:
    """`stem`.md and `stem`.tex holding `tables`."""
    md = [f"# {heading}", "", intro, ""]
    for t in tables:
        md += [f"## {t.title}", "", table_markdown(t), ""]
    comment = "\n".join(f"% {line}" for line in [heading, *intro.splitlines()])
    latex = [f"{comment}\n% Written by `sweeper report`; \\input it (no package needed).", ""]
    latex += [s for t in tables for s in (table_latex(t), "")]
    return [
        ReportFile(f"{stem}.md", "\n".join(md).encode(), heading),
        ReportFile(f"{stem}.tex", "\n".join(latex).encode(), f"{heading} (LaTeX)"),
    ]


# -------------------------------------------------------------------------- assembly
ENVELOPE_RULE = (
    "Certified accuracy at ℓ2 radius r = share of test points classified correctly with a "
    "certified radius ≥ r (abstentions count as wrong); fractions, not percent. The upper "
    "envelope takes the best model per radius (ties: the higher clean accuracy); where no "
    "model certifies anything there is no winner (-). Under the envelope strategy a number "
    "marked ≥ is outside its guarantee (a pruned model, or one certified only from a larger "
    "radius, could be higher there): a lower bound of what full certification would report."
)


def build_report(
    frame: pd.DataFrame,
    radii: list[float],
    dims: dict[str, int],
    formats: tuple[str, ...] = ("png", "pdf"),
    linf_255: tuple[float, ...] = LINF_RADII_255,
    name: str = "",
    batch: int | None = None,
    pruned: list[str] | None = None,
    unattested: frozenset = frozenset(),
    cover: Cover | None = None,
) -> Report:
    """Every file of the report of `frame` (sound result rows; not empty), `index.md` last.
    `dims`: input dimension d per dataset (for the ℓ∞ table); `pruned`: the index's section on
    the models the envelope strategy pruned (`report.pruned.pruned_section`) and other index
    sections; `unattested`: the models resting on unattested files, a winner among them
    marked (`report.attestation_section`); `cover`: which envelope numbers the envelope
    strategy's guarantee covers (`api.envelope_view.plot_cover`), the others marked ≥."""
    report = Report()
    report.files += _envelope_files(frame, radii, unattested, cover)
    linf, notes = _linf_tables(frame, dims, linf_255, cover)
    if linf:
        intro = "An ℓ2 certificate of radius r certifies ℓ∞ radius r/√d (d = input dimension)."
        report.files += table_files("linf", "ℓ∞ certified accuracy implied by ℓ2", intro, linf)
    report.notes += notes
    report.files += _figure_files(frame, formats, report.notes)
    index = index_markdown(frame, report, radii, dims, linf_255, name, batch, pruned or [])
    report.files.append(ReportFile("index.md", index, ""))
    return report


def _envelope_files(
    frame: pd.DataFrame, radii: list[float], unattested, cover=None
) -> list[ReportFile]:
    """Per model, envelope, abstention and ACR tables at the ℓ2 radii."""
    summary = envelope_summary(frame, radii, cover)
    files = table_files(
        "per_model",
        "Certified accuracy per model (appendix E)",
        "One table per method, attack and T; rows are models, columns ℓ2 radii, the best entry "
        "of each column in bold (Gaussian baselines included). " + ENVELOPE_RULE,
        per_model_tables(frame, radii),
    )
    quantities = [("certified_accuracy", "certified accuracy"), ("clean_acc", "winner clean acc.")]
    if "final_accuracy" in summary:  # the final step (issue 40): the winner on the report points
        quantities.append(("final_accuracy", "final: winner on the report points"))
    envelope = wide_table(
        summary,
        quantities,
        "Upper envelope per ℓ2 radius, with the winner's clean accuracy (best method in bold)",
        bold=True,
    )
    files += table_files(
        "envelope", "Upper envelope", ENVELOPE_RULE, [envelope, winners_table(summary, unattested)]
    )
    abstain = [("abstain_rate", "winner abstention rate")]
    title = "Certification abstention rate of the envelope's winners per ℓ2 radius"
    files += table_files(
        "abstention",
        "Abstention rate of the winners",
        "Share of the winner's test points on which CERTIFY abstained. " + ENVELOPE_RULE,
        [wide_table(summary, abstain, title)],
    )
    winners = wide_table(summary, [("acr", "winner ACR")], "ACR of the envelope's winners")
    return files + table_files(
        "acr",
        "Average certified radius (ACR)",
        "ACR = mean over test points of radius · correct (0 when wrong or abstaining).",
        [winners, acr_table(frame)],
    )


def _linf_tables(frame, dims, linf_255, cover=None) -> tuple[list[PaperTable], list[str]]:
    tables, notes = [], []
    for dataset, part in frame.groupby("dataset", sort=True):
        if dataset not in dims:
            notes.append(f"linf: skipped for {dataset}: its input dimension d is unknown")
            continue
        tables.append(
            linf_table(linf_summary(part, dims[dataset], linf_255, cover), dataset, dims[dataset])
        )
    return tables, notes


def _figure_files(frame, formats, notes: list[str]) -> list[ReportFile]:
    figures, skipped = figure_plan(frame)
    notes += skipped
    return [
        ReportFile(f"{figure.name}.{fmt}", render_figure(figure, fmt), figure.caption)
        for figure in figures
        for fmt in formats
    ]


def run_summary(frame: pd.DataFrame) -> str:
    """How the models' base classifiers were run (from their cert_ids), with model counts:
    e.g. "fp32 (3 models); bf16, channels_last (1 model)"."""
    models = frame[["trial_id", "cert_id"]].drop_duplicates()
    counts = models["cert_id"].map(run_settings).value_counts().sort_index()
    return "; ".join(f"{mode} ({k} model{'s' * (k != 1)})" for mode, k in counts.items())


def index_markdown(
    frame, report: Report, radii, dims, linf_255, name: str, batch=None, pruned=()
) -> bytes:
    """What the report holds: its settings, a line per table and figure, what was skipped."""
    models = frame.groupby(["trial_id", "cert_id"]).ngroups
    data = ", ".join(f"{d} (d = {dims.get(d, '?')})" for d in sorted(frame["dataset"].unique()))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"# Report of {name or 'the experiment'}",
        "",
        f"{models} models, {len(frame)} certified points; data set {data}. Written {stamp} by "
        "`sweeper report`; only the files listed here belong to this report.",
        "",
        f"- ℓ2 radii: {', '.join(f'{r:g}' for r in radii)}",
        f"- ℓ∞ radii: {', '.join(f'{k:g}/255' for k in linf_255)} (an ℓ2 certificate of radius "
        "r certifies ℓ∞ radius r/√d, so these need ℓ2 radius ρ·√d)",
        f"- {ENVELOPE_RULE}",
        f"- Base classifier run at: {run_summary(frame)}. A certificate holds for the base "
        "classifier run that way: deploy it (PREDICT) at the same precision.",
        "- Representative model per σ (figure): the model with the best ACR of that σ (ties: "
        "higher clean accuracy, then smaller trial_id).",
        "",
        "## Certification settings",
        "",
        *(f"- {line}" for line in settings_lines(frame, batch)),
        f"- {BEYOND}: a radius beyond the largest one the settings can certify (every vote for "
        "one class); certified accuracy there is 0 by construction, not by the models.",
        "",
        *pruned,
    ]
    for kind, suffixes in (("Tables", (".md", ".tex")), ("Figures", (".png", ".pdf", ".svg"))):
        listed = [f for f in report.files if f.name.endswith(suffixes) and f.name != "index.md"]
        lines += [f"## {kind}", "", "| files | contents |", "|---|---|"]
        for what in dict.fromkeys(f.what.removesuffix(" (LaTeX)") for f in listed):
            names = [f.name for f in listed if f.what.removesuffix(" (LaTeX)") == what]
            lines.append(f"| {', '.join(f'[{n}]({n})' for n in names)} | {what} |")
        lines.append("")
    lines += [f"![{f.what}]({f.name})" for f in report.files if f.name.endswith(".png")]
    lines += ["", "## Skipped", "", *(f"- {n}" for n in report.notes or ["nothing"]), ""]
    return "\n".join(lines).encode()


def write_report(report: Report, directory: str) -> list[str]:
    """Write every file atomically under `directory` (index.md last); their locations."""
    written = []
    for f in report.files:
        location = fileio.join(directory, f.name)
        fileio.write_bytes_atomic(location, f.data)
        written.append(location)
    return written
