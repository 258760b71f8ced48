"""What Ray Tune holds of a trial: the one crossing of the Ray boundary on the driver
(`TuneTrials.hand`: a `TrialConfig` as the dict Tune carries to `trainables.tune_trial`, whose
first line reads it back), and Tune's names of trials and of their folders under
`<experiment>/tune/run-*/`: sweeper's trial id and the trial's config in words, instead of
Ray's own id (`run_trial_0a8d90ec_3_...`), so a folder of Tune's logs (progress.csv,
result.json, error.txt) says which trial it is. The driver never reads Tune's copy of the dict
back: its callbacks and names take the `TrialConfig` it handed over (`TuneTrials.of`)."""

from __future__ import annotations

import re
from typing import Any

from trainables.kernel.config import TrialConfig

MAX_DIRNAME = 96  # characters: well inside every file system's limit on one name


class TuneTrials:
    """The trials handed to Tune, by Tune's trial id; `constants`: what every trial's Tune
    config carries besides the trial (the CPUs per trial, the test hook)."""

    def __init__(self, constants: dict[str, Any]):
        self.constants = constants
        self.configs: dict[str, TrialConfig] = {}

    def hand(self, tune_id: str, cfg: TrialConfig) -> dict[str, Any]:
        """`cfg` as the config of Tune's trial `tune_id` (a searcher's suggestion)."""
        self.configs[tune_id] = cfg
        return {**self.constants, "trial": cfg.to_dict()}

    def of(self, trial: Any) -> TrialConfig:
        """The `TrialConfig` handed over as Tune's `trial`."""
        return self.configs[trial.trial_id]

    def name(self, trial: Any) -> str:
        """Tune's name of a trial (its logs, its errors): sweeper's trial id."""
        return self.of(trial).trial_id

    def dirname(self, trial: Any) -> str:
        """Tune's folder of a trial: `<trial_id>_<readable config>`, at most MAX_DIRNAME
        characters (Tune adds a suffix if a folder of that name exists)."""
        cfg = self.of(trial)
        return f"{cfg.trial_id}_{readable(cfg)}"[:MAX_DIRNAME]

    def __deepcopy__(self, memo: dict) -> TuneTrials:
        # Tune deep-copies its experiment's spec, these names' creators among it, for each
        # trial it makes (after the searcher has handed the trial over here): the copy must be
        # this live record, not a snapshot of it.
        return self

    def __getstate__(self) -> dict:
        # Tune pickles its run's configuration into its state on disk; the trials stay in
        # this process (resuming reads the storage, not Tune's state).
        return {"constants": self.constants, "configs": {}}


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
