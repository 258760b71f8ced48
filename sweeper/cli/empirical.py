"""`sweeper empirical`: SmoothAdv-PGD + PREDICT on every finished model, as Ray tasks."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from sweeper.cli.common import DataDir, ExperimentOpt, Only, Storage, app, console, fail
from sweeper.cli.driver import DRIVER, finish, launch_options
from sweeper.cli.options import SpaceSmoke, given, settings_options, with_options
from sweeper.plan.spec import EmpiricalSpec
from sweeper.plan.sweep_plan import PlanError, PlanRequest, is_finished, make_plan, trial_states
from sweeper.results.storage import DEFAULT_STORAGE
from sweeper.run.launch_options import LaunchOptions


def _plan(request: PlanRequest, overrides: dict, problems: list[str]):
    """The plan with the overrides applied to its `empirical` block; exits 2 listing every
    problem (the space's, the options', the experiment's)."""
    try:
        plan = make_plan(request)
    except PlanError as e:
        fail(problems + e.problems)
    spec = dataclasses.replace(plan.spec.empirical, **overrides)
    problems += [f"empirical option: {p}" for p in spec.problems()]
    if problems:
        fail(problems)
    if not plan.exp.exists():
        fail(
            [
                f"no experiment at {plan.exp.root}: run `sweeper run grid {request.space}` first "
                "(or check --storage/--experiment)"
            ]
        )
    return plan, spec


def _report(outcome, trials: int, settings: list) -> None:
    finish(outcome.interrupted, outcome.failures)
    console.print(
        f"done: {trials} models x {len(settings)} settings. "
        "Next: sweeper envelope --empirical --plot envelope.png"
    )


@app.command()
@with_options(
    settings_options(EmpiricalSpec), settings_options(LaunchOptions, only=DRIVER, override=False)
)
def empirical(
    space: Annotated[str, typer.Argument(help="The space the experiment was run with.")],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    data_dir: DataDir = None,
    only: Only = None,
    smoke: SpaceSmoke = False,
    **options: Any,
) -> None:
    """Empirical robustness of the finished models: SmoothAdv-PGD at each ε and m_test, then
    PREDICT (Salman et al. section 4.2), as Ray tasks writing Parquet under empirical/.

    Settings come from the space's `empirical` block (defaults: ε 0,0.25,0.5,1,2, m_test 128,
    20 steps; n, α and the test points of `certify`), overridden by the options. Re-running
    skips the shards already written; new settings add files beside the old ones."""
    launch = launch_options(options)
    overrides, problems = given(EmpiricalSpec, options)
    request = PlanRequest(
        space=space,
        storage=storage,
        experiment=experiment,
        smoke=smoke,
        only=only,
        data_dir=data_dir,
        address=launch.address,
        max_trials=launch.max_trials,
    )
    plan, spec = _plan(request, overrides, problems)
    states = trial_states(plan.exp, plan.trials)
    ready = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    if not ready:
        fail(
            [
                f"none of the {len(plan.trials)} selected trials has finished training: "
                f"run `sweeper run grid {space}`"
            ]
        )
    _run(plan, ready, spec, launch.address, launch.cpu_only, launch.wait_for_nodes)


def _run(plan, ready: list, spec, address: str | None, cpu_only: bool, wait: float) -> None:
    from sweeper.cli.driver import driving
    from sweeper.cli.status import RunDisplay
    from sweeper.run.attack_stage import EMPIRICAL, run_empirical, settings
    from sweeper.run.capacity import effective_resources, per_process
    from sweeper.run.shards import all_compacted

    chosen = settings(spec, plan.spec.certify)
    resources = effective_resources(plan.spec.resources, cpu_only)
    console.print(
        f"attacking {len(ready)} finished models ({len(plan.trials) - len(ready)} not finished) "
        f"under {len(chosen)} settings: " + ", ".join(s.emp_id for s in chosen)
    )
    ids = [t.trial_id for t in ready]
    if all_compacted(plan.exp, ids, [(EMPIRICAL.name, s.setting_id) for s in chosen]):
        console.print("nothing to do: every model is attacked under every setting")
        return
    room = per_process(resources, ready)
    with driving(plan.exp, address, room, len(ready), wait), RunDisplay(plan.exp) as display:
        outcome = run_empirical(plan.exp, ready, chosen, resources, display)
    _report(outcome, len(ready), chosen)
