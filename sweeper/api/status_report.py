"""Where a sweep stands, as `Sweep.status()` and every view of it read it (`sweeper status`,
its `--watch`, the progress display of the commands that run work): each trial's state and the
summary, of the slice a driver runs while it runs one. The slice is the lease's `only`, which
the driver recorded when it took the lease (`Watchers.only`): the command line and
`sweeper.Sweep` record it alike, and every reader takes it from there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeper.results.storage import Experiment

if TYPE_CHECKING:
    from sweeper.results.status import Status, StatusReader
    from sweeper.results.summary import Summary


@dataclass(frozen=True)
class StatusReport:
    """`sweeper status`: each trial's state (`status`, its `left_out` result files read; the
    running slice's trials only while a driver runs one) and the summary (throughput, ETAs,
    resource-hours)."""

    status: Status
    summary: Summary


def running_slice(st: Status) -> Status:
    """While a driver runs a slice of the sweep (`run grid --only ...`, `certify --only ...`,
    `Sweep(only=...).run()`), the status of that slice: its trials alone in every count and
    ETA (`restrict`); `st` as it is otherwise."""
    from sweeper.plan.grid import parse_only, select
    from sweeper.results.status import restrict

    only = st.driver.only if st.driver is not None else None
    chosen, problems = parse_only(only)
    if not chosen or problems:
        return st
    picked, _ = select(st.configs, chosen)
    return restrict(st, {c.trial_id for c in picked}, str(only))


class StatusWatch:
    """An experiment's status read again and again, re-reading only what changed (`sweeper
    status --watch`, the progress display): `read()` the running slice's report, or
    `ProblemsError` with one line if it cannot be read (not yet: no sweep.json)."""

    def __init__(self, exp: Experiment):
        from sweeper.results.status import StatusReader

        self.exp = exp
        self.reader: StatusReader = StatusReader(exp)

    def read(self) -> StatusReport:
        from sweeper.api.running import experiment_status
        from sweeper.results.summary import summarize

        st = running_slice(experiment_status(self.reader))
        return StatusReport(st, summarize(st))


def status_report(exp: Experiment) -> StatusReport:
    """`Sweep.status()`: the running slice's states and summary, with the result files left
    out and the envelope strategy's verdicts."""
    from sweeper.api.running import experiment_status
    from sweeper.results.status import StatusReader, envelope_verdicts
    from sweeper.results.summary import summarize

    reader = StatusReader(exp)
    st = experiment_status(reader)
    st.left_out = list(dict.fromkeys([*(st.left_out or []), *left_out(exp)]))
    st.envelope = envelope_verdicts(exp)
    st = running_slice(st)
    return StatusReport(st, summarize(st))


def left_out(exp: Experiment) -> list[str]:
    """The result files left out, "path: why"; one line naming why if they cannot be read."""
    from sweeper.results.certify_rows import ResultsError
    from sweeper.results.status import left_out as files_left_out

    try:
        return files_left_out(exp)
    except ResultsError as e:
        return [str(e)]
