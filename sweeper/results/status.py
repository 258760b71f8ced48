"""What an experiment holds: each trial's state, epochs and shards, the driver, the last run's
failures, and what the throughput and cost figures are made from. Read from sweep.json, the
trials' trial.json, one listing per stage (file names, sizes, times), lease.json, failures.json
and one column of the certification cache: no shard is opened.

`StatusReader` keeps what does not change between two reads (the trials' configs, parsed once
per sweep.json; a trial.json until its size or time changes; the cache's timing column), so
`sweeper status --watch` costs one listing per directory and the files that changed.

A trial's state, as a person needs it after any interruption:
pending (not started), skipped (the envelope search stopped without training it),
blocked (its parent failed), training (trial.json says running and a
driver holds the lease), interrupted (says running, but no driver is alive: re-run to resume),
certifying (trained, shards missing, a driver alive), trained (trained, shards missing, nothing
running), failed (training failed, or the last run's certification of it failed and shards are
still missing), finished (trained and every planned shard written).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field

from sweeper.results.failures import Failure, read_failures
from sweeper.results.lease import Holder, read_holder
from sweeper.results.search_records import SearchAccount, account, read_search
from sweeper.results.shard_counts import (
    Shards,
    by_trial,
    file_points,
    planned_chunks,
    planned_shards,
    points_done,
    pruned_settings,
    stage_shards,
)
from sweeper.results.storage import STAGES, Experiment, StageFile
from sweeper.results.sweep_file import parse_sweep, sweep_bytes, sweep_trials
from trainables.kernel import fileio
from trainables.kernel.cert_ids import is_imported
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_status import parse_status, read_raw

STATES = (
    "pending",
    "skipped",
    "blocked",
    "training",
    "interrupted",
    "certifying",
    "trained",
    "failed",
    "finished",
)
ATTENTION = ("failed", "blocked", "interrupted", "training", "certifying", "trained")


@dataclass
class TrialRow:
    trial_id: str
    state: str  # one of STATES
    epoch: int
    epochs: int
    shards: dict[str, Shards]  # stage -> its shards
    summary: str
    error: str = ""  # the line that says what failed, and in which stage
    epoch_time_s: float | None = None  # the last epoch's, as the trial measured it
    updated: float | None = None  # when trial.json was last written
    points: tuple[int, int] = (0, 0)  # certified points (rows) written, planned

    @property
    def shards_done(self) -> int:  # certification's (the run's own stage)
        return self.shards["certify"].done

    @property
    def shards_expected(self) -> int | None:
        return self.shards["certify"].total


@dataclass
class Status:
    experiment: str
    root: str
    trials: list[TrialRow] = field(default_factory=list)
    extra_models: int = 0  # certified models not in sweep.json, and imported ones
    size_bytes: int = 0  # sweep.json, trials/, the stages' files and caches
    driver: Holder | None = None  # the driver holding the experiment's lease, if it is alive
    last_driver: Holder | None = None  # who held it last (alive or not)
    now: float = 0.0
    units: tuple[str, float] = ("GPU", 0.0)  # what a trial holds: ("GPU", 0.25), ("CPU", 1)
    file_times: dict[str, list[tuple[float, int]]] = field(
        default_factory=dict
    )  # stage -> (mtime, points)
    seconds_per_point: float | None = None  # certification, measured (the cache's time_s)
    failures_log: str | None = None
    space: str | None = None  # the space the sweep was run with (sweep.json)
    left_out: list[str] | None = None  # "path: why" of result files left out (None: not read)
    links: list[str] = field(default_factory=list)  # links inside the storage, never read through
    envelope: list[dict] | None = None  # the envelope strategy's verdicts per cert_id (read)
    configs: list[TrialConfig] = field(default_factory=list)  # the sweep's, as sweep.json says
    sweep_trials: int | None = None  # the sweep's trials when `trials` is a slice of them
    only: str | None = None  # the slice's --only, as its driver was given it
    search: SearchAccount | None = None  # the envelope search's account (None: none ran)

    def counts(self) -> Counter:
        return Counter(t.state for t in self.trials)


def restrict(st: Status, ids: set[str], only: str) -> Status:
    """`st` about the trials `ids` only (the slice a driver runs, selected by `only`): every
    count, ETA and resource-hour of its summary is the slice's."""
    trials = [t for t in st.trials if t.trial_id in ids]
    if len(trials) == len(st.trials):
        return st
    return dataclasses.replace(st, trials=trials, sweep_trials=len(st.trials), only=only)


def left_out(exp: Experiment) -> list[str]:
    """Every results file the readers leave out, "path: why" (certification's, legacy memory
    files among them, then the attack stage's). Unlike `StatusReader.read`, this opens them."""
    from sweeper.results.certify_rows import load_results
    from sweeper.results.empirical_rows import load_empirical

    return load_results(exp, ["trial_id"]).invalid + load_empirical(exp).invalid


