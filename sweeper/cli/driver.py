"""How a command that drives work on Ray shows it (`sweeper.run.driving` holds the lease, Ray
and the room on the cluster): its launch settings from the options, the command line as the
lease names it, the wait for nodes, and how it ends (exit codes, failures)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import typer

from sweeper.api.surface import LaunchOptions, Resources, Watchers
from sweeper.cli.common import command_line, console, ray_lost
from sweeper.cli.display import echo

if TYPE_CHECKING:
    from rich.status import Status

# The launch settings of every command that drives work on Ray (`run grid` takes them all).
DRIVER = ("address", "cpu_only", "wait_for_nodes", "max_trials")
TASKS = (*DRIVER, "node_losses", "task_retries")  # of commands that run stage tasks only


def launch_options(options: dict[str, Any]) -> LaunchOptions:
    """The launch settings among a command's options (those it does not take: their defaults)."""
    return LaunchOptions(
        **{f.name: options[f.name] for f in fields(LaunchOptions) if f.name in options}
    )


def finish(
    interrupted: bool, failures: list[tuple[str, str, str]], notes: Sequence[str] = ()
) -> None:
    """Exit 130 if the command was interrupted, 1 with one line per (trial_id, stage) that
    failed (its error's telling line, how many tasks or attempts) and `notes` (where the full
    texts are, how to retrain); both say how to resume."""
    command = command_line()
    if interrupted:
        console.print(f"[yellow]interrupted[/]: re-run `{command}` to resume", soft_wrap=True)
        raise typer.Exit(130)
    if failures:
        console.print(f"[red]failures[/]: {len(failures)} (one line per trial and stage)")
        for tid, stage, line in failures:
            console.print(f"  {tid} {stage}: {line}", soft_wrap=True, markup=False, highlight=False)
        for note in notes:
            console.print(note, soft_wrap=True, markup=False, highlight=False)
        console.print(
            f"fix the cause, then re-run `{command}` to resume (finished work is kept)",
            soft_wrap=True,
        )
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
            self.status = None


def watchers(planned: Callable[[Any, Resources, dict], None] | None = None) -> Watchers:
    """How a command that runs work shows it: the lease names the command as typed, the
    progress display (`RunDisplay`) and the wait for nodes (`WaitDisplay`) are live on a
    terminal, warnings are `warning:` lines on stderr, notes and the plan (`planned`) go to
    the console, Ray gone under the run is an `error:` line with how to resume."""
    from sweeper.cli.status import RunDisplay

    return Watchers(
        holder=command_line(),
        progress=RunDisplay,
        waiting=WaitDisplay,
        warn=lambda line: echo(f"warning: {line}", err=True),
        note=console.print,
        planned=planned or (lambda plan, resources, states: None),
        ray_lost=ray_lost,
    )
