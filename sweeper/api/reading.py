"""`Sweep.read()`: an experiment's results as one `Reading`, as Ray Tune's `ResultGrid` is a
run's. It holds what was read (the validated rows, the `--only` slice of the sound models, the
files left out and why, the data-dependent models awaiting their memory pass) and builds every
view of it: the envelope, the per-model table, the coverage, the models the envelope strategy
pruned, the guarantee notes; and per trial a `TrialResult` (Tune's `Result`: config, metrics,
checkpoint path, status, certification per setting).

    reading = Sweep(storage="results", experiment="digits").read()
    reading.envelope([0, 0.25, 0.5])       # `sweeper envelope`'s numbers
    reading.table([0, 0.5])                # `sweeper table`'s rows
    reading.coverage()                     # models, trials and points read; what is missing
    reading["9ecc72e4b31d"].certification  # one trial: its rows per certification setting
    [r.checkpoint for r in reading]        # every trial of the sweep, as Tune's results

Views are computed when asked, from the rows read once. pandas is imported inside."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sweeper.api import selection
from sweeper.api.envelope_view import envelope_read, group_of, plot_cover
from sweeper.api.trial_results import TrialResult, trial_results
from sweeper.results.storage import Experiment

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.api.empirical_view import Empirical
    from sweeper.api.selection import Coverage
    from sweeper.report.build import Report
    from sweeper.report.figures import Cover
    from sweeper.results.certify_rows import Results
    from sweeper.results.search_records import SearchAccount


@dataclass(frozen=True)
class Reading:
    """What `Sweep.read()` read of an experiment: `results` (every validated row; `invalid`
    the files left out, "path: why"; `attestations`), `frame` (the `only` slice of the sound
    models), `unsound` (data-dependent models left out awaiting their memory pass), `only`
    (the slice, as `--only` spells it) and `selection` (its key=value pairs)."""

    exp: Experiment
    results: Results
    frame: pd.DataFrame
    unsound: int
    only: str | None = None
    selection: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ what was read
    @property
    def left_out(self) -> list[str]:
        """The result files left out of every number, "path: why"."""
        return list(self.results.invalid)

    @property
    def unsound_models(self) -> int:
        """Every data-dependent model of the experiment awaiting its memory pass (in or out of
        the slice): what `--strict` counts with the files left out."""
        frame = self.results.frame
        return len(frame.loc[~frame["sound"], ["trial_id", "cert_id"]].drop_duplicates())

    @property
    def missing_signed(self) -> list[str]:
        """Results the signed inventory lists that are missing (with a key), one line each."""
        a = self.results.attestations
        return list(a.inventory) if a is not None else []

    def get_dataframe(self) -> pd.DataFrame:
        """The rows read (the slice of the sound models), one per certified test point."""
        return self.frame

    def coverage(self) -> Coverage:
        """What the read covers: models, trials, points; planned trials without results."""
        return selection.coverage(self.exp, self.results, self.frame)

    def models(self) -> int:
        """How many models (a trial under one certification setting) the slice holds."""
        return selection.models_of(self.frame)

    def search(self) -> SearchAccount | None:
        """The envelope search's account (None: no search ran)."""
        return selection.search_account(self.exp, self.results.frame)

    def pruned_without_rows(self) -> int:
        """Trials the envelope strategy pruned that have no certified rows (done, not missing)."""
        from sweeper.results.envelope_records import pruned

        ids = {tid for tid, _ in pruned(self.exp)}
        return len(ids - set(self.results.frame["trial_id"])) if ids else 0

    def guarantee_notes(self, radii: Sequence[float]) -> list[str]:
        """What the envelope strategy's guarantee covers at `radii` (one line per `_envelope`
        setting of the slice: `envelope_records.soundness_lines`)."""
        from sweeper.results.envelope_records import soundness_lines

        cert_ids = self.frame["cert_id"].unique().tolist() if len(self.frame) else []
        return soundness_lines(self.exp, cert_ids, list(radii))

    def settings_lines(self) -> list[str]:
        """The certification settings read and each σ's largest certifiable radius."""
        from sweeper.report.tables import settings_lines

        return settings_lines(self.frame) if len(self.frame) else []

    # ------------------------------------------------------------------ views
    def envelope(self, radii: Sequence[float], by: str | None = None) -> pd.DataFrame:
        """The upper envelope of certified accuracy over the slice's models at `radii` (per
        `by` group; a mixed `smoothing` when None), `covered` under the envelope strategy,
        `attested` with a key (`envelope_view.envelope_read`); `ProblemsError` for a `by`
        that is no column."""
        from sweeper.results.envelope import EnvelopeError
        from trainables.kernel.errors import ProblemsError

        try:
            return envelope_read(self.exp, self.results, self.frame, radii, by, self.selection)
        except EnvelopeError as e:
            raise ProblemsError([str(e)]) from None

    def group(self, by: str | None) -> str | None:
        """The column the envelope is grouped by (`by`, else `smoothing` when mixed)."""
        return group_of(self.frame, by)

    def table(self, radii: Sequence[float]) -> pd.DataFrame:
        """One row per model: certified accuracy per radius, ACR, points; the envelope
        strategy's pruned models with their upper bounds; `attested` with a key.
        `ProblemsError` when there is no model."""
        rows = selection.model_table(self.exp, self.frame, self.selection, list(radii))
        return selection.mark_attested(rows, self.results)

    def pruned(self, radii: Sequence[float]) -> pd.DataFrame:
        """The models the envelope strategy pruned that the slice keeps, with their upper
        bounds per radius."""
        return selection.pruned(self.exp, self.frame, self.selection, list(radii))

    def plot_cover(self, by: str | None) -> Cover | None:
        """For a figure: whether each point of a curve is covered by the guarantee."""
        return plot_cover(self.exp, self.frame, self.selection, by)

    def empirical(self, table: pd.DataFrame, by: str | None = None) -> Empirical:
        """`table` (this reading's envelope) with the best empirical accuracy under attack of
        the slice's models at the attacked radii (`empirical_view`)."""
        from sweeper.api.empirical_view import empirical_overlay

        return empirical_overlay(self.exp, table, self.group(by), self.selection)

    def report(
        self,
        radii: Sequence[float],
        figure_formats: Sequence[str] = ("png", "pdf"),
        linf_255: Sequence[float] = (1.0, 2.0, 4.0, 8.0),
        attested_only: bool = False,
    ) -> Report:
        """`sweeper report`'s tables and figures of the slice, in memory (`report_view.build`);
        `write_report` writes them. `ProblemsError` when the slice has no rows."""
        from sweeper.api import report_view
        from trainables.kernel.errors import ProblemsError

        if self.frame.empty:
            raise ProblemsError(
                [
                    f"no certification results to report in {self.exp.name} (check --only, "
                    "or run `sweeper certify <space>`)"
                ]
            )
        return report_view.build(self, radii, figure_formats, linf_255, attested_only)

    def write_report(self, built: Report) -> list[str]:
        """Write `built` under the experiment's reports/ (the slice's: reports/only-<slice>/);
        the locations written, index.md last."""
        from sweeper.api import report_view

        return report_view.write(self, built)

    # ------------------------------------------------------------------ per trial
    def trials(self) -> list[TrialResult]:
        """Every trial of the sweep (sweep.json's, in its order; the slice's) and every other
        trial with rows (imported ones), as Tune's results; each trial.json read once, on the
        first call."""
        return list(self._trials)

    @cached_property
    def _trials(self) -> tuple[TrialResult, ...]:
        return tuple(trial_results(self))

    def __iter__(self) -> Iterator[TrialResult]:
        return iter(self.trials())

    def __len__(self) -> int:
        return len(self.trials())

    def __getitem__(self, key: int | str) -> TrialResult:
        """A trial's result by its position or its trial_id (KeyError naming the ids there)."""
        found = self.trials()
        if isinstance(key, int):
            return found[key]
        for result in found:
            if result.trial_id == key:
                return result
        raise KeyError(f"no trial {key!r} in {self.exp.name} ({len(found)} trials)")


