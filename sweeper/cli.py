"""The `sweeper` command line: run a grid, certify, read the envelope, see the status.

Exit codes: 0 done; 1 some trial or certification task failed (a table says which, and how
to resume); 2 bad input (one line per problem, nothing started, nothing deleted); 130
interrupted (re-run the same command to resume).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from sweeper import envelope as env
from sweeper.grid import expand, parse_only
from sweeper.plan import (
    Plan,
    PlanError,
    PlanRequest,
    is_finished,
    make_plan,
    move_aside,
    trial_states,
)
from sweeper.report import FORMATS, cell, plot_envelope, render
from sweeper.results import ResultsError, load_results
from sweeper.spec import available_spaces, load_space
from sweeper.storage import DEFAULT_STORAGE, Experiment, read_sweep, write_sweep
from trainables import fileio
from trainables.config import TrialConfig

app = typer.Typer(
    help="Sweeps of randomized-smoothing classifiers on Ray: train a grid, CERTIFY every model, read the envelope.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
run_app = typer.Typer(
    help="Train a sweep and certify every model as it finishes.", no_args_is_help=True
)
app.add_typer(run_app, name="run")
# Piped output keeps whole rows instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)
DISPLAY = {
    "radius": "radius", "certified_accuracy": "cert. acc", "clean_acc": "clean acc", "trial_id": "winner",
    "method": "method", "attack": "attack", "sigma": "σ", "epsilon": "ε", "steps": "T", "m_train": "m",
    "acr": "ACR", "models": "models",
}  # fmt: skip

Storage = Annotated[
    str, typer.Option("--storage", help="Results location: a path or a URI (s3://...).")
]
ExperimentOpt = Annotated[
    str | None, typer.Option("--experiment", help="Experiment name (default: the space's name).")
]
Address = Annotated[
    str | None,
    typer.Option(
        "--address", help="Ray cluster: auto, host:port or ray://host:port (default: a local Ray)."
    ),
]
DataDir = Annotated[
    str | None,
    typer.Option("--data-dir", help="Directory holding the data set (cifar10, mnist, imagenet)."),
]
Only = Annotated[
    str | None, typer.Option("--only", help="A slice of the grid: key=value[,key=value...].")
]


def fail(problems: list[str], code: int = 2) -> NoReturn:
    for p in problems:
        typer.echo(f"error: {p}", err=True)
    raise typer.Exit(code)


def _plan(request: PlanRequest) -> Plan:
    try:
        return make_plan(request)
    except PlanError as e:
        fail(e.problems)


def _move_aside(exp: Experiment) -> None:
    try:
        moved = move_aside(exp)
    except PlanError as e:
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


def _report_outcome(outcome, command: str) -> None:
    if outcome.interrupted:
        console.print(f"[yellow]interrupted[/]: re-run `{command}` to resume")
        raise typer.Exit(130)
    if outcome.failed or outcome.certify_failures:
        table = Table(title="failures")
        table.add_column("trial_id")
        table.add_column("stage")
        table.add_column("error")
        for tid, msg in outcome.failed.items():
            table.add_row(tid, "train", msg)
        for tid, msg in outcome.certify_failures:
            table.add_row(tid, "certify", msg)
        console.print(table)
        console.print(f"fix the cause, then re-run `{command}` to resume (finished work is kept)")
        raise typer.Exit(1)


def _command_line() -> str:
    return "sweeper " + " ".join(sys.argv[1:])


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
) -> None:
    """Train every trial of SPACE on Ray Tune and certify each one as it finishes.

    Re-running the same command resumes: finished trials are not retrained, interrupted ones
    continue from their last checkpoint, and only missing certification shards are computed.
    """
    request = PlanRequest(
        space, storage, experiment, smoke, only, data_dir, download, None, address, restart_
    )
    plan = _plan(request)
    from sweeper.launch import (
        LaunchError,
        LaunchOptions,
        effective_resources,
        ray_cluster,
        resource_problems,
        run_sweep,
    )

    resources = effective_resources(plan.spec.resources, cpu_only)
    if restart_ and not dry_run:
        _move_aside(plan.exp)
    states = trial_states(plan.exp, plan.trials)
    print_plan(
        plan, resources, states, "sweeper run grid (dry run)" if dry_run else "sweeper run grid"
    )
    if dry_run:
        return
    finished = [t for t in plan.trials if is_finished(states[t.trial_id], t)]
    to_train = [t for t in plan.trials if not is_finished(states[t.trial_id], t)]
    options = LaunchOptions(address, max_concurrent, max_failures, cpu_only)
    try:
        with ray_cluster(address):
            problems = resource_problems(resources)
            if problems:
                fail(problems)
            write_sweep(
                plan.exp,
                {
                    "space": json.loads(plan.spec.to_json()),
                    "trials": [t.to_dict() for t in plan.all_trials],
                },
            )
            outcome = _with_progress(
                plan, len(finished),
                lambda on_event: run_sweep(plan.exp, to_train, finished, plan.spec.certify, resources, options, on_event),
            )  # fmt: skip
    except LaunchError as e:
        fail(e.problems)
    _report_outcome(outcome, _command_line())
    console.print(
        f"done: {len(plan.trials)} trials. Next: sweeper envelope --storage {storage} --experiment {plan.exp.name} --radii 0:2:0.25"
    )


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
) -> None:
    """(Re)run certification of the finished trials, optionally with other settings.

    New settings write new files beside the old ones; existing shards are skipped."""
    flags = {
        "n": n,
        "n0": n0,
        "alpha": alpha,
        "sigma": sigma_cert,
        "skip": skip,
        "max_points": max_points,
        "shard_size": shard_size,
        "batch_size": batch_size,
    }
    overrides = {k: v for k, v in flags.items() if v is not None}
    plan = _plan(
        PlanRequest(space, storage, experiment, smoke, only, data_dir, False, overrides, address)
    )
    from sweeper.launch import (
        LaunchError,
        certify_trials,
        effective_resources,
        ray_cluster,
        resource_problems,
    )

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
    console.print(
        f"certifying {len(ready)} finished trials ({len(plan.trials) - len(ready)} not finished) with {plan.spec.certify.cert_id}"
    )
    try:
        with ray_cluster(address):
            problems = resource_problems(resources)
            if problems:
                fail(problems)
            outcome = _with_progress(
                plan,
                len(ready),
                lambda on_event: certify_trials(
                    plan.exp, ready, plan.spec.certify, resources, on_event
                ),
            )
    except LaunchError as e:
        fail(e.problems)
    _report_outcome(outcome, _command_line())


def resolve_experiment(storage: str, experiment: str | None) -> Experiment:
    """The named experiment, or the most recently written one under `storage`."""
    if experiment:
        return Experiment(storage, experiment)
    sweeps = [
        f
        for f in fileio.list_files(storage, "sweep.json")
        if f.count("/") - storage.count("/") <= 2
    ]
    if not sweeps:
        fail([f"no experiments under --storage {storage}: run `sweeper run grid <space>` first"])
    root = fileio.local_path(storage) if not fileio.is_uri(storage) else None
    if root is not None:
        sweeps.sort(key=lambda f: Path(f).stat().st_mtime)
    name = Path(sweeps[-1]).parent.name
    typer.echo(f"experiment: {name} (pass --experiment to choose another)", err=True)
    return Experiment(storage, name)


@app.command()
def envelope(
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    radius: Annotated[float | None, typer.Option("--radius", help="One ℓ2 radius.")] = None,
    radii: Annotated[
        str | None,
        typer.Option("--radii", help="start:stop:step (stop included) or a list 0,0.5,1."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="A column to group by (sigma, method, attack, m_train, ...)."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"Output: {', '.join(FORMATS)}.")] = "table",
    plot: Annotated[
        str | None, typer.Option("--plot", help="Write a figure (.png/.pdf/.svg) of the envelope.")
    ] = None,
    only: Only = None,
) -> None:
    """Upper-envelope certified accuracy over every model of an experiment, and who got it."""
    problems = []
    if fmt not in FORMATS:
        problems.append(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if radius is not None and radii is not None:
        problems.append("pass --radius or --radii, not both")
    if radius is not None and radius < 0:
        problems.append(f"--radius must be >= 0 (got {radius})")
    if plot is not None and plot.rsplit(".", 1)[-1].lower() not in ("png", "pdf", "svg"):
        problems.append(f"--plot {plot!r}: the file name must end in .png, .pdf or .svg")
    try:
        grid = [radius] if radius is not None else env.parse_radii(radii or "0:2.25:0.25")
    except env.EnvelopeError as e:
        problems.append(str(e))
    selection, only_problems = parse_only(only)
    if problems or only_problems:
        fail(problems + only_problems)
    exp = resolve_experiment(storage, experiment)
    try:
        results = load_results(exp)
        frame = _filter(results.frame, selection)
        table = env.envelope(frame, grid, by)
    except (ResultsError, env.EnvelopeError) as e:
        fail([str(e)])
    _print_table(table, fmt, f"upper envelope of {exp.name}")
    _print_coverage(exp, results, frame)
    if plot:
        plot_envelope(frame, plot, by, title=f"{exp.name}: {frame['trial_id'].nunique()} models")
        typer.echo(f"figure written to {plot}", err=True)


def _filter(frame, selection: dict):
    for key, value in selection.items():
        if key not in frame:
            fail([f"--only: {key!r} is not a results column"])
        frame = (
            frame[frame[key].astype(object) == value]
            if not isinstance(value, float)
            else frame[(frame[key] - value).abs() < 1e-9]
        )
    return frame


def _print_table(table, fmt: str, title: str) -> None:
    if fmt != "table":
        typer.echo(render(table, fmt))
        return
    cols = [c for c in table.columns if c in DISPLAY or c == table.columns[0]]
    out = Table(title=title)
    for col in cols:
        out.add_column(
            DISPLAY.get(col, str(col)),
            justify="right" if table[col].dtype.kind in "fiu" else "left",
        )
    winner = [
        c for c in cols if c not in ("radius", "certified_accuracy", "models", table.columns[0])
    ]
    for _, row in table[cols].iterrows():
        nobody = row["certified_accuracy"] == 0  # no model certifies anything: no winner to name
        out.add_row(*("-" if nobody and c in winner else cell(row[c]) for c in cols))
    console.print(out)


def _print_coverage(exp: Experiment, results, frame) -> None:
    models = frame.groupby(["trial_id", "cert_id"]).ngroups if len(frame) else 0
    typer.echo(f"{models} models, {len(frame)} certified points", err=True)
    try:
        planned = {
            TrialConfig.from_dict(d).trial_id for d in (read_sweep(exp) or {}).get("trials", [])
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        planned = set()  # no or unreadable sweep.json (e.g. imported results): nothing to compare
    absent = planned - set(results.frame["trial_id"])
    if absent:
        typer.echo(
            f"{len(absent)} of the sweep's {len(planned)} trials have no results yet", err=True
        )
    if results.missing_shards:
        listed = ", ".join(
            f"{tid} ({len(v)} shards)"
            for (tid, _), v in sorted(results.missing_shards.items())[:10]
        )
        typer.echo(
            f"{len(results.missing_shards)} models are missing shards (partial results): {listed}",
            err=True,
        )


@app.command()
def status(storage: Storage = DEFAULT_STORAGE, experiment: ExperimentOpt = None) -> None:
    """Trials by state, certification shards done and missing, storage used."""
    from sweeper.status import experiment_status

    exp = resolve_experiment(storage, experiment)
    try:
        st = experiment_status(exp)
    except FileNotFoundError as e:
        fail([str(e)])
    except (ValueError, KeyError, TypeError) as e:  # ValueError: bad JSON or ConfigError
        fail([f"cannot read the experiment at {exp.root} ({type(e).__name__}: {e})"])
    counts = st.counts()
    console.print(
        f"[bold]{st.experiment}[/] at {st.root}: {len(st.trials)} trials: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    table = Table("trial_id", "trial", "state", "epoch", "shards", "error")
    for t in st.trials:
        shards = (
            f"{t.shards_done}/{t.shards_expected}"
            if t.shards_expected
            else ("-" if t.state != "finished" else "0/?")
        )
        table.add_row(t.trial_id, t.summary, t.state, f"{t.epoch}/{t.epochs}", shards, t.error[:60])
    console.print(table)
    done = sum(t.shards_done for t in st.trials)
    gaps = sum((t.shards_expected or 0) - t.shards_done for t in st.trials)
    console.print(
        f"shards: {done} done, {gaps} missing in partly certified models; storage used: {st.size_bytes / 1e6:.1f} MB"
    )


def main() -> None:  # pragma: no cover - console entry point
    app()
