"""DDRS's settings (Alfarra et al. 2022, data-dependent randomized smoothing): its training
part of `TrialConfig` (`DDRSPart`) and its certification settings (`DDRSSettings`, no part
of a trial). Pure Python, as the rest of the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainables.kernel.config_parts import bounded
from trainables.kernel.settings import (
    AtLeast,
    OneOf,
    Positive,
    bound_problems,
    declared,
    setting,
)
from trainables.methods import DDRS_METHODS, METHODS, REGISTRY, OnDataset

DDRS_FIELDS = (
    "ddrs_start_epoch",
    "ddrs_iterations",
    "ddrs_lr",
    "ddrs_samples",
    "ddrs_macer_loss",
    "ddrs_noise_pairing",
)
# MACER's robustness term under DDRS (`methods.macer`): the DDRS script's (default) or MACER's.
DDRS_MACER_LOSSES = ("ddrs", "macer")
# Which σ_x each of MACER's noise copies takes under DDRS (`methods.macer.copy_sigmas`): as the
# DDRS script pairs them (default; train_macer.py l. 163-166) or each input's own.
DDRS_NOISE_PAIRINGS = ("reference", "own")
# Unused at K = 0 (no σ step: every σ_x stays σ), so no part of such a trial's id.
_ASCENT_ONLY = ("ddrs_lr", "ddrs_samples", "ddrs_noise_pairing")


@dataclass(frozen=True)
class DDRSPart:
    """DDRS training (Alfarra et al. 2022, Algorithm 2): from epoch `ddrs_start_epoch` on, each
    training input x trains with its own σ_x, found by OptimizeSigma (K = ddrs_iterations steps
    of rate ddrs_lr, ddrs_samples draws) from its previous visit's σ_x (cfg.sigma at first).
    Off (None): every ddrs_* field None (no part of the trial_id). The defaults of the fields
    left unset are the method's, its DDRS script's (`trainables.methods.REGISTRY`, each row's
    `ddrs`): K = 10 for gaussian and macer, about 10 extra forward-backward passes per chunk
    (the paper's 100 is certification's), K = 0 for smoothadv; lr 1e-4; n = 64 for MACER on
    CIFAR-10, else 1. At K = 0 no σ moves in training: every start epoch trains the same model,
    so the start resolves to 0 and lr, n and the noise pairing are unused (None)."""

    ddrs_start_epoch: int | None = setting(
        None,
        "DDRS training from this 0-based epoch on (null: off); with ddrs_iterations 0 every "
        "start trains alike and resolves to 0.",
        AtLeast(0),
    )
    ddrs_iterations: int | None = setting(
        None,
        "σ-ascent steps K per visit of a training input (the method's DDRS script's: gaussian "
        "and macer 10, smoothadv 0: σ_x stays σ).",
        AtLeast(0),
    )
    ddrs_lr: float | None = setting(None, "σ-ascent step size (1e-4).", Positive())
    ddrs_samples: int | None = setting(
        None, "Noise draws per σ-ascent step (macer on cifar10 64, else 1).", AtLeast(1)
    )
    ddrs_macer_loss: str | None = setting(
        None,
        "DDRS-trained MACER's robustness term: the DDRS script's (ddrs) or MACER's at σ_x.",
        OneOf(DDRS_MACER_LOSSES),
    )
    ddrs_noise_pairing: str | None = setting(
        None,
        "DDRS-trained MACER: which σ_x each noise copy takes: the DDRS script's pairing "
        "(reference: copy j of input i gets the σ of input (i·k + j) mod b) or its own input's.",
        OneOf(DDRS_NOISE_PAIRINGS),
    )

    def ddrs_resolved(
        self, method: str | None = None, dataset: str | None = None
    ) -> dict[str, Any]:
        """Off: every field None; on: the defaults of `method`'s row for the fields it uses
        left unset (on `dataset`), None for those it does not use."""
        if self.ddrs_start_epoch is None:
            return dict.fromkeys(DDRS_FIELDS)
        row = REGISTRY.get(method or "")
        if row is None or not row.ddrs:  # an unknown or unsupported method: said by the checks
            return {}
        changes: dict[str, Any] = {}
        for name in DDRS_FIELDS[1:]:
            if name not in row.ddrs:
                changes[name] = None
            elif getattr(self, name) is None:
                value = row.ddrs[name]
                changes[name] = value.of(dataset) if isinstance(value, OnDataset) else value
        return changes

    def ddrs_unused(self) -> dict[str, Any]:
        """After validation, DDRS on with K = 0: the start 0, the σ ascent's settings None."""
        if self.ddrs_start_epoch is None or self.ddrs_iterations != 0:
            return {}
        return {"ddrs_start_epoch": 0, **dict.fromkeys(_ASCENT_ONLY)}

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
            return p
        row = REGISTRY.get(method)
        used = tuple(n for n in DDRS_FIELDS[1:] if row is not None and n in row.ddrs)
        return p + (bounded(DDRSPart, self, None, used) if used else [])


@dataclass(frozen=True)
class DDRSSettings:
    """DDRS at certification (`certify --ddrs`, a space's `certify.ddrs`; no TrialConfig part):
    OptimizeSigma's settings, the paper's defaults (K = 100 steps of lr 1e-4, n = 1); each
    part's help is `sweeper certify --ddrs-<part>`'s."""

    iterations: int = setting(100, "OptimizeSigma ascent steps K.", AtLeast(1))
    lr: float = setting(1e-4, "OptimizeSigma step size.", Positive())
    samples: int = setting(1, "Noise draws per OptimizeSigma step.", AtLeast(1))
    min_sigma: float = setting(1e-3, "The smallest σ_x OptimizeSigma may reach.", Positive())

    def problems(self) -> list[str]:
        """Every part outside its declared bounds (null is no value of any: it has a default)."""
        unset = [f.name for f in declared(DDRSSettings) if getattr(self, f.name) is None]
        return [f"{name} must be set (got None)" for name in unset] + bound_problems(self)
