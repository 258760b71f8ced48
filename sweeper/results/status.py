"""What an experiment holds: trials by state, each stage's shards done of planned, the driver,
size. Read from sweep.json, every trial.json and one listing per stage: no row is read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sweeper.results.lease import Holder, read_holder
from sweeper.results.storage import STAGES, Experiment, StageFile, index_chunks, read_sweep
from trainables import fileio
from trainables.catalog import STANDARD_TEST_SIZE
from trainables.config import TrialConfig
from trainables.trial_status import read_status


@dataclass(frozen=True)
class Shards:
    """A stage's shards of one trial (all its settings): written, and planned."""

    done: int = 0
    total: int | None = None  # None: not known (nothing planned or written yet)

    def __add__(self, other: Shards) -> Shards:
        known = [t for t in (self.total, other.total) if t is not None]
        return Shards(self.done + other.done, sum(known) if known else None)


@dataclass
class TrialRow:
    trial_id: str
    state: str  # pending | running | interrupted (no driver) | finished | failed
    epoch: int
    epochs: int
    shards: dict[str, Shards]  # stage -> its shards
    summary: str
    error: str = ""

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
    extra_models: int = 0  # certified models not in sweep.json (e.g. imported)
    size_bytes: int = 0
    driver: Holder | None = None  # the driver holding the experiment's lease, if it is alive

    def counts(self) -> Counter:
        return Counter(t.state for t in self.trials)


def _summary(cfg: TrialConfig) -> str:
    parts = [cfg.method, cfg.attack, f"σ={cfg.sigma:g}"]
    if cfg.epsilon is not None:
        parts += [f"ε={cfg.epsilon:g}", f"T={cfg.steps}"]
    if cfg.m_train is not None:
        parts.append(f"m={cfg.m_train}")
    return " ".join(p for p in parts if p)


def experiment_status(exp: Experiment) -> Status:
    """Read sweep.json, every trial.json and the stages' file names (no Parquet is opened)."""
    sweep = read_sweep(exp)
    if sweep is None:
        raise FileNotFoundError(
            f"no experiment at {exp.root} (no sweep.json): check --storage and --experiment"
        )
    written = {stage: stage_shards(exp.stage_files(stage)) for stage in STAGES}
    holder = read_holder(exp)
    driver = holder if holder is not None and holder.alive() else None
    status = Status(exp.name, exp.root, size_bytes=fileio.total_size(exp.root), driver=driver)
    certify = (sweep.get("space") or {}).get("certify") or {}
    for d in sweep["trials"]:
        cfg = TrialConfig.from_dict(d)
        tid = cfg.trial_id  # a hash of the config: computed once
        st = read_status(exp.trial_dir(tid)) or {"state": "pending", "epoch": 0}
        if st["state"] == "running" and driver is None:  # its driver ended or died
            st = {**st, "state": "interrupted"}
        shards = {stage: written[stage].get(tid, Shards()) for stage in STAGES}
        if shards["certify"].total is None:
            shards["certify"] = Shards(0, planned_shards(certify, cfg))
        status.trials.append(TrialRow(tid, st["state"], st["epoch"], cfg.epochs,
                                      shards, _summary(cfg), st.get("error", "")))  # fmt: skip
    planned = {t.trial_id for t in status.trials}
    status.extra_models = len(set(written["certify"]) - planned)
    return status


def stage_shards(files: list[StageFile]) -> dict[str, Shards]:
    """trial_id -> its shards done and planned, over every setting, from file names alone (a
    compacted model has all of its shards done; leftover shards beside it do not count)."""
    compacted = {f.model: f.count or 0 for f in files if f.kind == "compacted"}
    per_model = {m: Shards(k, k) for m, k in compacted.items()}
    for f in files:
        if f.kind == "shard" and f.model not in compacted:
            seen = per_model.get(f.model, Shards(0, f.count))
            per_model[f.model] = Shards(seen.done + 1, f.count)
    out: dict[str, Shards] = {}
    for (trial_id, _), shards in per_model.items():
        out[trial_id] = out.get(trial_id, Shards(0, 0)) + shards
    return out


def planned_shards(certify: dict, cfg: TrialConfig) -> int | None:
    """Certification shards a finished trial will have under the sweep's settings (fixed σ,
    and DDRS too if asked), for the data set's standard test split."""
    size = STANDARD_TEST_SIZE.get(cfg.dataset)  # a miniature data set in tests has fewer
    if size is None or not certify:
        return None
    chunks = index_chunks(size, certify["skip"], certify["max_points"], certify["shard_size"])
    return len(chunks) * (2 if certify.get("ddrs") else 1)