def read(
    exp: Experiment,
    only: str | None = None,
    columns: list[str] | None = None,
    pruned_ok: bool = False,
    attested_only: bool = False,
) -> Reading:
    """`exp`'s certification rows read once (`Sweep.read`): validated, the `only` slice of the
    sound models (`columns`: only these and the slice's, not every results column;
    `pruned_ok`: a slice of pruned models only is no row, not an error; `attested_only`: the
    models resting on attested files only). `ProblemsError` for what stops every read: a
    malformed `only` or one that matches no model, results that cannot be read, a file that is
    no readable Parquet (move it away), every signed result gone, `attested_only` without a
    key."""
    from sweeper.results.certify_rows import ResultsError
    from trainables.kernel.errors import ProblemsError

    chosen = selection.only_selection(only)
    try:
        results = selection.load(exp, chosen, columns)
    except ResultsError as e:
        raise ProblemsError([str(e)]) from None
    if corrupt := selection.corrupt_files(exp, results.invalid):
        raise ProblemsError(corrupt)
    gone = results.attestations.inventory if results.attestations else ()
    if results.frame.empty and gone:  # not "no results yet": the signed ones are gone
        raise ProblemsError(
            [*gone, "run `sweeper verify` for every file, and restore them from a copy"]
        )
    attested = selection.attested_rows(results, results.frame, attested_only)
    rows = selection.only_rows(exp, attested, chosen, pruned_ok)
    frame, unsound = selection.sound_rows(rows)
    return Reading(exp, results, frame, unsound, only, chosen)
