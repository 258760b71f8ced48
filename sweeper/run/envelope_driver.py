"""What the `envelope` strategy's certifier (`envelope_run.EnvelopeCertifier`) asks of the
experiment and of the sharded-stage engine: a model's test points and shard plan, a task
submitted at the run's resources, a FULL step run through the engine (`shards.StageRunner`)
and its compacted rows read back, checked before they count (`envelope_storage.checked`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sweeper.plan.spec import Resources
from sweeper.results.failures import FailureLog
from sweeper.results.storage import Experiment
from sweeper.run import shards
from sweeper.run.envelope_stage import ENVELOPE_CERTIFY, EnvelopeFull
from sweeper.run.envelope_storage import checked, full_refusal
from sweeper.run.retries import Retries
from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import CertifySpec


@dataclass
class Driver:
    """The certifier's storage, settings, resources and engine (module docstring)."""

    exp: Experiment
    spec: CertifySpec
    resources: Resources
    on_event: Callable[[shards.Event], None]
    tasks: shards.Tasks
    sizer: Callable[[str, str | None], int]
    failures: FailureLog

    def points(self, cfg: TrialConfig) -> list[int]:
        """The model's test points: the stage CERTIFY's (every skip-th, at most max)."""
        return [i for s in self.shard_plan(cfg) for i in s.indices]

    def shard_plan(self, cfg: TrialConfig) -> list:
        return shards.plan(cfg, "certify", self.spec, self.sizer(cfg.dataset, cfg.data_dir))

    def submit(self, fn: Callable, *args) -> Any:
        options = {"num_cpus": self.resources.cpu, "num_gpus": self.resources.gpu}
        return self.tasks.submit(fn, options, *args)

    def start_full(
        self, cfg: TrialConfig, setting: EnvelopeFull, retries: Retries
    ) -> shards.StageRunner:
        """The model's certification shards, submitted to the engine (none if compacted)."""
        runner = shards.StageRunner(
            self.exp,
            [shards.Work(ENVELOPE_CERTIFY, setting)],
            self.resources,
            self.on_event,
            self.sizer,
            self.failures,
            self.tasks,
            retries,
        )
        runner.submit(cfg)
        return runner

    def compacted(self, cfg: TrialConfig) -> str:
        """Where the model's compacted certification rows are (its FULL step's)."""
        plan = len(self.shard_plan(cfg))
        return self.exp.compacted_path("certify", cfg.trial_id, self.spec.cert_id, plan)

    def full_rows(
        self, cfg: TrialConfig, labels: dict[int, int], probed: dict[int, int]
    ) -> tuple[Any, str]:
        """(the model's compacted certification rows, None if there are none (its FULL step
        failed: the engine recorded why) or they fail `full_refusal` with the data set's
        `labels` and the counts the probe drew, `probed`; why they were refused)."""
        path = self.compacted(cfg)
        if not fileio.exists(path):
            return None, ""
        why = partial(full_refusal, labels=labels, n=self.spec.n, probed=probed)
        return checked(path, why, "not counted", ("compact", cfg.trial_id, self.spec.cert_id, {}))
