"""What a command that drives work on Ray holds while it runs: the experiment's lease, a
connection to Ray, and room on the cluster (waiting for an autoscaler to provide it)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import typer

from sweeper.cli.common import console, fail
from sweeper.cli.display import echo
from sweeper.plan.spec import Resources
from sweeper.results.credentials import redact_args
from sweeper.results.storage import Experiment
from sweeper.run.launch_options import LaunchOptions
from trainables.errors import ProblemsError

if TYPE_CHECKING:
    from rich.status import Status

    from sweeper.run.capacity import Capacity

# The launch settings of every command that drives work on Ray (`run grid` takes them all).
DRIVER = ("address", "cpu_only", "wait_for_nodes", "max_trials")


def launch_options(options: dict[str, Any]) -> LaunchOptions:
    """The launch settings among a command's options (those it does not take: their defaults)."""
    return LaunchOptions(
        **{f.name: options[f.name] for f in fields(LaunchOptions) if f.name in options}
    )


def command_line() -> str:
    """The command as typed, for the lease (`lease.json`) and the messages that say how to
    re-run it, with the credentials of any URI or --address redacted (`redact_args`): the
    lease and the terminal never hold them, even where an option let them through."""
    return "sweeper " + " ".join(redact_args(sys.argv[1:]))


def finish(
    interrupted: bool, failures: list[tuple[str, str, str]], notes: Sequence[str] = ()
) -> None:
    """Exit 130 if the command was interrupted, 1 with one line per (trial_id, stage) that
    failed (its error's telling line, how many tasks or attempts) and `notes` (where the full
    texts are, how to retrain); both say how to resume."""
    command = command_line()
    if interrupted:
        console.print(f"[yellow]interrupted[/]: re-run `{command}` to resume")
        raise typer.Exit(130)
    if failures:
        console.print(f"[red]failures[/]: {len(failures)} (one line per trial and stage)")
        for tid, stage, line in failures:
            console.print(f"  {tid} {stage}: {line}", soft_wrap=True, markup=False, highlight=False)
        for note in notes:
            console.print(note, soft_wrap=True, markup=False, highlight=False)
        console.print(f"fix the cause, then re-run `{command}` to resume (finished work is kept)")
        raise typer.Exit(1)


class WaitDisplay:
    """'waiting for GPU nodes' with the elapsed time and what the cluster has so far: a live
    line on a terminal, a plain line per change (or per minute) in a log file."""

    def __init__(self) -> None:
        self.status: Status | None = None
        self.last = ("", 0.0)

    def __call__(self, waiting) -> None:
        kind = "GPU nodes" if waiting.resources.gpu > 0 else "nodes"
        scaler = waiting.view.autoscaler
        doing = ", ".join((scaler.launching + scaler.failures) if scaler else ()) or "nothing yet"
        what = f"the cluster has {waiting.view.describe()}; the autoscaler is launching {doing}"
        minutes, seconds = divmod(int(waiting.elapsed), 60)
        line = f"waiting for {kind} ({minutes}:{seconds:02d}): {what}"
        if console.is_terminal:
            if self.status is None:
                self.status = console.status(line)
                self.status.start()
            self.status.update(line)
        elif what != self.last[0] or time.monotonic() - self.last[1] > 60:
            console.print(line, soft_wrap=True)
            self.last = (what, time.monotonic())

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()


def check_node_versions() -> None:
    """Every alive node must run the driver's sweeper, torch and ray (sweeper.run.versions):
    ProblemsError naming each difference; a node that does not answer is a warning."""
    from sweeper.run.versions import CHECK_TIMEOUT_S, version_problems

    problems, silent = version_problems()
    for node in silent:
        echo(
            f"warning: node {node} did not report its versions within "
            f"{CHECK_TIMEOUT_S:.0f} s: not checked",
            err=True,
        )
    if problems:
        raise ProblemsError(problems)


@contextmanager
def driving(
    exp: Experiment, address: str | None, resources: Resources, count: int, wait_minutes: float
) -> Iterator[Capacity]:
    """Hold `exp` (its lease), connect to Ray, wait for room for one of `count` trials
    (asking an autoscaler for all of them) and check that the nodes run the driver's versions;
    yields the `Capacity` request, released on exit. Any problem is one `error:` line and
    exit 2."""
    from sweeper.results.lease import Lease
    from sweeper.run.capacity import capacity_for
    from sweeper.run.launch import ray_cluster

    if links := exp.link_problems():  # before the lease: its lock file is inside too
        fail(links)
    display = WaitDisplay()
    try:
        with Lease(exp, command_line()) as lease, ray_cluster(address):
            if lease.took_over is not None:
                echo(
                    f"warning: took over the lease of {lease.took_over.describe()}, which is gone",
                    err=True,
                )
            with capacity_for(resources, count, wait_minutes * 60, display) as capacity:
                display.close()
                check_node_versions()
                yield capacity
    except ProblemsError as e:
        display.close()
        fail(e.problems)
