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

from sweeper.api.sweep import Sweep
from sweeper.cli.common import LatestExperiment, Storage, app, console, fail, resolve_experiment
from sweeper.cli.display import echo, screen_width
from sweeper.cli.options import Strict
from sweeper.cli.status_view import as_json, summary_lines, view
from sweeper.results.status import Status, StatusReader, restrict
from sweeper.results.storage import DEFAULT_STORAGE, Experiment
from sweeper.results.summary import summarize
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

FORMATS = ("table", "json")
UNFINISHED = ("pending", "training", "interrupted", "certifying", "trained")
PLAIN_SUMMARY_S = 60.0  # a log file gets the summary lines this often, beside the events


def _status_or_exit(reader: StatusReader) -> Status:
    """The experiment's status (of the running slice: `running_slice`), or one `error:` line
    and exit 2."""
    from sweeper.api.running import experiment_status

    try:
        return running_slice(experiment_status(reader))
    except ProblemsError as e:
        fail(e.problems)


def driver_only(command: str) -> str | None:
    """The `--only` of a driver's command line as its lease names it (None: none)."""
    words = command.split()
    for word, after in zip(words, [*words[1:], ""], strict=True):
        if word == "--only" and after:
            return after
        if word.startswith("--only="):
            return word.removeprefix("--only=")
    return None


def running_slice(st: Status) -> Status:
    """While a driver runs a slice of the sweep (`run grid --only ...`, `certify --only ...`),
    the status of that slice: its trials alone in every count and ETA (`restrict`)."""
    from sweeper.plan.grid import parse_only, select

    only = driver_only(st.driver.command) if st.driver is not None else None
    chosen, problems = parse_only(only)
    if not chosen or problems:
        return st
    picked, _ = select(st.configs, chosen)
    return restrict(st, {c.trial_id for c in picked}, str(only))


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
        watch_status(StatusReader(exp), everything, interval)
        return
    report = Sweep(storage=exp.storage, experiment=exp.name).status()
    st = running_slice(report.status)
    summary = report.summary if st is report.status else summarize(st)
    if fmt == "json":
        echo(json.dumps(as_json(st, summary, everything), indent=1))
    else:
        console.print(view(st, summary, everything, st.space), soft_wrap=True)  # a line each
    if strict and st.left_out:
        raise typer.Exit(1)


def sweep_ended(st: Status, driver_seen: bool) -> bool:
    """Nothing left to do, or the driver that was running has ended (finished, stopped, died)."""
    return not any(t.state in UNFINISHED for t in st.trials) or (driver_seen and st.driver is None)


def watch_status(reader: StatusReader, everything: bool, interval: float) -> None:
    """Refresh the view every `interval` seconds until `sweep_ended` or Ctrl-C (exit 0): in
    place on a terminal, else (a log file) the summary lines stamped, one block per refresh."""
    from rich.live import Live

    def plain(st: Status) -> None:
        print_stamped(summary_lines(summarize(st), st))

    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    seen = False
    try:
        if live is not None:
            live.start()
        while True:
            st = _status_or_exit(reader)
            seen = seen or st.driver is not None
            if live is not None:
                live.update(view(st, summarize(st), everything, st.space), refresh=True)
            else:
                plain(st)
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
        self.reader = StatusReader(exp)
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
                    st = running_slice(self.reader.read())
                    self._view = view(st, summarize(st), False, st.space)
                except (OSError, ValueError, KeyError, TypeError) as e:  # sweep.json not yet there
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
            st = running_slice(self.reader.read())
        except (OSError, ValueError, KeyError, TypeError):
            return
        self._next = time.monotonic() + PLAIN_SUMMARY_S
        print_stamped(summary_lines(summarize(st), st))


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
