"""`sweeper report` in the library (`Reading.report`, `Sweep.report`): a reading's paper-style
tables and figures, built in memory (`report.build`) with the index's sections on what the
envelope strategy pruned, what an envelope search trained and what rests on unattested files,
then written under the experiment's reports/ (a slice's: reports/only-<slice>/)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from sweeper.api.rows_read import RowsRead
from sweeper.report.formats import LINF_RADII_255
from sweeper.results.sweep_file import read_sweep

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.report.build import Report
    from sweeper.report.figures import Cover
    from sweeper.results.search_records import SearchAccount


class Reading(RowsRead, Protocol):
    """What the report reads of a `reading.Reading` (a protocol, so that this module, which
    `reading` imports, imports nothing of it)."""

    @property
    def only(self) -> str | None: ...

    def pruned(self, radii: Sequence[float]) -> pd.DataFrame: ...

    def search(self) -> SearchAccount | None: ...

    def plot_cover(self, by: str | None) -> Cover | None: ...


FIGURES = ("png", "pdf")


def index_sections(read: Reading, grid: list[float]) -> list[str]:
    """The index's sections on the models the envelope strategy pruned and, after an envelope
    search, on what it trained, skipped and audited (markdown lines)."""
    from sweeper.report.pruned import pruned_section

    delta = " with probability ≥ 1 − δ"
    section = pruned_section(read.pruned(grid), grid, delta)
    searched = read.search()
    if searched is not None:
        section += ["## Envelope search", "", *(f"- {s}" for s in searched.lines()), ""]
    return section


def build(
    read: Reading,
    radii: Sequence[float],
    figure_formats: Sequence[str] = FIGURES,
    linf_255: Sequence[float] = LINF_RADII_255,
    attested_only: bool = False,
) -> Report:
    """The report of the reading's slice at `radii` (ℓ2; ℓ∞ at `linf_255`/255), its figures
    in `figure_formats`, its index saying what the envelope strategy pruned, what a search
    trained and what rests on unattested files (marked † among the winners)."""
    from sweeper.report.attestation_section import attestation_section
    from sweeper.report.build import build_report

    grid, frame, results = list(dict.fromkeys(radii)), read.frame, read.results
    space = (read_sweep(read.exp) or {}).get("space") or {}
    batch = space.get("certify", {}).get("batch_size")
    section = index_sections(read, grid)
    models = {(str(t), str(c)) for t, c in zip(frame["trial_id"], frame["cert_id"], strict=True)}
    section += attestation_section(results.attestations, models, attested_only)
    unattested = results.attestations.unattested if results.attestations else frozenset()
    dims = dataset_dims(frame["dataset"].unique())
    formats, linf = tuple(figure_formats), tuple(linf_255)
    return build_report(
        frame,
        grid,
        dims,
        formats,
        linf,
        read.exp.name,
        batch,
        section,
        unattested,
        read.plot_cover("method"),
    )


def write(read: Reading, report: Report) -> list[str]:
    """Write `report` under the experiment's reports/ (the slice's folder); the locations."""
    from sweeper.report.build import write_report

    return list(write_report(report, read.exp.report_dir(read.only)))


def dataset_dims(datasets: Iterable[str]) -> dict[str, int]:
    """Input dimension d (C·H·W) per known data set."""
    from trainables.kernel.catalog import INPUT_DIM

    return {d: INPUT_DIM[d] for d in datasets if d in INPUT_DIM}
