"""The final step of `sweeper certify` (issue 40 item 1; docs/guide/final-step.md): once the
selection is certified, the models to re-certify (`results.final_selection`: each envelope
winner at the radii `radii` and every model within its interval) certified on the report points
under the final step's own cert_id (`FinalStep`), and its dry run's price. A re-run resumes: a
model whose final rows exist is not certified again, and the candidates are recomputed from
the selection's rows, so after a run that certified more of the selection (the envelope
strategy composes: the final step picks from whatever it certified) the new ones are added."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeper.plan.sweep_plan import Plan
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import FinalStep

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.run.outcome import Outcome


@dataclass(frozen=True)
class FinalPlan:
    """What the final step does: its setting (`step`), the candidates per radius
    (`final_selection.CANDIDATE_COLUMNS`), the trials to re-certify, those done already
    (their final rows compacted) and the finished trials the selection has not certified
    whole yet (`waiting`: the candidates are then chosen among those it has)."""

    step: FinalStep
    candidates: pd.DataFrame
    trials: list[TrialConfig]
    done: list[str]
    waiting: list[str]

    @property
    def todo(self) -> list[TrialConfig]:
        return [t for t in self.trials if t.trial_id not in set(self.done)]

    def lines(self) -> list[str]:
        """What the step does, in words (the command's notes and its dry run)."""
        winners = self.candidates.loc[self.candidates["winner"].astype(bool), "trial_id"]
        report = self.step.report
        text = (
            f"final step: {len(self.trials)} models to re-certify ({winners.nunique()} envelope "
            f"winners, {len(self.trials) - winners.nunique()} more within a winner's 95% "
            f"interval) on {report.describe()} with {self.step.cert_id}; "
            f"{len(self.done)} done already"
        )
        found = [text]
        if self.waiting:
            found.append(
                f"final step: {len(self.waiting)} finished models are not certified on every "
                "selection point yet; the candidates are chosen among the others"
            )
        return found


def final_plan(plan: Plan, ready: list[TrialConfig]) -> FinalPlan | None:
    """The final step of `plan` over its finished trials `ready` (None: the plan has none),
    from the selection's rows as stored now."""
    from sweeper.results.final_selection import final_candidates, to_recertify

    spec = plan.spec.certify
    step = spec.final_step
    if step is None:
        return None
    frame, complete = selection_rows(plan, ready)
    candidates = final_candidates(frame, list(spec.decision_radii))
    chosen = {t for t, _ in to_recertify(candidates)}
    trials = [t for t in ready if t.trial_id in chosen]
    done = _compacted(plan, [t.trial_id for t in trials], step.cert_id)
    waiting = [t.trial_id for t in ready if t.trial_id not in complete]
    return FinalPlan(step, candidates, trials, done, waiting)


def selection_rows(plan: Plan, ready: list[TrialConfig]) -> tuple[pd.DataFrame, set[str]]:
    """(the rows of `ready` under the plan's selection setting, the trial_ids with every
    selection point certified or settled: compacted, or under the envelope strategy every
    model's record written)."""
    import pandas as pd

    from sweeper.results import envelope as env
    from sweeper.results.certify_rows import load_results

    cert_id = plan.spec.certify.cert_id
    ids = [t.trial_id for t in ready]
    if not plan.exp.exists():
        return pd.DataFrame(columns=env.READ_COLUMNS), set()
    frame = load_results(plan.exp, env.read_columns()).frame
    frame = frame[(frame["cert_id"] == cert_id) & frame["trial_id"].isin(ids)]
    if plan.spec.certify.strategy == "envelope":
        from sweeper.results.envelope_records import settled_models

        return frame.reset_index(drop=True), set(settled_models(plan.exp, ids, cert_id))
    return frame.reset_index(drop=True), set(_compacted(plan, ids, cert_id))


def _compacted(plan: Plan, trial_ids: list[str], cert_id: str) -> list[str]:
    from sweeper.results.storage import by_model

    if not plan.exp.exists():
        return []
    models = by_model(plan.exp.stage_files("certify"))
    return [
        t for t in trial_ids if any(f.kind == "compacted" for f in models.get((t, cert_id), []))
    ]


def final_of_plan(plan: Plan, step: FinalStep) -> Plan:
    """`plan` certifying with the final step's setting (what `sweep_run.certify` runs)."""
    return dataclasses.replace(plan, spec=dataclasses.replace(plan.spec, certify=step))


def merged(first: Outcome | None, second: Outcome | None) -> Outcome | None:
    """The selection's and the final step's outcomes as one (failures of both)."""
    if first is None or second is None:
        return first or second
    first.failures += second.failures
    first.interrupted = first.interrupted or second.interrupted
    return first
