"""Shared pieces of the command line: the Typer apps, the console, common options, errors."""

from __future__ import annotations

import difflib
import errno
import inspect
import os
import shutil
import sys
from typing import Annotated, NoReturn, cast

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from sweeper.api.surface import Experiment, RayLost, redact_args
from sweeper.cli.display import TerminalConsole, console_width, echo, printable
from sweeper.cli.usage import usage_line
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

# The commands in the order a sweep uses them (any other is listed after them).
ORDER = (
    "run",
    "certify",
    "status",
    "envelope",
    "table",
    "report",
    "verify",
    "empirical",
    "import",
    "spaces",
    "compact",
    "bench",
)


class GuardedGroup(TyperGroup):
    """The command line's one edge: bad input that a command did not report itself (a
    ProblemsError such as an experiment name that would leave the storage) is its `error:`
    lines and exit 2, and so is a mistyped command line (`usage`); a file-system failure (a
    full disk, a vanished mount) is one line saying what and where, with the free space, and
    exit 1, and so is Ray gone under a run (`RayLost`, with how to resume), never a
    traceback. It also lists the commands in `ORDER` and tidies every command's help
    (`tidy_help`)."""

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))

    def parse_args(self, ctx, args):
        tidy_help(self, ctx)
        try:
            return super().parse_args(ctx, args)
        except UsageError as e:
            usage_error(e)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as e:
            usage_error(e)
        except ProblemsError as e:
            fail(e.problems)
        except RayLost as e:  # Ray went away under a run: no traceback, how to resume
            ray_lost(str(e))
            raise typer.Exit(1) from None
        except OSError as e:
            if e.errno == errno.EPIPE:  # click's own handling of a closed pipe
                raise
            echo(f"error: {os_error_line(e)}", err=True)
            raise typer.Exit(1) from None


def usage_error(e: UsageError) -> NoReturn:
    """A mistyped command line (`usage.usage_line`): one `error:` line, exit 2; Click's own
    help for a command given nothing (`no_args_is_help`)."""
    if isinstance(e, NoArgsIsHelpError):
        raise e
    fail([usage_line(e)])


class RunGroup(TyperGroup):
    """`sweeper run`: a name that is not one of its commands is most likely a space given
    without the kind of sweep (`sweeper run digits`): say the command that runs it."""

    def resolve_command(self, ctx, args):
        name = args[0] if args else "-"
        if not name.startswith("-") and not difflib.get_close_matches(name, self.commands):
            kinds = ", ".join(self.list_commands(ctx))
            fail(
                [
                    f"no such command 'sweeper run {name}' (sweeper run takes a kind of sweep: "
                    f"{kinds}); to run the space {name!r}: sweeper run grid {name}"
                ]
            )
        return super().resolve_command(ctx, args)


def tidy_help(command, ctx) -> None:
    """For `command` and every command under it: help in Click's plain layout (an option's
    names on their own line when long, its text wrapped below: never cut, where rich's panels
    cut `--points-per-ba…` at 80 columns), a flag (an option that takes no value) shown
    without a type (`--dry-run`, not `--dry-run <bool>`), and each paragraph of a help text
    one line (the terminal wraps it at its width, never where the source broke it)."""
    command.rich_markup_mode = None
    help_option = command.get_help_option(ctx)
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    if command.help:
        command.help = reflow(command.help)
        # listed whole under Commands (wrapped), not cut to `optionally...`
        command.short_help = command.short_help or command.help.split("\n\n")[0]
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub, ctx)


