"""Commands that run work on Ray: `spaces`, `run grid`, `certify`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from sweeper.cli.common import (
    Address,
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
from sweeper.cli.driver import DEFAULT_WAIT_MINUTES, WaitForNodes, command_line, driving, finish
from sweeper.plan.grid import expand
from sweeper.plan.run_settings import field_help, precision_problem
from sweeper.plan.spaces import available_spaces, load_space
from sweeper.plan.spec import CertifySpec
from sweeper.plan.sweep_plan import (
    Plan,
    PlanError,
    PlanRequest,
    is_finished,
    make_plan,
    move_aside,
    trial_states,
)
from sweeper.results.storage import DEFAULT_STORAGE, Experiment, write_sweep
from sweeper.run.capacity import effective_resources
from trainables.config import DDRSSettings, ProblemsError


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
        f"{len(plan.trials)} of {len(plan.all_trials)} in the sweep: {done} finished, {started} to resume, {len(plan.trials) - done - started} new",
    )
    table.add_row("per trial", f"cpu={resources.cpu:g} gpu={resources.gpu:g}")
    table.add_row(
        "certify",
        f"n0={c.n0} n={c.n} alpha={c.alpha:g} every {c.skip}-th test point (max {c.max_points}), {c.shard_size} per shard",
    )
    table.add_row("storage", plan.exp.root)
    console.print(table)


# ------------------------------------------------------------------------------ progress
class Progress:
    """The live display: trials done/running/failed and shards done/total."""

    def __init__(self, trials_total: int, trials_done: int):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), console=console)  # fmt: skip
        self.trials = self.bar.add_task(
            "trials", total=trials_total, completed=trials_done, extra=""
        )
        self.shards = self.bar.add_task("shards", total=0, extra="")
        self.running: set[str] = set()
        self.failed: set[str] = set()

    def __call__(self, event) -> None:
        if event.kind == "trial_started":
            self.running.add(event.trial_id)
        elif event.kind in ("trial_finished", "trial_failed"):
            self.running.discard(event.trial_id)
            if event.kind == "trial_failed":
                self.failed.add(event.trial_id)
            else:
                self.bar.advance(self.trials)
        if event.shards is not None:
            done, total, failed = event.shards
            self.bar.update(
                self.shards, total=total, completed=done, extra=f"failed {failed}" if failed else ""
            )
        self.bar.update(
            self.trials, extra=f"running {len(self.running)}, failed {len(self.failed)}"
        )


def _report_outcome(outcome) -> None:
    blocked = getattr(outcome, "blocked", {})
    failures = (
        [(tid, "train", msg) for tid, msg in outcome.failed.items()]
        + list(outcome.certify_failures)
        + [(tid, "blocked", f"not started: its parent {p} did not finish") for tid, p in blocked.items()]
    )
    finish(outcome.interrupted, failures)


# ------------------------------------------------------------------------------ commands
@app.command()
def spaces() -> None:
    """List the search spaces shipped with sweeper."""
    table = Table("space", "trials", "per trial", "description")
    for name in available_spaces():
        spec = load_space(name)
        table.add_row(
            name,
            str(len(expand(spec))),
            f"cpu={spec.resources.cpu:g} gpu={spec.resources.gpu:g}",
            spec.description,
        )
    console.print(table)


@run_app.command("grid")
def run_grid(
    space: Annotated[
        str, typer.Argument(help="A shipped space (see `sweeper spaces`) or a YAML file.")
    ],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    address: Address = None,
    data_dir: DataDir = None,
    download: Annotated[
        bool, typer.Option("--download", help="Download the data set if missing (needs internet).")
    ] = False,
    max_concurrent: Annotated[
        int | None,
        typer.Option("--max-concurrent", min=1, help="At most this many trials at once."),
    ] = None,
    max_failures: Annotated[
        int,
        typer.Option(
            "--max-failures", min=0, help="Retries per trial (each resumes from its checkpoint)."
        ),
    ] = 2,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
    only: Only = None,
    smoke: Annotated[
        bool,
        typer.Option(
            "--smoke", help="Tiny epochs and n for a quick look (experiment <space>-smoke)."
        ),
    ] = False,
    restart_: Annotated[
        bool,
        typer.Option(
            "--restart", help="Start over; the old experiment is moved aside, not deleted."
        ),
    ] = False,
    cpu_only: Annotated[
        bool, typer.Option("--cpu-only", help="Ask for no GPU (train and certify on CPUs).")
    ] = False,
    wait_for_nodes: WaitForNodes = DEFAULT_WAIT_MINUTES,
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", min=1, help="With --dry-run: the wall-clock on this many GPUs."),
    ] = None,
) -> None:
    """Train every trial of SPACE on Ray Tune and certify each one as it finishes.

    Re-running the same command resumes: finished trials are not retrained, interrupted ones
    continue from their last checkpoint, and only missing certification shards are computed.
    With --dry-run: the plan and its cost, without reading data or starting Ray.
    """
    request = PlanRequest(
        space, storage, experiment, smoke, only, data_dir, download, None, address, restart_,
        dry_run,
    )  # fmt: skip
    if gpus is not None and not dry_run:
        fail(["--gpus sizes the wall-clock estimate of --dry-run: add --dry-run, or drop --gpus"])
    plan = _plan(request)
    if dry_run:  # imports neither torch nor Ray (Ray only to size the cluster of --address)
        resources = effective_resources(plan.spec.resources, cpu_only)
        states = trial_states(plan.exp, plan.trials)
        print_plan(plan, resources, states, "sweeper run grid (dry run)")
        dry_run_report(plan, cpu_only, address, gpus)
        return
    resources = effective_resources(plan.spec.resources, cpu_only)
    if (problem := precision_problem(plan.spec.certify, resources)) is not None:
        fail([problem])
    if restart_:
        _move_aside(plan.exp)
    states = trial_states(plan.exp, plan.trials)
    print_plan(plan, resources, states, "sweeper run grid")
    from sweeper.run.launch import LaunchOptions

    options = LaunchOptions(address, max_concurrent, max_failures, cpu_only, wait_for_nodes)
    outcome = _launch(plan, states, resources, options)
    _report_outcome(outcome)
    console.print(
        f"done: {len(plan.trials)} trials. Next: sweeper envelope --storage {storage} --experiment {plan.exp.name} --radii 0:2:0.25"
    )


def _launch(plan: Plan, states: dict, resources, options) -> object:
    """Hold the experiment, wait for room on the cluster, train what is unfinished and certify."""
    from sweeper.run.launch import run_sweep

    finished = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    to_train = [t for t in plan.trials if not is_finished(states[t.trial_id], t)]
    wanted = min(len(to_train), options.max_concurrent or len(to_train)) or 1
    with driving(plan.exp, options.address, resources, wanted, options.wait_for_nodes) as room:
        write_sweep(
            plan.exp,
            {"space": json.loads(plan.spec.to_json()), "trials": [t.to_dict() for t in plan.all_trials]},
        )
        return _with_progress(
            plan, len(finished),
            lambda on_event: run_sweep(plan.exp, to_train, finished, plan.spec.certify, resources, options, on_event, room),
        )  # fmt: skip


def _with_progress(plan: Plan, finished_count: int, launch) -> object:
    """Run `launch(on_event)` under the live progress display."""
    progress = Progress(len(plan.trials), finished_count)
    with progress.bar:
        return launch(progress)


@app.command()
def certify(
    space: Annotated[str, typer.Argument(help="The space the experiment was run with.")],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    address: Address = None,
    data_dir: DataDir = None,
    only: Only = None,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="The --smoke variant of the space.")
    ] = False,
    n: Annotated[int | None, typer.Option("--n", help="Monte-Carlo samples for the bound.")] = None,
    n0: Annotated[int | None, typer.Option("--n0", help="Samples to select the class.")] = None,
    alpha: Annotated[float | None, typer.Option("--alpha", help="Failure probability.")] = None,
    sigma_cert: Annotated[
        float | None,
        typer.Option("--sigma-cert", help="Smoothing σ for certification (default: training σ)."),
    ] = None,
    skip: Annotated[
        int | None, typer.Option("--skip", help="Certify every SKIP-th test point.")
    ] = None,
    max_points: Annotated[
        int | None, typer.Option("--max-points", help="At most this many test points.")
    ] = None,
    shard_size: Annotated[
        int | None, typer.Option("--shard-size", help="Test points per task.")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="Noisy samples per forward pass.")
    ] = None,
    cpu_only: Annotated[bool, typer.Option("--cpu-only", help="Ask for no GPU.")] = False,
    ddrs: Annotated[
        bool,
        typer.Option(
            "--ddrs",
            help="Also certify with data-dependent σ per point (DDRS), then the memory pass.",
        ),
    ] = False,
    ddrs_iterations: Annotated[
        int | None, typer.Option("--ddrs-iterations", help="OptimizeSigma ascent steps K (100).")
    ] = None,
    ddrs_lr: Annotated[
        float | None, typer.Option("--ddrs-lr", help="OptimizeSigma step size (1e-4).")
    ] = None,
    ddrs_samples: Annotated[
        int | None, typer.Option("--ddrs-samples", help="Noise draws per OptimizeSigma step (1).")
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option("--precision", help=field_help(CertifySpec, "precision") + " [fp32]"),
    ] = None,
    channels_last: Annotated[
        bool | None,
        typer.Option(
            "--channels-last/--no-channels-last", help=field_help(CertifySpec, "channels_last")
        ),
    ] = None,
    compile: Annotated[
        bool | None,
        typer.Option("--compile/--no-compile", help=field_help(CertifySpec, "compile")),
    ] = None,
    wait_for_nodes: WaitForNodes = DEFAULT_WAIT_MINUTES,
) -> None:
    """(Re)run certification of the finished trials, optionally with other settings.

    New settings write new files beside the old ones; existing shards are skipped. With
    --ddrs every model is certified with its own σ_x per test point as well (Alfarra et al.),
    made sound by a memory pass over each model's results."""
    flags = {
        "n": n,
        "n0": n0,
        "alpha": alpha,
        "sigma": sigma_cert,
        "skip": skip,
        "max_points": max_points,
        "shard_size": shard_size,
        "batch_size": batch_size,
        "precision": precision,
        "channels_last": channels_last,
        "compile": compile,
    }
    overrides = {k: v for k, v in flags.items() if v is not None}
    ddrs_flags = {"iterations": ddrs_iterations, "lr": ddrs_lr, "samples": ddrs_samples}
    ddrs_flags = {k: v for k, v in ddrs_flags.items() if v is not None}
    if ddrs or ddrs_flags:
        overrides["ddrs"] = DDRSSettings(**ddrs_flags)
    plan = _plan(
        PlanRequest(space, storage, experiment, smoke, only, data_dir, False, overrides, address)
    )
    from sweeper.run.capacity import per_process
    from sweeper.run.launch import certify_trials

    if not plan.exp.exists():
        fail(
            [
                f"no experiment at {plan.exp.root}: run `sweeper run grid {space}` first (or check --storage/--experiment)"
            ]
        )
    states = trial_states(plan.exp, plan.trials)
    ready = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    if not ready:
        fail(
            [
                f"none of the {len(plan.trials)} selected trials has finished training: run `sweeper run grid {space}`"
            ]
        )
    resources = effective_resources(plan.spec.resources, cpu_only)
    if (problem := precision_problem(plan.spec.certify, resources)) is not None:
        fail([problem])
    console.print(
        f"certifying {len(ready)} finished trials ({len(plan.trials) - len(ready)} not finished) with {plan.spec.certify.cert_id}"
    )
    with driving(plan.exp, address, per_process(resources, ready), len(ready), wait_for_nodes):
        outcome = _with_progress(
            plan, len(ready),
            lambda on_event: certify_trials(plan.exp, ready, plan.spec.certify, resources, on_event),
        )  # fmt: skip
    _report_outcome(outcome)
