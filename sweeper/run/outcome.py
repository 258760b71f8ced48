"""What a run of a sweep left (`run grid`, `certify`, `empirical` alike): the trials it
trained, every failure with the trial and the stage it happened in, the trials blocked by a
failed parent, and whether it was cut short."""

from __future__ import annotations

from dataclasses import dataclass, field

Failure = tuple[str, str, str]  # (trial_id, stage: "train", "certify" or "empirical", error)


@dataclass
class Outcome:
    completed: list[str] = field(default_factory=list)  # trials trained in this run
    failures: list[Failure] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)  # trial_id -> its failed parent
    interrupted: bool = False

    @property
    def failed(self) -> dict[str, str]:
        """trial_id -> error of the trials whose training failed."""
        return {tid: error for tid, stage, error in self.failures if stage == "train"}

    @property
    def certify_failures(self) -> list[Failure]:
        """The failures of the stages after training."""
        return [f for f in self.failures if f[1] != "train"]
