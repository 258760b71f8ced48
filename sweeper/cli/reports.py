"""`sweeper report`: write an experiment's paper-style tables and figures under reports/."""

from __future__ import annotations

from typing import Annotated

import typer

from sweeper.api.sweep import DEFAULT_STORAGE
from sweeper.cli.common import LatestExperiment, Only, Storage, app
from sweeper.cli.display import echo
from sweeper.cli.options import AttestedOnly, Strict
from sweeper.cli.read_notes import attestation_note, exit_if_left_out, print_coverage
from sweeper.cli.reads import load_selected, radii_option
from sweeper.report.formats import FIGURE_FORMATS, LINF_RADII_255


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
    problems: list[str] = []
    figure_formats = _formats(formats, problems)
    grid = list(dict.fromkeys(radii_option(radii, problems)))
    linf_255 = _linf(linf, problems)
    read = load_selected(storage, experiment, only, problems, attested_only=attested_only)
    built = read.report(grid, figure_formats, linf_255, attested_only)
    for location in read.write_report(built):
        echo(location)
    for note in built.notes:
        echo(f"note: {note}", err=True)
    print_coverage(read)
    attestation_note(read.results, read.frame, attested_only)
    exit_if_left_out(read, strict)
