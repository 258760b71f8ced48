"""Commands that run work on Ray: `spaces`, `run grid`, `certify`."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from sweeper.cli.common import (
    DataDir,
    ExperimentOpt,
    Only,
    Storage,
    app,
    console,
    fail,
    run_app,
)
from sweeper.cli.costs import dry_run_report
from sweeper.cli.driver import DRIVER, command_line, driving, finish, launch_options
from sweeper.cli.options import (
    Download,
    DryRun,
    Gpus,
    Restart,
    Retrain,
    SpaceSmoke,
    given,
    settings_options,
    with_options,
)
from sweeper.plan.run_settings import precision_problem
from sweeper.plan.spec import CertifySpec
from sweeper.plan.sweep_plan import (
    Plan,
    PlanError,
    PlanRequest,
    is_finished,
    make_plan,
    move_aside,
    retire_trials,
    trial_states,
)
from sweeper.results.storage import DEFAULT_STORAGE, Experiment, write_sweep
from sweeper.run.capacity import effective_resources
from sweeper.run.launch_options import LaunchOptions
from trainables.errors import ProblemsError


def _plan(request: PlanRequest) -> Plan:
    try:
        return make_plan(request)
    except PlanError as e:
        fail(e.problems)


def _move_aside(exp: Experiment) -> None:
    """--restart: move the experiment aside, unless another driver is using it."""
    from sweeper.results.lease import Lease

    try:
        with Lease(exp, command_line()):
            pass
        moved = move_aside(exp)
    except ProblemsError as e:
        fail(e.problems)
    if moved is not None:
        console.print(f"previous experiment moved to {moved}")


def print_plan(plan: Plan, resources, states: dict, title: str) -> None:
    done = sum(is_finished(states[t.trial_id], t) for t in plan.trials)
    started = sum(
        1 for t in plan.trials if states[t.trial_id] and not is_finished(states[t.trial_id], t)
    )
    c = plan.spec.certify
    table = Table(title=title, show_header=False, box=None)
    table.add_row("space", f"{plan.spec.name}: {plan.spec.description}")
    table.add_row(
        "trials",
        f"{len(plan.trials)} of {len(plan.all_trials)} in the sweep: {done} finished, "
        f"{started} to resume, {len(plan.trials) - done - started} new",
    )
    table.add_row("per trial", f"cpu={resources.cpu:g} gpu={resources.gpu:g}")
    table.add_row(
        "certify",
        f"n0={c.n0} n={c.n} alpha={c.alpha:g} every {c.skip}-th test point "
        f"(max {c.max_points}), {c.shard_size} per shard",
    )
    table.add_row("storage", plan.exp.root)
    console.print(table)


def _report_outcome(outcome, exp: Experiment, space: str) -> None:
    blocked = getattr(outcome, "blocked", {})
    failures = (
        [(tid, "train", msg) for tid, msg in outcome.failed.items()]
        + list(outcome.certify_failures)
        + [
            (tid, "blocked", f"not started: its parent {p} did not finish")
            for tid, p in blocked.items()
        ]
    )
    finish(outcome.interrupted, failures, failure_notes(exp, space, failures))


def failure_notes(exp: Experiment, space: str, failures: list[tuple[str, str, str]]) -> list[str]:
    """Where the failures' full texts are; how to retrain a trial whose checkpoint is broken."""
    from sweeper.results.failures import read_failures

    notes = []
    if failures and (log := read_failures(exp)[1]) is not None:
        notes.append(f"full error texts: {log}")
    broken = [
        tid for tid, stage, line in failures if stage == "certify" and "checkpoint" in line.lower()
    ]
    if broken:
        notes.append(
            "a trial whose checkpoint cannot be read is trained again alone (the old "
            f"checkpoint moved aside): sweeper run grid {space} --only trial_id={broken[0]} "
            "--retrain"
        )
    return notes


# ------------------------------------------------------------------------------ commands
@app.command()
def spaces() -> None:
    """List the search spaces shipped with sweeper."""
    from sweeper.plan.space_list import shipped_summaries

    table = Table("space", "trials", "per trial", "description")
    for s in shipped_summaries():
        table.add_row(s.name, str(s.trials), f"cpu={s.cpu:g} gpu={s.gpu:g}", s.description)
    console.print(table)


