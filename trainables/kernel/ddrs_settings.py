"""DDRS's settings (Alfarra et al. 2022, data-dependent randomized smoothing): its training
part of `TrialConfig` (`DDRSPart`) and its certification settings (`DDRSSettings`, no part
of a trial). Pure Python, as the rest of the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainables.kernel.config_parts import choice
from trainables.kernel.settings import setting
from trainables.methods import DDRS_METHODS, METHODS

DDRS_FIELDS = ("ddrs_start_epoch", "ddrs_iterations", "ddrs_lr", "ddrs_samples", "ddrs_macer_loss")
DDRS_DEFAULTS: dict[str, Any] = {"ddrs_iterations": 10, "ddrs_lr": 1e-4, "ddrs_samples": 1}
# Where a DDRS script's default differs, per (method, dataset): the CIFAR-10 MACER script
# draws 64 noises per σ step (Data_Dependent_Randomized_Smoothing CIFAR10/train_macer.py l. 71).
DDRS_SCRIPT_DEFAULTS: dict[tuple[str | None, str | None], dict[str, Any]] = {
    ("macer", "cifar10"): {"ddrs_samples": 64}
}
# MACER's robustness term under DDRS (`methods.macer`): the DDRS script's (default) or MACER's.
DDRS_MACER_LOSSES = ("ddrs", "macer")


@dataclass(frozen=True)
class DDRSPart:
    """DDRS training (Alfarra et al. 2022, Algorithm 2): from epoch `ddrs_start_epoch` on, each
    training input x trains with its own σ_x, found by OptimizeSigma (K = ddrs_iterations steps
    of rate ddrs_lr, ddrs_samples draws) from its previous visit's σ_x (cfg.sigma at first).
    Off (None): every ddrs_* field None (no part of the trial_id). Defaults: the paper's lr
    1e-4; K = 10 per visit (the authors' CIFAR-10 MACER script; their ImageNet one uses 1, the
    paper's 100 is certification's), about 10 extra forward-backward passes per chunk; n as
    each script draws: 64 for MACER on CIFAR-10 (train_macer.py `--gaussian_num_ds`), else 1."""

    ddrs_start_epoch: int | None = None  # 0-based epoch from which σ_x is optimized
    ddrs_iterations: int | None = None  # OptimizeSigma steps K per visit (10)
    ddrs_lr: float | None = None  # OptimizeSigma step size α (1e-4)
    ddrs_samples: int | None = None  # noise draws n per OptimizeSigma step (1; CIFAR-10 MACER 64)
    ddrs_macer_loss: str | None = None  # method macer: DDRS_MACER_LOSSES ("ddrs"); else None

    def ddrs_resolved(
        self, method: str | None = None, dataset: str | None = None
    ) -> dict[str, Any]:
        """Off: every field None; on: the defaults of the fields left unset (`method`'s on
        `dataset`)."""
        if self.ddrs_start_epoch is None:
            return dict.fromkeys(DDRS_FIELDS)
        defaults = {**DDRS_DEFAULTS, **DDRS_SCRIPT_DEFAULTS.get((method, dataset), {})}
        resolved = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        if method != "macer":
            return {**resolved, "ddrs_macer_loss": None}
        return {**resolved, "ddrs_macer_loss": self.ddrs_macer_loss or "ddrs"}

    def ddrs_problems(self, epochs: int, method: str) -> list[str]:
        """Checked only when it is on; `epochs`, `method`: the trial's."""
        start = self.ddrs_start_epoch
        if start is None:
            return []
        p: list[str] = []
        if not 0 <= start < epochs:
            p.append(
                f"ddrs_start_epoch must be in [0, epochs) = [0, {epochs}) or null (got {start})"
            )
        if method in METHODS and method not in DDRS_METHODS:
            p.append(
                f"ddrs_start_epoch: DDRS training supports methods {', '.join(DDRS_METHODS)} "
                f"(got method {method!r}); set ddrs_start_epoch to null"
            )
        for name in ("ddrs_iterations", "ddrs_samples"):
            value = getattr(self, name)
            if value is None or value < 1:
                p.append(f"{name} must be >= 1 when ddrs_start_epoch is set (got {value})")
        if self.ddrs_lr is None or not self.ddrs_lr > 0:
            p.append(f"ddrs_lr must be > 0 when ddrs_start_epoch is set (got {self.ddrs_lr})")
        if method == "macer":
            p += choice("ddrs_macer_loss", self.ddrs_macer_loss, DDRS_MACER_LOSSES)
        return p


@dataclass(frozen=True)
class DDRSSettings:
    """DDRS at certification (`certify --ddrs`, a space's `certify.ddrs`; no TrialConfig part):
    OptimizeSigma's settings, the paper's defaults (K = 100 steps of lr 1e-4, n = 1); each
    part's help is `sweeper certify --ddrs-<part>`'s."""

    iterations: int = setting(100, "OptimizeSigma ascent steps K.")
    lr: float = setting(1e-4, "OptimizeSigma step size.")
    samples: int = setting(1, "Noise draws per OptimizeSigma step.")
    min_sigma: float = setting(1e-3, "The smallest σ_x OptimizeSigma may reach.")

    def problems(self) -> list[str]:
        p = []
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            p.append(f"iterations must be an integer >= 1 (got {self.iterations!r})")
        if not (isinstance(self.samples, int) and self.samples >= 1):
            p.append(f"samples must be an integer >= 1 (got {self.samples!r})")
        for name in ("lr", "min_sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                p.append(f"{name} must be a number > 0 (got {value!r})")
        return p

    @property
    def tag(self) -> str:
        return f"ddrs-K{self.iterations}-lr{self.lr:g}-n{self.samples}-min{self.min_sigma:g}"
