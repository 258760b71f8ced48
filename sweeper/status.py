"""What an experiment holds: trials by state, certification shards done and missing, size."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sweeper.lease import Holder, read_holder
from sweeper.results import missing_shards, shard_files
from sweeper.storage import Experiment, read_sweep
from trainables import fileio
from trainables.config import TrialConfig
from trainables.trial_status import read_status


@dataclass
class TrialRow:
    trial_id: str
    state: str  # pending | running | interrupted (no driver) | finished | failed
    epoch: int
    epochs: int
    shards_done: int
    shards_expected: int | None  # None: no shard written yet, count unknown
    summary: str
    error: str = ""


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
    """Read sweep.json, every trial.json and the shard file names (no Parquet is opened)."""
    sweep = read_sweep(exp)
    if sweep is None:
        raise FileNotFoundError(
            f"no experiment at {exp.root} (no sweep.json): check --storage and --experiment"
        )
    files = shard_files(exp)
    per_trial = Counter(f.replace("\\", "/").split("/")[-3] for f in files)
    missing = missing_shards(files)
    holder = read_holder(exp)
    driver = holder if holder is not None and holder.alive() else None
    status = Status(exp.name, exp.root, size_bytes=fileio.total_size(exp.root), driver=driver)
    planned = set()
    for d in sweep["trials"]:
        cfg = TrialConfig.from_dict(d)
        planned.add(cfg.trial_id)
        st = read_status(exp.trial_dir(cfg.trial_id)) or {"state": "pending", "epoch": 0}
        if st["state"] == "running" and driver is None:  # its driver ended or died
            st = {**st, "state": "interrupted"}
        done = per_trial.get(cfg.trial_id, 0)
        gaps = sum(len(v) for (tid, _), v in missing.items() if tid == cfg.trial_id)
        status.trials.append(
            TrialRow(
                cfg.trial_id,
                st["state"],
                st["epoch"],
                cfg.epochs,
                done,
                done + gaps if done else None,
                _summary(cfg),
                st.get("error", ""),
            )
        )
    status.extra_models = len(set(per_trial) - planned)
    return status