@run_app.command("grid")
@with_options(settings_options(LaunchOptions, override=False))
def run_grid(
    space: Annotated[
        str, typer.Argument(help="A shipped space (see `sweeper spaces`) or a YAML file.")
    ],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    data_dir: DataDir = None,
    download: Download = False,
    dry_run: DryRun = False,
    only: Only = None,
    smoke: SpaceSmoke = False,
    restart_: Restart = False,
    gpus: Gpus = None,
    retrain: Retrain = False,
    **options: Any,
) -> None:
    """Train every trial of SPACE on Ray Tune and certify each one as it finishes.

    Re-running the same command resumes: finished trials are not retrained, interrupted ones
    continue from their last checkpoint, and only missing certification shards are computed.
    With --dry-run: the plan and its cost, without reading data or starting Ray.
    """
    launch = launch_options(options)
    request = PlanRequest(
        space=space,
        storage=storage,
        experiment=experiment,
        smoke=smoke,
        only=only,
        data_dir=data_dir,
        download=download,
        address=launch.address,
        restarting=restart_,
        dry_run=dry_run,
        max_trials=launch.max_trials,
    )
    _check_flags(launch, retrain, only, restart_, gpus is not None and not dry_run)
    plan = _plan(request)
    resources = effective_resources(plan.spec.resources, launch.cpu_only)
    if dry_run:  # imports neither torch nor Ray (Ray only to size the cluster of --address)
        states = trial_states(plan.exp, plan.trials)
        print_plan(plan, resources, states, "sweeper run grid (dry run)")
        dry_run_report(plan, launch.cpu_only, launch.address, gpus)
        return
    _train_and_certify(request, plan, resources, launch, retrain)


def _train_and_certify(
    request: PlanRequest, plan: Plan, resources, launch: LaunchOptions, retrain: bool
) -> None:
    """`run grid` past its dry run: the trials not yet trained and certified, on Ray."""
    _check_precision(plan, resources)
    if request.restarting:
        _move_aside(plan.exp)
    states = trial_states(plan.exp, plan.trials)
    print_plan(plan, resources, states, "sweeper run grid")
    trained = all(is_finished(states[t.trial_id], t) for t in plan.trials)
    if retrain or not (trained and _all_certified(plan, plan.trials)):
        outcome = _launch(plan, states, resources, launch, retrain)
        _report_outcome(outcome, plan.exp, request.space)
    console.print(
        f"done: {len(plan.trials)} trials. Next: sweeper envelope --storage "
        f"{request.storage} --experiment {plan.exp.name} --radii 0:2:0.25"
    )


def _all_certified(plan: Plan, trials: list) -> bool:
    """Every trial certified under every setting of the plan (nothing to do: no Ray); says so."""
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.shards import all_compacted

    settings = [(CERTIFY.name, spec.setting_id) for spec in plan.spec.certify.variants()]
    done = all_compacted(plan.exp, [t.trial_id for t in trials], settings)
    if done:
        console.print(
            f"nothing to do: all {len(trials)} trials are trained and certified with "
            f"{', '.join(s for _, s in settings)}"
        )
    return done


def _check_precision(plan: Plan, resources) -> None:
    if (problem := precision_problem(plan.spec.certify, resources)) is not None:
        fail([problem])


def _check_flags(
    launch: LaunchOptions,
    retrain: bool,
    only: str | None,
    restart: bool,
    gpus_without_dry_run: bool,
) -> None:
    """--gpus needs --dry-run, --retrain needs --only; --mlflow and --wandb their packages."""
    import importlib.util

    if gpus_without_dry_run:
        fail(["--gpus sizes the wall-clock estimate of --dry-run: add --dry-run, or drop --gpus"])
    problems = []
    if retrain and not only:
        problems.append(
            "--retrain trains again the trials --only selects: add --only "
            "trial_id=<id> (sweeper status names the failed ones)"
        )
    if retrain and restart:
        problems.append("--retrain and --restart: pass one (--restart starts the whole sweep over)")
    for flag, package in (("mlflow", "mlflow"), ("wandb", "wandb")):
        if getattr(launch, flag) and importlib.util.find_spec(package) is None:
            problems.append(f"--{flag} needs the {package} package: pip install {package}")
    if problems:
        fail(problems)


