"""`sweeper status` (once, `--all`, `--format json`, `--watch`) and the same view as the
progress display of the commands that run work (`RunDisplay`): a live view on a terminal, one
plain line per event (no escape codes) in a log file or a pipe."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from sweeper.api.status_report import StatusReport, StatusWatch
from sweeper.api.sweep import DEFAULT_STORAGE, Sweep
from sweeper.cli.common import LatestExperiment, Storage, app, console, fail, resolve_experiment
from sweeper.cli.display import echo, screen_width
from sweeper.cli.options import Strict
from sweeper.cli.status_view import as_json, summary_lines, view
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

    from sweeper.results.status import Status
    from sweeper.results.storage import Experiment

FORMATS = ("table", "json")
UNFINISHED = ("pending", "training", "interrupted", "certifying", "trained")
PLAIN_SUMMARY_S = 60.0  # a log file gets the summary lines this often, beside the events


@app.command()
def status(
    storage: Storage = DEFAULT_STORAGE,
    experiment: LatestExperiment = None,
    everything: Annotated[
        bool, typer.Option("--all", help="List every trial, not only those that need attention.")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="Output: table or json.")] = "table",
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh in place until the sweep ends (Ctrl-C stops).")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=1.0, help="Seconds between refreshes of --watch.")
    ] = 5.0,
    strict: Strict = False,
) -> None:
    """Where the sweep stands: trials by state, epochs and shards done of planned, throughput,
    ETAs and resource-hours; then the trials that need attention (failed with their error,
    blocked, interrupted, running), and the result files that fail validation (left out of
    every result; not under --watch, which opens no results file)."""
    problems = [] if fmt in FORMATS else [f"--format {fmt!r} is not one of {', '.join(FORMATS)}"]
    if watch and fmt == "json":
        problems.append("--watch refreshes the table: drop --format json (it prints once)")
    if problems:
        fail(problems)
    exp = resolve_experiment(storage, experiment)
    if watch:
        watch_status(StatusWatch(exp), everything, interval)
        return
    report = Sweep(storage=exp.storage, experiment=exp.name).status()
    st, summary = report.status, report.summary
    if fmt == "json":
        echo(json.dumps(as_json(st, summary, everything), indent=1))
    else:
        console.print(view(st, summary, everything, st.space), soft_wrap=True)  # a line each
    if strict and st.left_out:
        raise typer.Exit(1)


def sweep_ended(st: Status, driver_seen: bool) -> bool:
    """Nothing left to do, or the driver that was running has ended (finished, stopped, died)."""
    return not any(t.state in UNFINISHED for t in st.trials) or (driver_seen and st.driver is None)


def watch_status(reader: StatusWatch, everything: bool, interval: float) -> None:
    """Refresh the view every `interval` seconds until `sweep_ended` or Ctrl-C (exit 0): in
    place on a terminal, else (a log file) the summary lines stamped, one block per refresh."""
    from rich.live import Live

    def plain(report: StatusReport) -> None:
        print_stamped(summary_lines(report.summary, report.status))

    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    seen = False
    try:
        if live is not None:
            live.start()
        while True:
            try:
                report = reader.read()
            except ProblemsError as e:
                fail(e.problems)
            st = report.status
            seen = seen or st.driver is not None
            if live is not None:
                live.update(view(st, report.summary, everything, st.space), refresh=True)
            else:
                plain(report)
            if sweep_ended(st, seen):
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()


class RunDisplay:
    """The progress display of a command that runs work: on a terminal the status view, live
    (re-read every `interval` seconds, or less often if reading takes long), with failures
    printed above it; elsewhere one plain line per event and the summary every minute."""

    def __init__(self, exp: Experiment, interval: float = 5.0):
        self.reader = StatusWatch(exp)
        self.interval = interval
        self.terminal = console.is_terminal
        self.live: Live | None = None
        self._view: RenderableType = ""
        self._next = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> RunDisplay:
        if self.terminal:
            from rich.live import Live

            self.live = Live(get_renderable=self._render, console=console, refresh_per_second=1)
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        self._next = 0.0  # the last view read afresh
        if self.live is not None:  # stop() draws it once, whole: a refresh() before drew it twice
            self.live.stop()
        else:
            self._plain_summary()

    def _render(self):
        with self._lock:
            if time.monotonic() >= self._next or not self._view:
                start = time.monotonic()
                try:
                    report = self.reader.read()
                    self._view = view(report.status, report.summary, False, report.status.space)
                except (OSError, ProblemsError) as e:  # sweep.json not yet there
                    self._view = f"status not readable yet ({type(e).__name__}: {e})"
                cost = time.monotonic() - start
                self._next = time.monotonic() + max(self.interval, 20 * cost)
            return self._view

    def __call__(self, event) -> None:
        line = event_line(event)
        if self.terminal:
            if event.kind.endswith("_failed") and self.live is not None:
                self.live.console.print(Text(line, style="red"), soft_wrap=True)
            return
        print_stamped([line])
        if time.monotonic() >= self._next:
            self._plain_summary()

    def _plain_summary(self) -> None:
        try:
            report = self.reader.read()
        except (OSError, ProblemsError):
            return
        self._next = time.monotonic() + PLAIN_SUMMARY_S
        print_stamped(summary_lines(report.summary, report.status))


def print_stamped(lines: list[str]) -> None:
    """Each line after the time of day, one line at $COLUMNS or the terminal's width (a longer
    one wrapped at its words under an indent past the time; piped without $COLUMNS: whole)."""
    stamp, width = time.strftime("%H:%M:%S"), screen_width()
    for line in lines:
        text = f"{stamp} {line}"
        wrapped = width and textwrap.wrap(
            text,
            width,
            subsequent_indent=" " * (len(stamp) + 3),
            break_long_words=False,
            break_on_hyphens=False,
        )
        for part in wrapped or [text]:
            console.print(part, soft_wrap=True, highlight=False, markup=False)


def event_line(event) -> str:
    """One event of a run, in words."""
    tid, detail = event.trial_id, event.detail
    words = {
        "trial_started": f"trial {tid} started",
        "trial_epoch": f"trial {tid} finished epoch {detail}",
        "trial_finished": f"trial {tid} trained",
        "trial_failed": f"trial {tid} failed (train): {detail}",
        "shards_planned": f"trial {tid}: shards queued ({detail})",
        "shard_done": f"trial {tid}: shard {detail} written",
        # the stage alone: the setting's id is as long as the line (the plan shows it)
        "compacted": f"trial {tid}: {detail.split()[0] if detail else ''} compacted",
    }
    line = words.get(event.kind) or (
        f"trial {tid} failed ({event.kind.removesuffix('_failed')}): {detail}"
        if event.kind.endswith("_failed")
        else f"{event.kind} {tid} {detail}"
    )
    if event.shards is not None:
        done, total, failed = event.shards
        line += f" [shards {done}/{total}" + (f", {failed} failed]" if failed else "]")
    return line