def envelope_verdicts(exp: Experiment) -> list[dict]:
    """Per `_envelope` cert_id: models certified, pruned (each with its upper bounds) and
    unfinished (`results.envelope_records.verdicts`); none under `full`."""
    from sweeper.results.envelope_records import verdicts

    return verdicts(exp)


def summary_of(cfg: TrialConfig) -> str:
    parts = [cfg.method, cfg.attack, f"σ={cfg.sigma:g}"]
    if cfg.epsilon is not None:
        parts += [f"ε={cfg.epsilon:g}", f"T={cfg.steps}"]
    if cfg.m_train is not None:
        parts.append(f"m={cfg.m_train}")
    return " ".join(p for p in parts if p)


def experiment_status(exp: Experiment) -> Status:
    """One read of the experiment (see StatusReader)."""
    return StatusReader(exp).read()


class StatusReader:
    """Reads an experiment's status again and again, re-reading only what changed."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        self._sweep: tuple[str, list[TrialConfig], dict, tuple[str, float]] | None = None
        self._trials: dict[str, tuple[tuple[int, float], dict]] = {}  # path -> (stat, doc)
        self._timing: tuple[tuple[int, float], float | None] | None = None
        self.space: str | None = None
        self.ids: list[str] = []
        self._pruned: dict[str, set[str]] = {}  # trial_id -> the cert_ids it was pruned under

    def read(self, now: float | None = None) -> Status:
        """The status now; FileNotFoundError if there is no sweep.json; a ProblemsError naming
        the file and the fix if sweep.json, a trial.json, lease.json or failures.json is not
        one (no regular file, too large, not JSON, or not its shape)."""
        configs, certify, units = self._configs()
        holder = read_holder(self.exp)
        driver = holder if holder is not None and holder.alive() else None
        st = Status(
            self.exp.name,
            self.exp.root,
            driver=driver,
            last_driver=holder,
            now=now or time.time(),
            units=units,
            space=self.space,
            configs=configs,
        )
        listed = {stage: self._listing(stage, st) for stage in STAGES}
        # An imported model (`sweeper import`) is no certification of the sweep's, even if its
        # trial_id is one of the sweep's (the same config): its file counts no shard or point
        # of the plan (its log's 427 ImageNet rows are not the plan's 500), only as a model.
        imported = {f.trial_id for f, _ in listed["certify"] if is_imported(f.setting_id)}
        listed["certify"] = [x for x in listed["certify"] if not is_imported(x[0].setting_id)]
        grouped = {stage: by_trial(files) for stage, files in listed.items()}
        docs = self._trial_docs(st)
        failures, st.failures_log = read_failures(self.exp)
        self._pruned = pruned_settings(self.exp)
        chunks: dict[str, list[tuple[int, ...]]] = {}
        for tid, cfg in zip(self.ids, configs, strict=True):
            st.trials.append(self._row(tid, cfg, docs, grouped, certify, failures, driver, chunks))
        _block_children(st.trials, configs)
        st.search = _searched(self.exp, st.trials)
        st.extra_models = len(
            imported | ({f.trial_id for f, _ in listed["certify"]} - set(self.ids))
        )
        datasets = {tid: cfg.dataset for tid, cfg in zip(self.ids, configs, strict=True)}
        st.file_times = {
            stage: file_points(files, chunks, datasets) for stage, files in listed.items()
        }
        st.seconds_per_point = self._seconds_per_point(st)
        linked = [f"{link}: {fileio.LINKED}" for link in dict.fromkeys(st.links)]
        st.left_out = linked or None  # the result files' own, read apart (`left_out`)
        return st

    def trial_docs(self) -> dict[str, dict]:
        """trial_id -> its trial.json as the last `read` found it (config, state, metrics)."""
        return {str(doc.get("trial_id", "")): doc for _, doc in self._trials.values()}

    def _configs(self) -> tuple[list[TrialConfig], dict, tuple[str, float]]:
        try:
            raw = sweep_bytes(self.exp)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no experiment at {self.exp.root} (no sweep.json): "
                "check --storage and --experiment"
            ) from None
        key = hashlib.sha256(raw).hexdigest()
        if self._sweep is None or self._sweep[0] != key:
            sweep = parse_sweep(self.exp, raw)  # SweepError naming it if it is not one
            space = sweep.get("space") or {}
            res = space.get("resources") or {}
            units = (
                ("GPU", float(res["gpu"])) if res.get("gpu") else ("CPU", float(res.get("cpu", 1)))
            )
            configs = sweep_trials(sweep)
            self.ids = [c.trial_id for c in configs]  # a hash of the config: computed once
            self.space = space.get("name")
            self._sweep = (key, configs, space.get("certify") or {}, units)
        return self._sweep[1], self._sweep[2], self._sweep[3]

    def _listing(self, stage: str, st: Status) -> list[tuple[StageFile, float]]:
        out = []
        listed = fileio.list_stats(self.exp.stage_dir(stage), ".parquet", st.links)
        for path, (size, mtime) in listed.items():
            st.size_bytes += size
            parsed = self.exp.parse_stage_file(stage, path, size)
            if parsed is not None:
                out.append((parsed, mtime))
        return out

    def _trial_docs(self, st: Status) -> dict[str, dict]:
        """trial_id -> its trial.json, re-read only when its size or time changed."""
        stats = fileio.list_stats(fileio.join(self.exp.root, "trials"), links=st.links)
        docs = {}
        for path, stat in stats.items():
            st.size_bytes += stat[0]
            if not path.endswith("trial.json"):
                continue
            cached = self._trials.get(path)
            if cached is None or cached[0] != stat:
                try:
                    cached = (stat, parse_status(path, read_raw(path)))
                except OSError:  # being replaced right now: the next read has it
                    continue
                self._trials[path] = cached
            docs[str(cached[1].get("trial_id", ""))] = cached[1]
        return docs

    def _row(self, tid, cfg, docs, grouped, certify, failures, driver, chunks) -> TrialRow:
        doc = docs.get(tid) or {"state": "pending", "epoch": 0}
        plan = chunks.setdefault(cfg.dataset, planned_chunks(certify, cfg.dataset))
        files = {stage: grouped[stage].get(tid, []) for stage in STAGES}
        shards = {
            stage: stage_shards([f for f, _ in files[stage]]).get(tid, Shards()) for stage in STAGES
        }
        settings, pruned = 2 if certify.get("ddrs") else 1, self._pruned.get(tid, set())
        points = (points_done(files["certify"], plan), 0)
        if plan:
            certified = [f for f, _ in files["certify"]]
            shards["certify"], counted = planned_shards(certified, len(plan), settings, pruned)
            points = (points[0], sum(map(len, plan)) * counted)
        metrics = doc.get("metrics") or {}
        row = TrialRow(
            tid,
            "",
            int(doc.get("epoch", 0)),
            cfg.epochs,
            shards,
            summary_of(cfg),
            epoch_time_s=metrics.get("epoch_time_s"),
            updated=doc.get("updated"),
            points=points,
        )
        row.state, row.error = _state(doc, shards["certify"], failures, tid, driver is not None)
        return row

    def _seconds_per_point(self, st: Status) -> float | None:
        """Mean certification seconds per point, from the cache's `time_s` (read again only
        when the cache changes)."""
        path = self.exp.cache_path("certify")
        stats = fileio.list_stats(fileio.join(self.exp.root, "cache"), ".parquet", st.links)
        stat = stats.get(path)
        st.size_bytes += sum(s for s, _ in stats.values())
        if stat is None:
            return None
        if self._timing is None or self._timing[0] != stat:
            self._timing = (stat, _mean_time(path))
        return self._timing[1]


def _mean_time(path: str) -> float | None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, local = fileio.filesystem(path)  # confined: no link followed
    try:
        column = pq.read_table(local, columns=["time_s"], filesystem=fs).column("time_s")
    except (OSError, KeyError, ValueError):
        return None
    mean = pc.mean(column).as_py() if len(column) else None
    return float(mean) if mean is not None and mean > 0 else None


def _state(
    doc: dict, certify: Shards, failures: dict[tuple[str, str], Failure], tid: str, alive: bool
) -> tuple[str, str]:
    """(state, error line) of one trial (see the module's docstring)."""
    state = doc.get("state", "pending")
    if state == "failed":
        failure = failures.get((tid, "train"))
        return "failed", "train: " + (failure.line() if failure else doc.get("error", ""))
    if state == "running":
        return ("training" if alive else "interrupted"), ""
    if state != "finished":
        return "pending", ""
    if certify.total is None or certify.done >= certify.total:
        return "finished", ""
    failure = failures.get((tid, "certify"))
    if failure is not None:
        return "failed", "certify: " + failure.line()
    return ("certifying" if alive else "trained"), ""


def _searched(exp: Experiment, rows: list[TrialRow]) -> SearchAccount | None:
    """The envelope search's account; once it has stopped, a pending trial it never proposed
    is skipped (a run would not train it)."""
    doc = read_search(exp)
    if doc is None:
        return None
    if doc.get("stopped"):
        proposed = {p.get("trial_id") for p in doc.get("proposals", []) if isinstance(p, dict)}
        for row in rows:
            if row.state == "pending" and row.trial_id not in proposed:
                row.state = "skipped"
    trained = {r.trial_id for r in rows if r.state not in ("pending", "skipped", "blocked")}
    return account(exp, trained)


def _block_children(rows: list[TrialRow], configs: list[TrialConfig]) -> None:
    """A pending fine-tune trial whose parent failed will not start: blocked."""
    failed = {r.trial_id for r in rows if r.state == "failed" and r.error.startswith("train")}
    for row, cfg in zip(rows, configs, strict=True):
        if row.state == "pending" and cfg.init_from in failed:
            row.state, row.error = "blocked", f"its parent {cfg.init_from} failed"