def _launch(plan: Plan, states: dict, resources, options, retrain: bool = False) -> object:
    """Hold the experiment, wait for room on the cluster, train what is unfinished and certify
    (with `retrain`, the selected trials' old checkpoints and results moved aside first)."""
    from sweeper.run.launch import run_sweep

    if retrain:
        moved = _retire(plan)
        states = trial_states(plan.exp, plan.trials)
        console.print(f"retraining {len(plan.trials)} trials; their old files are in {moved}")
    finished = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    to_train = [t for t in plan.trials if not is_finished(states[t.trial_id], t)]
    wanted = min(len(to_train), options.max_concurrent or len(to_train)) or 1
    with driving(plan.exp, options.address, resources, wanted, options.wait_for_nodes) as room:
        write_sweep(
            plan.exp,
            {
                "space": json.loads(plan.spec.to_json()),
                "trials": [t.to_dict() for t in plan.all_trials],
            },
        )
        return _with_progress(
            plan,
            len(finished),
            lambda on_event: run_sweep(
                plan.exp, to_train, finished, plan.spec.certify, resources, options, on_event, room
            ),
        )


def _retire(plan: Plan) -> str | None:
    """--retrain: move the selected trials' files aside, holding the experiment meanwhile."""
    from sweeper.results.lease import Lease

    try:
        with Lease(plan.exp, command_line()):
            return retire_trials(plan.exp, plan.trials)
    except ProblemsError as e:
        fail(e.problems)


def _with_progress(plan: Plan, finished_count: int, launch) -> object:
    """Run `launch(on_event)` under the progress display (`sweeper status`'s view, live)."""
    from sweeper.cli.status import RunDisplay

    with RunDisplay(plan.exp) as display:
        return launch(display)


@app.command()
@with_options(
    settings_options(CertifySpec), settings_options(LaunchOptions, only=DRIVER, override=False)
)
def certify(
    space: Annotated[str, typer.Argument(help="The space the experiment was run with.")],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    data_dir: DataDir = None,
    only: Only = None,
    smoke: SpaceSmoke = False,
    **options: Any,
) -> None:
    """(Re)run certification of the finished trials, optionally with other settings.

    New settings write new files beside the old ones; existing shards are skipped. With
    --ddrs every model is certified with its own σ_x per test point as well (Alfarra et al.),
    made sound by a memory pass over each model's results."""
    launch = launch_options(options)
    overrides, problems = given(CertifySpec, options)
    if problems:
        fail(problems)
    plan = _plan(
        PlanRequest(
            space=space,
            storage=storage,
            experiment=experiment,
            smoke=smoke,
            only=only,
            data_dir=data_dir,
            certify_overrides=overrides,
            address=launch.address,
            max_trials=launch.max_trials,
        )
    )
    ready = finished_trials(plan, space)
    resources = effective_resources(plan.spec.resources, launch.cpu_only)
    _check_precision(plan, resources)
    waiting = len(plan.trials) - len(ready)
    console.print(
        f"certifying {len(ready)} finished trials ({waiting} not finished) with "
        f"{plan.spec.certify.cert_id}"
    )
    if not _all_certified(plan, ready):
        _report_outcome(_certify_on_ray(plan, ready, resources, launch), plan.exp, space)


def _certify_on_ray(plan: Plan, ready: list, resources, launch: LaunchOptions):
    """Certify the `ready` trials under the plan's setting as Ray tasks; their Outcome."""
    from sweeper.run.capacity import per_process
    from sweeper.run.launch import certify_trials

    room = per_process(resources, ready)
    with driving(plan.exp, launch.address, room, len(ready), launch.wait_for_nodes):
        return _with_progress(
            plan,
            len(ready),
            lambda on_event: certify_trials(
                plan.exp, ready, plan.spec.certify, resources, on_event
            ),
        )


def finished_trials(plan: Plan, space: str) -> list:
    """The selected trials that finished training; exit 2 if the experiment or they are missing."""
    if not plan.exp.exists():
        fail(
            [
                f"no experiment at {plan.exp.root}: run `sweeper run grid {space}` first "
                "(or check --storage/--experiment)"
            ]
        )
    states = trial_states(plan.exp, plan.trials)
    ready = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    if not ready:
        fail(
            [
                f"none of the {len(plan.trials)} selected trials has finished training: "
                f"run `sweeper run grid {space}`"
            ]
        )
    return ready
