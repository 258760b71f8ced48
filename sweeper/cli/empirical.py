"""`sweeper empirical`: SmoothAdv-PGD + PREDICT on every finished model, as Ray tasks."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from sweeper.cli.common import Address, DataDir, ExperimentOpt, Only, Storage, app, console, fail
from sweeper.cli.driver import DEFAULT_WAIT_MINUTES, WaitForNodes, finish
from sweeper.plan.sweep_plan import PlanError, PlanRequest, is_finished, make_plan, trial_states
from sweeper.results.storage import DEFAULT_STORAGE


def _numbers(flag: str, text: str | None, kind: type, problems: list[str]) -> tuple | None:
    """`0.25,0.5` -> (0.25, 0.5); a malformed list is a problem (None returned)."""
    if text is None:
        return None
    try:
        values = tuple(kind(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if not values:
        what = "integers" if kind is int else "numbers"
        problems.append(f"{flag} {text!r}: expected {what} separated by commas, e.g. 1,128")
        return None
    return values


def _overrides(flags: dict, epsilons: str | None, m_test: str | None) -> tuple[dict, list[str]]:
    """The empirical-block fields set on the command line, and the problems parsing them."""
    problems: list[str] = []
    lists = {
        "epsilons": _numbers("--epsilons", epsilons, float, problems),
        "m_test": _numbers("--m-test", m_test, int, problems),
    }
    overrides = {k: v for k, v in {**flags, **lists}.items() if v is not None}
    return overrides, problems


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
        fail([f"no experiment at {plan.exp.root}: run `sweeper run grid {request.space}` first "
              "(or check --storage/--experiment)"])  # fmt: skip
    return plan, spec


def _report(outcome, trials: int, settings: list) -> None:
    finish(outcome.interrupted, outcome.failures)
    console.print(
        f"done: {trials} models x {len(settings)} settings. "
        "Next: sweeper envelope --empirical --plot envelope.png"
    )


@app.command()
def empirical(
    space: Annotated[str, typer.Argument(help="The space the experiment was run with.")],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    address: Address = None,
    data_dir: DataDir = None,
    only: Only = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="The --smoke variant of the space.")] = False,
    cpu_only: Annotated[bool, typer.Option("--cpu-only", help="Ask for no GPU.")] = False,
    epsilons: Annotated[str | None, typer.Option("--epsilons", help="ℓ2 attack radii, e.g. 0,0.25,0.5 (0: clean).")] = None,
    m_test: Annotated[str | None, typer.Option("--m-test", help="Noise draws of the attack, e.g. 1,4,8,16,64,128.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Attack steps (the paper: 20).")] = None,
    n: Annotated[int | None, typer.Option("--n", help="PREDICT's Monte-Carlo samples.")] = None,
    alpha: Annotated[float | None, typer.Option("--alpha", help="PREDICT's level.")] = None,
    estimator: Annotated[str | None, typer.Option("--estimator", help="plugin (6) or stein (7, gradient-free).")] = None,
    skip: Annotated[int | None, typer.Option("--skip", help="Attack every SKIP-th test point.")] = None,
    max_points: Annotated[int | None, typer.Option("--max-points", help="At most this many test points.")] = None,
    shard_size: Annotated[int | None, typer.Option("--shard-size", help="Test points per task.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Noisy samples per forward pass.")] = None,
    wait_for_nodes: WaitForNodes = DEFAULT_WAIT_MINUTES,
) -> None:  # fmt: skip
    """Empirical robustness of the finished models: SmoothAdv-PGD at each ε and m_test, then
    PREDICT (Salman et al. section 4.2), as Ray tasks writing Parquet under empirical/.

    Settings come from the space's `empirical` block (defaults: ε 0,0.25,0.5,1,2, m_test 128,
    20 steps; n, α and the test points of `certify`), overridden by the options. Re-running
    skips the shards already written; new settings add files beside the old ones."""
    flags = {"steps": steps, "n": n, "alpha": alpha, "estimator": estimator, "skip": skip,
             "max_points": max_points, "shard_size": shard_size, "batch_size": batch_size}  # fmt: skip
    overrides, problems = _overrides(flags, epsilons, m_test)
    request = PlanRequest(space, storage, experiment, smoke, only, data_dir, False, None, address)
    plan, spec = _plan(request, overrides, problems)
    states = trial_states(plan.exp, plan.trials)
    ready = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    if not ready:
        fail([f"none of the {len(plan.trials)} selected trials has finished training: "
              f"run `sweeper run grid {space}`"])  # fmt: skip
    _run(plan, ready, spec, address, cpu_only, wait_for_nodes)


def _run(plan, ready: list, spec, address: str | None, cpu_only: bool, wait: float) -> None:
    from sweeper.cli.driver import driving
    from sweeper.cli.runs import Progress
    from sweeper.run.attack_stage import run_empirical, settings
    from sweeper.run.capacity import effective_resources, per_process

    chosen = settings(spec, plan.spec.certify)
    resources = effective_resources(plan.spec.resources, cpu_only)
    console.print(
        f"attacking {len(ready)} finished models ({len(plan.trials) - len(ready)} not finished) "
        f"under {len(chosen)} settings: " + ", ".join(s.emp_id for s in chosen)
    )
    with driving(plan.exp, address, per_process(resources, ready), len(ready), wait):
        progress = Progress(len(plan.trials), len(ready))
        with progress.bar:
            outcome = run_empirical(plan.exp, ready, chosen, resources, progress)
    _report(outcome, len(ready), chosen)
