"""A plan as the dry run shows it: its trials, how far each got, the data a real run needs, and
its cost on the device whose throughput figures price it (measured by `sweeper bench`, else
the shipped table). Neither torch nor Ray is imported."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from sweeper.api.final_run import FinalPlan, final_of_plan, final_plan
from sweeper.plan import throughput
from sweeper.plan.cost import SEARCH_SHARE as SEARCH_SHARE  # the dry run names it
from sweeper.plan.cost import (
    Devices,
    Group,
    SearchCost,
    SweepCost,
    WallClock,
    groups,
    price_sweep,
    search_cost,
    strategy_certify_hours,
    wall_clock,
)
from sweeper.plan.spec import Resources
from sweeper.plan.sweep_plan import Plan, is_finished, needed_data, trial_states
from sweeper.results.storage import StageFile, by_model
from sweeper.run.capacity import effective_resources
from sweeper.run.envelope_outlook import Outlook, outlook
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
    # certification device-hours per strategy (full, envelope: an estimate, the share of
    # models certified fully per σ from the pilots' resolution, `outlook`)
    strategies: dict[str, float] = field(default_factory=dict)
    outlook: Outlook | None = None
    # under the envelope search: its expected device-hours beside the grid's (plan.cost)
    search: SearchCost | None = None

    def wall_clock(self, capacity: Devices) -> WallClock | None:
        """How long the sweep takes on `capacity` (None: it cannot host one trial)."""
        assert self.cost is not None, "a plan without a selected trial has no cost"
        return wall_clock(self.cost, self.resources, self.kind, capacity)

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
    seen = outlook(plan.trials, plan.spec.certify) if plan.trials else None
    if plan.trials:
        figures = throughput.figures_for(
            kind, sorted({required(t.arch, "arch") for t in plan.trials}), measured
        )
        by_arch = {a: f for a, (f, _) in figures.items()}
        shares = seen.shares if seen else None
        cost = price_sweep(plan.trials, plan.spec.certify, by_arch, shares)
        strategies = strategy_certify_hours(plan.trials, plan.spec.certify, by_arch, shares)
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
        outlook=seen,
        search=_searched(plan, cost),
    )


def _searched(plan: Plan, cost: SweepCost | None) -> SearchCost | None:
    spec = plan.spec.search
    return None if cost is None or not spec.active else search_cost(cost, spec.audit, spec.budget)


@dataclass(frozen=True)
class CertifyPreview:
    """`sweeper certify --dry-run`: the finished trials of `plan` and how far each is
    certified under the plan's settings (`settings`: its setting_ids), with the device-hours
    left (`priced` prices the models not yet certified; a model with shards written counts
    the share of its shards still missing). Under strategy envelope a model is done once
    certified or pruned; one not settled is priced afresh (the pilots drawn are kept)."""

    plan: Plan  # what was asked: its selected trials, finished or not
    priced: PricedPlan  # the models still to certify, priced
    ready: list[TrialConfig]  # the selected trials that finished training
    settings: list[str]
    done: list[str]  # trial_ids certified (envelope: or pruned) under every setting
    partly: dict[str, tuple[int, int]]  # trial_id -> (shards written, shards planned)
    left_hours: float  # certification device-hours still to spend
    final: FinalPreview | None = None  # the final step (`--final`), priced

    @property
    def to_start(self) -> int:
        """Finished models with nothing written yet under the settings."""
        return len(self.ready) - len(self.done) - len(self.partly)


def preview_certify(plan: Plan, ready: list[TrialConfig], cpu_only: bool = False) -> CertifyPreview:
    """The certification a `sweeper certify` of `plan` would do on its finished trials
    `ready`, from one listing of its files (no data read, no Ray): which are done, begun or
    not begun, and the cost of the rest on the device that prices the plan."""
    settings = [variant.setting_id for variant in plan.spec.certify.variants()]
    done, partly = _certified(plan, [t.trial_id for t in ready], settings)
    todo = [t for t in ready if t.trial_id not in set(done)]
    priced = price_plan(replace(plan, trials=todo), cpu_only)
    left = 0.0
    if priced.cost is not None:
        for cost in priced.cost.costs:
            written, planned = partly.get(cost.trial.trial_id, (0, 1))
            left += cost.certify_hours * (1 - written / planned)
    final = preview_final(plan, ready, cpu_only) if plan.spec.certify.final else None
    return CertifyPreview(plan, priced, ready, settings, done, partly, left, final)


@dataclass(frozen=True)
class FinalPreview:
    """The final step in the dry run: what it would re-certify from the selection's rows as
    they are (`chosen`), the device-hours of those not done (`hours`) and of one model on the
    report points (`per_model`, with its forwards: a selection not yet complete can add
    models)."""

    chosen: FinalPlan
    hours: float
    per_model: float
    forwards: float

    def lines(self, device: str) -> list[str]:
        """The dry run's lines (`device`: GPU or core)."""
        found = self.chosen.lines()
        todo = len(self.chosen.todo)
        found.append(
            f"final step left ≈ {self.hours:.3g} {device}-hours for {todo} models "
            f"({self.forwards:.3g} forwards per model, ≈ {self.per_model:.3g} {device}-hours each)"
        )
        return found


