"""Where a sweep stands, in numbers: trials by state, epochs and shards done of planned, rows
written, throughput over the last window, ETAs, and the resource-hours spent and projected.

Made from a `Status` alone (no file is read here). How each figure is measured:

- **Throughput** (only while a driver holds the experiment): epochs per hour from each
  trial.json's last write and its last epoch's time (a trial written within the window has
  run through it, one epoch every `epoch_time_s`: the epochs that fit between the window's
  start and its last write, at most its epochs); certified points per hour from the stage
  files written within the window (a shard's points; a compacted model's, when its shards were
  folded). The window is the last `WINDOW_S`, or the run's age if shorter.
- **ETA**: what is left at that throughput (certification cannot end before training does).
- **Resource-hours**: the trials' measured time × what each holds (`resources.gpu` per trial
  in GPU-hours, else `resources.cpu` in CPU-hours): training, epochs done × each trial's
  measured epoch time (projected: every planned epoch, at the trial's own epoch time, else at
  the mean of the measured ones); certification, points written × the measured seconds per
  point (the cache's `time_s`; projected: every planned point).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sweeper.results.status import STATES, Status

WINDOW_S = 900.0


@dataclass(frozen=True)
class Summary:
    experiment: str
    trials: int
    states: dict[str, int]
    epochs: tuple[int, int]  # done, planned
    shards: dict[str, tuple[int, int | None]]  # stage -> done, planned (None: not known)
    rows: tuple[int, int]  # certified points written, planned
    driver: str | None  # who is running the sweep (None: nothing runs)
    elapsed_s: float | None  # since the running driver started
    window_s: float | None
    epochs_per_hour: float | None
    points_per_hour: float | None
    eta_train_s: float | None
    eta_certify_s: float | None
    unit: str  # "GPU" or "CPU": what the hours below count
    train_hours: tuple[float | None, float | None]  # spent, projected
    certify_hours: tuple[float | None, float | None]
    extra_models: int
    size_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(st: Status, window_s: float = WINDOW_S) -> Summary:
    states = {s: 0 for s in STATES} | dict(st.counts())
    trials = [t for t in st.trials if t.state != "skipped"]  # the search will not train them
    epochs = (sum(min(t.epoch, t.epochs) for t in trials), sum(t.epochs for t in trials))
    rows = (sum(t.points[0] for t in trials), sum(t.points[1] for t in trials))
    elapsed = st.now - st.driver.since if st.driver is not None else None
    window = min(window_s, elapsed) if elapsed is not None else None
    per_hour: tuple[float | None, float | None] = (None, None)
    if window is not None and window > 0:
        per_hour = (_epochs_in(st, window) * 3600 / window, _points_in(st, window) * 3600 / window)
    eta_train = _eta(epochs[1] - epochs[0], per_hour[0])
    eta_certify = _eta(rows[1] - rows[0], per_hour[1])
    if eta_certify is not None and eta_train is not None:
        eta_certify = max(eta_certify, eta_train)
    unit, per_trial = st.units
    return Summary(
        st.experiment,
        len(st.trials),
        states,
        epochs,
        _shards(st),
        rows,
        st.driver.describe() if st.driver is not None else None,
        elapsed,
        window,
        per_hour[0],
        per_hour[1],
        eta_train,
        eta_certify,
        unit,
        _train_hours(trials, per_trial),
        _certify_hours(st, per_trial, rows),
        st.extra_models,
        st.size_bytes,
    )


def _shards(st: Status) -> dict[str, tuple[int, int | None]]:
    out = {}
    for stage in ("certify", "empirical"):
        shards = [t.shards[stage] for t in st.trials if t.state != "skipped"]
        totals = [s.total for s in shards if s.total is not None]
        done = sum(s.done for s in shards)
        if done or totals:
            out[stage] = (done, sum(totals) if totals else None)
    return out


def _epochs_in(st: Status, window: float) -> int:
    """Epochs finished within the last `window` seconds (see the module's docstring)."""
    start = st.now - window
    count = 0
    for t in st.trials:
        if t.updated is None or t.updated < start or not t.epoch_time_s or t.epoch_time_s <= 0:
            continue
        count += min(t.epoch, int((t.updated - start) // t.epoch_time_s) + 1)
    return count


def _points_in(st: Status, window: float) -> int:
    start = st.now - window
    return sum(points for mtime, points in st.file_times.get("certify", []) if mtime >= start)


def _eta(left: int, per_hour: float | None) -> float | None:
    if left <= 0:
        return 0.0
    if not per_hour:
        return None
    return left / per_hour * 3600


def _train_hours(trials: list, per_trial: float) -> tuple[float | None, float | None]:
    measured = [t for t in trials if t.epoch_time_s]
    if not measured:
        return None, None
    mean = sum(t.epoch_time_s or 0.0 for t in measured) / len(measured)
    spent = sum(min(t.epoch, t.epochs) * (t.epoch_time_s or 0.0) for t in measured)
    projected = sum(t.epochs * (t.epoch_time_s or mean) for t in trials)
    return spent * per_trial / 3600, projected * per_trial / 3600


def _certify_hours(st: Status, per_trial: float, rows: tuple[int, int]):
    if st.seconds_per_point is None:
        return None, None
    scale = st.seconds_per_point * per_trial / 3600
    return rows[0] * scale, rows[1] * scale
