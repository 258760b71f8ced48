"""`sweeper report`: write an experiment's paper-style tables and figures under reports/."""

from __future__ import annotations

from typing import Annotated

import typer

from sweeper.api import selection
from sweeper.api.envelope_view import plot_cover
from sweeper.cli.common import LatestExperiment, Only, Storage, app, fail
from sweeper.cli.display import echo
from sweeper.cli.options import AttestedOnly, Strict
from sweeper.cli.read_notes import attestation_note, exit_if_left_out, print_coverage
from sweeper.cli.reads import load_selected, radii_option
from sweeper.plan.grid import parse_only
from sweeper.report.formats import FIGURE_FORMATS, LINF_RADII_255
from sweeper.results.storage import DEFAULT_STORAGE
from sweeper.results.sweep_file import read_sweep


def _index_sections(exp, frame, only: str | None, grid: list[float]) -> list[str]:
    """The index's sections on the models the envelope strategy pruned and, after an envelope
    search, on what it trained, skipped and audited (markdown lines)."""
    from sweeper.report.pruned import pruned_section

    delta = " with probability ≥ 1 − δ"
    section = pruned_section(selection.pruned(exp, frame, parse_only(only)[0], grid), grid, delta)
    searched = selection.search_account(exp, frame)
    if searched is not None:
        section += ["## Envelope search", "", *(f"- {s}" for s in searched.lines()), ""]
    return section


def _built(exp, results, frame, asked: tuple, attested_only: bool):
    """The report of `frame` as asked (--only, radii, figure formats, ℓ∞ radii), its index
    saying what the envelope strategy pruned, what a search trained and what rests on
    unattested files (marked † among the winners)."""
    from sweeper.report.attestation_section import attestation_section
    from sweeper.report.build import build_report

    only, grid, figure_formats, linf_255 = asked
    batch = ((read_sweep(exp) or {}).get("space") or {}).get("certify", {}).get("batch_size")
    section = _index_sections(exp, frame, only, grid)
    models = set(frame.groupby(["trial_id", "cert_id"]).groups)
    section += attestation_section(results.attestations, models, attested_only)
    unattested = results.attestations.unattested if results.attestations else frozenset()
    dims = dataset_dims(frame["dataset"].unique())
    cover = plot_cover(exp, frame, parse_only(only)[0], "method")
    return build_report(
        frame, grid, dims, figure_formats, linf_255, exp.name, batch, section, unattested, cover
    )


def _formats(text: str, problems: list[str]) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    unknown = [f for f in formats if f not in FIGURE_FORMATS]
    if unknown or not formats:
        problems.append(
            f"--formats {text!r}: expected figure formats among {', '.join(FIGURE_FORMATS)} "
            "separated by commas, e.g. png,pdf"
        )
    return formats


def _linf(text: str, problems: list[str]) -> tuple[float, ...]:
    try:
        radii = tuple(float(p) for p in text.split(",") if p.strip())
        if not radii or not all(0 < r < 1e6 for r in radii):
            raise ValueError
        return tuple(dict.fromkeys(radii))
    except ValueError:
        problems.append(f"--linf {text!r}: expected ℓ∞ radii > 0 in units of 1/255, e.g. 1,2,4,8")
        return ()


def dataset_dims(datasets) -> dict[str, int]:
    """Input dimension d (C·H·W) per known data set."""
    from trainables.kernel.catalog import INPUT_DIM

    return {d: INPUT_DIM[d] for d in datasets if d in INPUT_DIM}


Formats = Annotated[
    str, typer.Option("--formats", help="Figure formats: png, pdf, svg (comma separated).")
]
LINF_DEFAULT = ",".join(f"{k:g}" for k in LINF_RADII_255)
Linf = Annotated[str, typer.Option("--linf", help="ℓ∞ radii of the ℓ∞ table, in units of 1/255.")]


@app.command()
def report(
    storage: Storage = DEFAULT_STORAGE,
    experiment: LatestExperiment = None,
    radii: Annotated[
        str | None,
        typer.Option(
            "--radii", help="ℓ2 radii: start:stop:step or a list 0,0.5,1 (default 0:2.25:0.25)."
        ),
    ] = None,
    only: Only = None,
    formats: Formats = "png,pdf",
    linf: Linf = LINF_DEFAULT,
    strict: Strict = False,
    attested_only: AttestedOnly = False,
) -> None:
    """Paper-style tables (markdown and LaTeX) and figures of an experiment, written under
    <experiment>/reports/ (a slice chosen with --only: reports/only-<slice>/); prints the
    files written. See reports/index.md."""
    from sweeper.report.build import write_report

    problems: list[str] = []
    figure_formats = _formats(formats, problems)
    grid = list(dict.fromkeys(radii_option(radii, problems)))
    linf_255 = _linf(linf, problems)
    exp, results, frame = load_selected(
        storage, experiment, only, problems, attested_only=attested_only
    )
    if frame.empty:
        fail(
            [
                f"no certification results to report in {exp.name} (check --only, or run "
                "`sweeper certify <space>`)"
            ]
        )
    built = _built(exp, results, frame, (only, grid, figure_formats, linf_255), attested_only)
    for location in write_report(built, exp.report_dir(only)):
        echo(location)
    for note in built.notes:
        echo(f"note: {note}", err=True)
    print_coverage(exp, results, frame)
    attestation_note(results, frame, attested_only)
    exit_if_left_out(results, strict)