def preview_final(plan: Plan, ready: list[TrialConfig], cpu_only: bool) -> FinalPreview | None:
    """The final step's dry run (None: no final step, or no finished model to price)."""
    chosen = final_plan(plan, ready)
    if chosen is None or not ready:
        return None
    step_plan = final_of_plan(plan, chosen.step)
    todo = chosen.todo
    priced = price_plan(replace(step_plan, trials=todo or ready[:1]), cpu_only)
    costs = [] if priced.cost is None else priced.cost.costs
    hours = sum(c.certify_hours for c in costs) if todo else 0.0
    per_model = max((c.certify_hours for c in costs), default=0.0)
    forwards = max((c.certify_forwards for c in costs), default=0.0)
    return FinalPreview(chosen, hours, per_model, forwards)


def _certified(
    plan: Plan, trial_ids: list[str], settings: list[str]
) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """(the models done under every setting, {model: (shards written, planned)} of those
    begun), from the stage's files (strategy envelope: its records)."""
    if plan.spec.certify.strategy == "envelope":
        from sweeper.results.envelope_records import settled_models

        return settled_models(plan.exp, trial_ids, plan.spec.certify.cert_id), {}
    models = by_model(plan.exp.stage_files("certify")) if plan.exp.exists() else {}
    done, partly = [], {}
    for t in trial_ids:
        files = [models.get((t, s), []) for s in settings]
        if all(any(f.kind == "compacted" for f in fs) for fs in files):
            done.append(t)
            continue
        pairs = [_shards_written(fs) for fs in files]
        if written := sum(w for w, _ in pairs):
            partly[t] = (written, sum(p for _, p in pairs))
    return done, partly


def _shards_written(files: list[StageFile]) -> tuple[int, int]:
    """(shards written, shards planned) of one model under one setting: a compacted model is
    whole; of shards of several counts (another shard size), those of the last one listed.
    Nothing written: (0, 1), the whole model to do."""
    if any(f.kind == "compacted" for f in files):
        count = next(f.count or 1 for f in files if f.kind == "compacted")
        return count, count
    shards = [f for f in files if f.kind == "shard" and f.count]
    if not shards:
        return 0, 1
    count = shards[-1].count or 1
    return len({f.index for f in shards if f.count == count}), count


def cost_groups(cost: SweepCost) -> list[Group]:
    """The trials priced alike, one group each (the dry run's table: `plan.cost.groups`)."""
    return groups(cost.costs)


def devices(kind: str, address: str | None, gpus: int | None) -> Devices | None:
    """What the wall-clock estimate assumes: `gpus` GPUs (--gpus, on a sweep of GPU trials);
    the cluster's own at `address`; else this machine's CPUs for a sweep on CPUs (a local Ray
    uses them all); None: nothing to assume. `LaunchError` if the cluster cannot be reached."""
    if address is not None:
        return cluster_devices(address, gpus)
    if gpus is not None:
        return Devices(gpus, None, f"{gpus} GPUs (--gpus)")
    if kind == "cpu":
        cores = os.cpu_count() or 1
        return Devices(0, cores, f"this machine's {cores} CPU cores")
    return None


def cluster_devices(address: str, gpus: int | None) -> Devices:
    """The connected cluster's GPUs and CPUs now (the only place the dry run imports Ray)."""
    from sweeper.run.launch import ray_cluster

    with ray_cluster(address):
        import ray

        total = ray.cluster_resources()
    have = total.get("GPU", 0.0)
    where = f"the cluster at {address} ({have:g} GPUs, {total.get('CPU', 0):g} CPUs now)"
    if gpus is not None:
        return Devices(gpus, total.get("CPU"), f"{gpus} GPUs (--gpus) on {where}")
    return Devices(have, total.get("CPU", 0.0), where)


def record_throughput(name: str, kind: str, rates: dict, smoke: bool) -> Path:
    """Store `sweeper bench`'s figures measured on device `name` for the dry runs
    ($SWEEPER_THROUGHPUT, else ~/.cache/sweeper/throughput.json); the file written."""
    path = throughput.figures_path()
    throughput.write_measured(path, kind, throughput.device_entry(name, rates, smoke))
    return path