def reflow(text: str) -> str:
    """Each paragraph (separated by a blank line) of a docstring joined into one line."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def os_error_line(e: OSError) -> str:
    """`No space left on device: /s/exp/trials/x/trial.json (1.2 MB free on its file system);
    ...`: what failed, where, and the free space there when it can be read."""
    what = e.strerror or (str(e).splitlines() or [""])[0] or type(e).__name__
    where = e.filename if e.filename is not None else None
    line = f"{what}: {where}" if where is not None else what
    free = free_space(str(where)) if where is not None else None
    if free is not None:
        line += f" ({free} free on its file system)"
    return line + "; fix that and re-run the same command to resume (finished work is kept)"


def free_space(location: str) -> str | None:
    """Free space of the file system holding `location` (its nearest existing parent)."""
    if fileio.is_uri(location):
        return None
    path = fileio.local_path(location).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if free >= size:
            return f"{free / size:.1f} {unit}"
    return f"{free} bytes"


HELP_WIDTH = 120  # the widest a help text is wrapped at, however wide the terminal
app = typer.Typer(
    cls=GuardedGroup,
    help="Sweeps of randomized-smoothing classifiers on Ray: train a grid, CERTIFY every "
    "model, read the envelope.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # Click's plain help and errors: rich's panels cut option names
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH},
)
run_app = typer.Typer(
    cls=RunGroup, help="Train a sweep and certify every model as it finishes.", no_args_is_help=True
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sweeper {version('sweeper')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


app.add_typer(run_app, name="run")


class LazyConsole:
    """The console of the command being run, made when first used and again whenever $COLUMNS
    or whether stdout is a terminal changed (another invocation, a test's): its width is
    $COLUMNS, else the terminal's, else (piped) `display.PIPED_CONSOLE_WIDTH`; never one
    fixed at import."""

    def __init__(self) -> None:
        self._made: tuple[tuple, TerminalConsole] | None = None

    def current(self) -> TerminalConsole:
        # not stdout itself: rich's Live swaps in a proxy of it while it runs
        key = (os.environ.get("COLUMNS"), sys.stdout.isatty())
        if self._made is None or self._made[0] != key:
            self._made = (key, TerminalConsole(width=console_width()))
        return self._made[1]

    def __getattr__(self, name: str):
        return getattr(self.current(), name)

    # rich's Live holds its console as a context manager (`with console:`), which Python looks
    # up on the type, never through __getattr__
    def __enter__(self) -> TerminalConsole:
        self.current().__enter__()
        return self.current()

    def __exit__(self, *exc) -> None:
        self.current().__exit__(*exc)


console = cast(TerminalConsole, LazyConsole())
Storage = Annotated[
    str, typer.Option("--storage", help="Results location: a path or a URI (s3://...).")
]
ExperimentOpt = Annotated[
    str | None, typer.Option("--experiment", help="Experiment name (default: the space's name).")
]
# Commands that read an experiment: by default the most recently written one (`resolve_experiment`).
LatestExperiment = Annotated[
    str | None,
    typer.Option(
        "--experiment",
        help="Experiment name (default: the most recent experiment "
        "under --storage, named on stderr).",
    ),
]
DataDir = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        help="Directory holding the data set (cifar10, mnist, imagenet), or s3://, gs:// where "
        "`sweeper data put` put it (each node fetches it once into its cache).",
    ),
]
Only = Annotated[
    str | None, typer.Option("--only", help="A slice of the grid: key=value[,key=value...].")
]


Wide = Annotated[
    bool,
    typer.Option("--wide", help="Every column, however wide the table (default: those that fit)."),
]
Digits = Annotated[
    int,
    typer.Option(
        "--digits",
        min=0,
        max=12,
        help="Decimals of accuracies and ACR in table and markdown output.",
    ),
]


def warn_left_out(invalid: list[str]) -> None:
    """Result files that failed validation (a corrupt one stopped the read already:
    `selection.corrupt_files`): each named on stderr with why, and their rows left out (never
    a number from them); --strict exits 1 after the output."""
    for line in invalid:
        echo(f"warning: left out {line}", err=True)
    if invalid:
        echo(
            f"{len(invalid)} result file{'s' * (len(invalid) != 1)} left out (named above): "
            "move each away and `sweeper certify` (or `sweeper empirical`) recomputes it",
            err=True,
        )


def sweeper_command() -> str:
    """How to run sweeper again from this shell, for the `Next:` hints: `sweeper` when that
    name finds this very program on PATH, else the path it was started by (after `make
    install` without activating the venv: `.venv/bin/sweeper`)."""
    started = sys.argv[0] if sys.argv else ""
    found = shutil.which("sweeper")
    if not started.endswith("sweeper") or (
        found and os.path.realpath(found) == os.path.realpath(started)
    ):
        return "sweeper"
    relative = os.path.relpath(started)
    return relative if not relative.startswith("..") else os.path.abspath(started)


def command_line() -> str:
    """The command as typed, for the lease (`lease.json`) and the messages that say how to
    re-run it, with the credentials of any URI or --address redacted (`redact_args`): the
    lease and the terminal never hold them, even where an option let them through."""
    return "sweeper " + " ".join(redact_args(sys.argv[1:]))


def ray_lost(line: str) -> None:
    """Ray gone under a run (`RayLost`, `RayWatch`): one `error:` line saying so and how to
    resume."""
    echo(f"error: {line}; re-run `{command_line()}` to resume (finished work is kept)", err=True)


def fail(problems: list[str], code: int = 2) -> NoReturn:
    for p in problems:  # one line each, whatever a file read from storage put in it
        typer.echo(f"error: {printable(p, one_line=True)}", err=True)
    raise typer.Exit(code)


def resolve_experiment(storage: str, experiment: str | None) -> Experiment:
    """The named experiment, or the most recently written one under `storage`."""
    from sweeper.api.sweep import existing_experiment, latest_experiment

    try:
        if experiment is not None:
            return existing_experiment(storage, experiment)
        exp = latest_experiment(storage)
    except ProblemsError as e:
        fail(e.problems)
    echo(f"experiment: {exp.name} (pass --experiment to choose another)", err=True)
    return exp
