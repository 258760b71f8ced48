"""A plan as the dry run shows it: its trials, how far each got, the data a real run needs, and
its cost on the device whose throughput figures price it (measured by `sweeper bench`, else
the shipped table). Neither torch nor Ray is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sweeper.plan import throughput
from sweeper.plan.cost import SweepCost, price_sweep, strategy_certify_hours
from sweeper.plan.spec import Resources
from sweeper.plan.sweep_plan import Plan, is_finished, needed_data, trial_states
from sweeper.run.capacity import effective_resources
from trainables.kernel.config import TrialConfig, required


@dataclass(frozen=True)
class PricedPlan:
    """The plan of a sweep (`plan`: its spec, experiment, selected and whole trials), what a
    trial gets (`resources`), each selected trial's trial.json (`states`, None: never
    started), what a real run must read (`data` sets from a data directory, `pseudo` trials
    with pseudo-labelled files) and, when any trial is selected, its `cost` on `kind` ("gpu"
    or "cpu") with the `figures` that priced each architecture (arch -> (figure, device)) and,
    if the measured figures at `figures_file` were not trusted, why (`figures_problem`)."""

    plan: Plan
    resources: Resources
    states: dict[str, dict | None]
    data: list[str]
    pseudo: list[TrialConfig]
    kind: str
    cost: SweepCost | None
    figures: dict
    figures_file: Path
    figures_problem: str | None
    measured_kinds: frozenset[str]
    # certification device-hours per strategy (full, envelope: an estimate, plan.cost's
    # ENVELOPE_FULL_SHARE of the models certified fully)
    strategies: dict[str, float] = field(default_factory=dict)

    @property
    def trials(self) -> list[TrialConfig]:
        """The selected trials."""
        return self.plan.trials

    @property
    def finished(self) -> int:
        return sum(is_finished(self.states[t.trial_id], t) for t in self.trials)

    @property
    def started(self) -> int:
        """Trials begun but not finished (a run resumes them)."""
        return sum(1 for t in self.trials if self.states[t.trial_id] and not self.finished_one(t))

    def finished_one(self, trial: TrialConfig) -> bool:
        return is_finished(self.states[trial.trial_id], trial)


def price_plan(plan: Plan, cpu_only: bool = False) -> PricedPlan:
    """The dry run's figures for `plan` (`cpu_only`: trials ask for no GPU)."""
    resources = effective_resources(plan.spec.resources, cpu_only)
    data, pseudo = needed_data(plan.all_trials)
    kind = "gpu" if resources.gpu > 0 else "cpu"
    path = throughput.figures_path()
    measured, problem = throughput.read_measured(path)
    figures: dict = {}
    cost = None
    strategies: dict[str, float] = {}
    if plan.trials:
        figures = throughput.figures_for(
            kind, sorted({required(t.arch, "arch") for t in plan.trials}), measured
        )
        by_arch = {a: f for a, (f, _) in figures.items()}
        cost = price_sweep(plan.trials, plan.spec.certify, by_arch)
        strategies = strategy_certify_hours(plan.trials, plan.spec.certify, by_arch)
    return PricedPlan(
        plan=plan,
        resources=resources,
        states=trial_states(plan.exp, plan.trials),
        data=data,
        pseudo=pseudo,
        kind=kind,
        cost=cost,
        figures=figures,
        figures_file=path,
        figures_problem=problem,
        measured_kinds=frozenset(measured),
        strategies=strategies,
    )
