"""A plan's work on Ray, as `sweeper run grid`, `sweeper certify` and `sweeper empirical` do
it and `sweeper.Sweep` offers it: what is left to do (`all_certified`, `finished_trials`,
`all_attacked`), the trials to train again moved aside (`retire`), and the runs themselves
(`train_and_certify`, `certify`, `attack`), each holding the experiment and the cluster
(`driving`) and returning what they left (`Outcome`). No printing: problems are
`ProblemsError`s, progress goes to the caller's `Watchers`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sweeper.plan.param_space import ParamSpace, run_command
from sweeper.plan.spec import Resources
from sweeper.plan.sweep_plan import Plan, PlanError, is_finished, retire_trials, trial_states
from sweeper.results.sweep_file import (
    SETTINGS,
    declared_settings,
    read_sweep,
    record_settings,
    trials_doc,
    write_sweep,
)
from sweeper.run.driving import Watchers, driving
from sweeper.run.launch_options import LaunchOptions
from trainables.kernel.config import TrialConfig

if TYPE_CHECKING:
    from sweeper.run.outcome import Outcome
    from trainables.kernel.stage_settings import EmpiricalSetting

    StageOutcome = Outcome  # one Outcome for every run (sweeper.run.outcome)


def certify_settings(plan: Plan) -> list[str]:
    """The setting_ids a plan certifies with (fixed σ, and DDRS if asked)."""
    return [spec.setting_id for spec in plan.spec.certify.variants()]


def declared_ids(plan: Plan) -> list[str]:
    """The setting_ids a plan declares in sweep.json: those it certifies every model with and
    its final step's (`CertifySpec.final_step`), so the final rows count."""
    step = plan.spec.certify.final_step
    return certify_settings(plan) + ([] if step is None else [step.setting_id])


def settings_with(plan: Plan) -> list[str]:
    """The settings sweep.json declares (`sweep_file.declared`: its space's and those recorded
    by earlier runs) and the plan's: a run grid with other certify settings keeps the rows of
    the earlier ones counted."""
    return sorted({*declared_settings(read_sweep(plan.exp)), *declared_ids(plan)})


def declare_settings(plan: Plan, holder: str) -> None:
    """Record the plan's certification settings in sweep.json (`sweeper certify`), holding
    the experiment (only to write: settings declared already take no lease): the readers count
    only rows under settings it declares."""
    from sweeper.results.lease import Lease

    if set(declared_ids(plan)) <= set(declared_settings(read_sweep(plan.exp))):
        return
    with Lease(plan.exp, holder):
        record_settings(plan.exp, declared_ids(plan))


def all_certified(plan: Plan, trials: list[TrialConfig]) -> bool:
    """Every one of `trials` certified under every setting of the plan (nothing to do). Never
    under the envelope strategy: whether a model is settled is its certifier's decision,
    recomputed from its pilot rows on each run (a stored verdict is not read back)."""
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.shards import all_compacted

    if plan.spec.certify.strategy == "envelope":
        return False
    settings = [(CERTIFY.name, s) for s in certify_settings(plan)]
    return all_compacted(plan.exp, [t.trial_id for t in trials], settings)


def finished_trials(plan: Plan, space: str | ParamSpace) -> list[TrialConfig]:
    """The selected trials that finished training; `PlanError` if the experiment or they are
    missing (`space`: the one to run first, as the message says)."""
    if not plan.exp.exists():
        raise PlanError(
            [
                f"no experiment at {plan.exp.root}: run {run_command(space)} first "
                "(or check --storage/--experiment)"
            ]
        )
    states = trial_states(plan.exp, plan.trials)
    ready = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    if not ready:
        raise PlanError(
            [
                f"none of the {len(plan.trials)} selected trials has finished training: "
                f"run {run_command(space)}"
            ]
        )
    return ready


def retire(plan: Plan, holder: str) -> str | None:
    """`--retrain`: move the selected trials' files aside, holding the experiment meanwhile;
    where they went (None: there was nothing to move)."""
    from sweeper.results.lease import Lease

    with Lease(plan.exp, holder):
        return retire_trials(plan.exp, plan.trials)


def train_and_certify(
    plan: Plan,
    resources: Resources,
    options: LaunchOptions,
    watchers: Watchers,
    states: dict | None = None,
) -> Outcome:
    """Hold the experiment, wait for room on the cluster, write sweep.json, train what is
    unfinished (every trial, or what the envelope search picks) and certify every trial
    trained (`states`: the trials' as read already)."""
    from sweeper.run.launch import run_sweep

    states = trial_states(plan.exp, plan.trials) if states is None else states
    finished = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    to_train = [t for t in plan.trials if not is_finished(states[t.trial_id], t)]
    wanted = min(len(to_train), options.max_concurrent or len(to_train)) or 1
    with driving(
        plan.exp, options.address, resources, wanted, options.wait_for_nodes, watchers
    ) as room:
        write_sweep(
            plan.exp,
            {
                "space": json.loads(plan.spec.to_json()),
                "trials": trials_doc(plan.all_trials),
                SETTINGS: settings_with(plan),
            },
        )
        search = None
        if plan.spec.search.active:
            from sweeper.run.search_tune import search_plan

            spec = plan.spec
            search = search_plan(spec.search, plan.trials, spec.certify, resources.gpu > 0)
        with watchers.progress(plan.exp) as on_event:
            return run_sweep(
                plan.exp,
                to_train,
                finished,
                plan.spec.certify,
                resources,
                options,
                on_event,
                room,
                search=search,
            )


def certify(
    plan: Plan,
    ready: list[TrialConfig],
    resources: Resources,
    options: LaunchOptions,
    watchers: Watchers,
) -> Outcome:
    """Certify the `ready` trials under the plan's settings as Ray tasks, every point of every
    model (`full`) or as the `envelope` strategy decides (`run.envelope_run`)."""
    from sweeper.run.capacity import per_process
    from sweeper.run.launch import certify_trials
    from sweeper.run.retries import task_budget

    room = per_process(resources, ready)
    with (
        driving(plan.exp, options.address, room, len(ready), options.wait_for_nodes, watchers),
        watchers.progress(plan.exp) as on_event,
    ):
        spec = plan.spec.certify
        return certify_trials(plan.exp, ready, spec, resources, on_event, task_budget(options))


def all_attacked(plan: Plan, ready: list[TrialConfig], chosen: list[EmpiricalSetting]) -> bool:
    """Every one of `ready` attacked under every setting of `chosen` (nothing to do)."""
    from sweeper.run.empirical_stage import EMPIRICAL
    from sweeper.run.shards import all_compacted

    ids = [t.trial_id for t in ready]
    return all_compacted(plan.exp, ids, [(EMPIRICAL.name, s.setting_id) for s in chosen])


def attack(
    plan: Plan,
    ready: list[TrialConfig],
    chosen: list[EmpiricalSetting],
    resources: Resources,
    options: LaunchOptions,
    watchers: Watchers,
) -> StageOutcome:
    """Attack the `ready` trials under every setting of `chosen` (SmoothAdv-PGD, then
    PREDICT) as Ray tasks (`resources`: a trial's)."""
    from sweeper.run.capacity import per_process
    from sweeper.run.empirical_stage import run_empirical
    from sweeper.run.retries import task_budget

    room = per_process(resources, ready)
    with (
        driving(plan.exp, options.address, room, len(ready), options.wait_for_nodes, watchers),
        watchers.progress(plan.exp) as on_event,
    ):
        return run_empirical(plan.exp, ready, chosen, resources, on_event, task_budget(options))
