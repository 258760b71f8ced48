"""`--search full`: Ray Tune is handed every trial of the run, in order, a fine-tune trial
only once its parent has finished (`StageSearcher`)."""

from __future__ import annotations

from ray.tune.search import Searcher

from sweeper.plan.sweep_plan import is_finished
from sweeper.results.storage import Experiment
from sweeper.run.tune_names import TuneTrials
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_status import read_status


class StageSearcher(Searcher):
    """Hands Tune the trials in order, a fine-tune trial only once its parent has finished.

    Trials whose parent is finished already (an earlier run) start at once. When a parent
    fails for good, its children are never started: `blocked` names them, and the search
    ends once nothing else can run."""

    def __init__(self, trials: list[TrialConfig], finished: set[str], handed: TuneTrials):
        super().__init__()
        self.waiting = list(trials)
        self.finished = set(finished)
        self.failed: set[str] = set()
        self.running: dict[str, str] = {}  # Tune's trial id -> ours
        self.handed = handed

    def suggest(self, trial_id: str):
        for i, cfg in enumerate(self.waiting):
            if cfg.init_from is None or cfg.init_from in self.finished:
                self.running[trial_id] = self.waiting.pop(i).trial_id
                return self.handed.hand(trial_id, cfg)
        if not self.waiting or (not self.running and self.blocked()):
            return Searcher.FINISHED
        return None  # children wait for their running parents

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        ours = self.running.pop(trial_id, None)
        if ours is not None:
            (self.failed if error else self.finished).add(ours)

    def blocked(self) -> dict[str, str]:
        """Waiting trials that can never start: child -> the parent that failed (or is absent)."""
        active = set(self.running.values()) | {c.trial_id for c in self.waiting}
        return {
            c.trial_id: c.init_from
            for c in self.waiting
            if c.init_from is not None
            and c.init_from not in self.finished
            and c.init_from not in active
        }

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: resuming reads each trial's own state, not Tune's."""

    def restore(self, checkpoint_path: str) -> None:
        """See `save`."""


def stage_searcher(
    exp: Experiment, to_train: list[TrialConfig], finished: list[TrialConfig], handed: TuneTrials
) -> StageSearcher:
    """Every trial of `to_train`, a fine-tune trial after its parent."""
    parents = {t.init_from for t in to_train if t.init_from}
    done = {t.trial_id for t in finished} | {
        p for p in parents if is_finished(read_status(exp.trial_dir(p)), None)
    }  # parents outside this --only slice may have finished in an earlier run
    return StageSearcher(to_train, done, handed)
