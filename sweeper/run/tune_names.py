"""Names of Ray Tune's trials and of their folders under `<experiment>/tune/run-*/`: sweeper's
trial id and the trial's config in words, instead of Ray's own id (`run_trial_0a8d90ec_3_...`),
so a folder of Tune's logs (progress.csv, result.json, error.txt) says which trial it is."""

from __future__ import annotations

import re
from typing import Any

from trainables.kernel.config import TrialConfig

MAX_DIRNAME = 96  # characters: well inside every file system's limit on one name


def _config(trial: Any) -> TrialConfig:
    return TrialConfig.from_dict(trial.config["trial"])


def readable(cfg: TrialConfig) -> str:
    """`smoothadv_pgd_sigma=0.25_eps=0.5_T=2_m=1`: the settings that tell a grid's trials apart
    (method, attack, σ, ε, steps, m_train, the other methods' own settings when set)."""
    parts = [cfg.method, cfg.attack or "", f"sigma={cfg.sigma:g}"]
    named = (
        ("eps", cfg.epsilon),
        ("T", cfg.steps),
        ("m", cfg.m_train),
        ("lam", cfg.lam),
        ("eta", cfg.eta),
        ("beta", cfg.macer_beta),
    )
    parts += [f"{key}={value:g}" for key, value in named if value is not None]
    parts += [f"from={cfg.init_from}"] if cfg.init_from else []
    return re.sub(r"[^A-Za-z0-9.=_-]+", "-", "_".join(p for p in parts if p))


def trial_name(trial: Any) -> str:
    """Tune's name of a trial (its logs, its errors): sweeper's trial id."""
    return _config(trial).trial_id


def trial_dirname(trial: Any) -> str:
    """Tune's folder of a trial: `<trial_id>_<readable config>`, at most MAX_DIRNAME characters
    (Tune adds a suffix if a folder of that name exists)."""
    cfg = _config(trial)
    return f"{cfg.trial_id}_{readable(cfg)}"[:MAX_DIRNAME]
