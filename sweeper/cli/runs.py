"""Commands that run work on Ray: `spaces`, `run grid`, `certify`."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from sweeper.api.running import Ran
from sweeper.api.surface import (
    DEFAULT_STORAGE,
    CertifySpec,
    Experiment,
    LaunchOptions,
    Plan,
    Resources,
    SearchSpec,
    is_finished,
)
from sweeper.api.sweep import Sweep
from sweeper.cli.common import (
    DataDir,
    ExperimentOpt,
    Only,
    Storage,
    app,
    console,
    fail,
    run_app,
    sweeper_command,
)
from sweeper.cli.costs import certify_dry_run_report, dry_run_report
from sweeper.cli.display import echo
from sweeper.cli.driver import TASKS, finish, launch_options, watchers
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
from trainables.kernel import fileio

if TYPE_CHECKING:
    from sweeper.run.launch import Outcome  # what `Ran.outcome` holds


def _shown(location: str) -> str:
    """A local path below the working directory as a relative one, the way it was typed."""
    if fileio.is_uri(location) or not os.path.isabs(location):
        return location
    relative = os.path.relpath(location)
    return location if relative.startswith("..") else relative


def print_plan(plan: Plan, resources: Resources, states: dict, title: str) -> None:
    done = sum(is_finished(states[t.trial_id], t) for t in plan.trials)
    started = sum(
        1 for t in plan.trials if states[t.trial_id] and not is_finished(states[t.trial_id], t)
    )
    c = plan.spec.certify
    table = Table(title=title, show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # a long path or id folds, never cut
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
        f"(max {'all' if c.max_points is None else c.max_points}), {c.shard_size} per shard",
    )
    table.add_row("storage", _shown(plan.exp.root))
    console.print(table)


def _report_outcome(outcome: Outcome, exp: Experiment, space: str) -> None:
    failures = (
        [(tid, "train", msg) for tid, msg in outcome.failed.items()]
        + list(outcome.certify_failures)
        + [
            (tid, "blocked", f"not started: its parent {p} did not finish")
            for tid, p in outcome.blocked.items()
        ]
    )
    finish(outcome.interrupted, failures, failure_notes(exp, space, failures))


def failure_notes(exp: Experiment, space: str, failures: list[tuple[str, str, str]]) -> list[str]:
    """Where the failures' full texts are; how to retrain a trial whose checkpoint is broken."""
    from sweeper.api.running import failures_log

    notes = []
    if failures and (log := failures_log(exp)) is not None:
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
    """List the search spaces shipped with sweeper: each one's trials and resources per trial
    on a line, its description whole under it, wrapped at the terminal's width."""
    from sweeper.api.space_arg import shipped_spaces

    for line in space_lines(shipped_spaces(), console.width):
        echo(line)


def space_lines(summaries: list, width: int) -> list[str]:
    """`name  trials  cpu=.. gpu=..` aligned, then the description indented under it."""
    rows = [(s.name, str(s.trials), f"cpu={s.cpu:g} gpu={s.gpu:g}") for s in summaries]
    name, count = (max(len(r[i]) for r in [("space", "trials"), *rows]) for i in (0, 1))
    out = [f"{'space':<{name}}  {'trials':>{count}}  per trial"]
    for (space, trials, per), s in zip(rows, summaries, strict=True):
        out += ["", f"{space:<{name}}  {trials:>{count}}  {per}"]
        out += textwrap.wrap(
            s.description,
            max(width, 40),
            initial_indent="    ",
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return out


STRATEGY = ("strategy", "delta", "pilots", "radii")  # the certify settings `run grid` takes


@run_app.command("grid")
@with_options(
    settings_options(LaunchOptions, override=False),
    settings_options(CertifySpec, only=STRATEGY),
    settings_options(SearchSpec),
)
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
    With --search envelope: only what could still raise the envelope is trained.
    With --dry-run: the plan and its cost, without reading data or starting Ray.
    """
    launch, overrides = launch_options(options), certify_overrides(options)
    search = search_overrides(options)
    sweep = Sweep(
        space,
        storage=storage,
        experiment=experiment,
        only=only,
        smoke=smoke,
        data_dir=data_dir,
        download=download,
    )
    _check_flags(launch, retrain, only, restart_, gpus is not None and not dry_run)
    if dry_run:  # imports neither torch nor Ray (Ray only to size the cluster of --address)
        priced = sweep.plan(launch, restarting=restart_, overrides=overrides, search=search)
        return _dry_run(priced, launch, gpus, data_dir)
    shown = watchers(lambda plan, res, states: print_plan(plan, res, states, "sweeper run grid"))
    ran = sweep.run(
        options=launch,
        retrain=retrain,
        restart=restart_,
        overrides=overrides,
        search=search,
        watchers=shown,
    )
    if ran.outcome is not None:
        _report_outcome(ran.outcome, ran.plan.exp, space)
    _done(ran, storage)


def _dry_run(priced, launch: LaunchOptions, gpus: int | None, data_dir: str | None) -> None:
    print_plan(priced.plan, priced.resources, priced.states, "sweeper run grid (dry run)")
    dry_run_report(priced, launch.address, gpus, data_dir)


def _done(ran: Ran, storage: str) -> None:
    """What the run left, and the command that reads it."""
    searched = ran.searched
    done = f"done: {len(ran.trials)} trials"
    if searched is not None:
        done = (
            f"done: the envelope search trained {searched.trained} of {len(ran.trials)} trials "
            f"({searched.skipped} skipped, {searched.audited} by its audit)"
        )
    console.print(
        f"{done}. Next: {sweeper_command()} envelope --storage {storage} --experiment "
        f"{ran.plan.exp.name} --radii 0:2:0.25",
        soft_wrap=True,  # a command to copy: one line, whatever the width
    )


def certify_overrides(options: dict[str, Any]) -> dict[str, Any]:
    """The `CertifySpec` fields given on the command line (bad values: exit 2, all at once)."""
    overrides, problems = given(CertifySpec, options)
    if problems:
        fail(problems)
    return overrides


def search_overrides(options: dict[str, Any]) -> dict[str, Any] | None:
    """The `SearchSpec` fields given on the command line (None: the space's search)."""
    found, problems = given(SearchSpec, options)
    if problems:
        fail(problems)
    return found or None


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


@app.command()
@with_options(
    settings_options(CertifySpec), settings_options(LaunchOptions, only=TASKS, override=False)
)
def certify(
    space: Annotated[str, typer.Argument(help="The space the experiment was run with.")],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    data_dir: DataDir = None,
    only: Only = None,
    smoke: SpaceSmoke = False,
    dry_run: DryRun = False,
    **options: Any,
) -> None:
    """(Re)run certification of the finished trials, optionally with other settings.

    New settings write new files beside the old ones; existing shards are skipped. With
    --ddrs every model is certified with its own σ_x per test point as well (Alfarra et al.),
    made sound by a memory pass over each model's results. With --dry-run: how far each
    model is certified with these settings and what the rest costs, without starting Ray."""
    launch, overrides = launch_options(options), certify_overrides(options)
    sweep = Sweep(
        space, storage=storage, experiment=experiment, only=only, smoke=smoke, data_dir=data_dir
    )
    if dry_run:  # imports neither torch nor Ray
        certify_dry_run_report(sweep.certify_plan(launch, overrides=overrides), data_dir)
        return
    ran = sweep.certify(options=launch, overrides=overrides, watchers=watchers())
    if ran.outcome is not None:
        _report_outcome(ran.outcome, ran.plan.exp, space)
