"""The typed search space: a frozen `SweepSpec` and the settings it carries.

A space declares `fixed` hyperparameters, one or more `grids` (each a product of axes, the
sweep being their union), per-trial `resources`, the `certify` settings, the `empirical`
robustness settings (for `sweeper empirical`; both declared in
`trainables.kernel.stage_settings`, which the workers run as they are), which grid points a
run trains (`search`: all, or as the envelope search decides; `sweeper.plan.search_spec`) and
`smoke` overrides for a quick look. An axis
value may be a mapping, to set several fields together (e.g. `{attack: pgd, steps: 1}` vs
`{attack: ddn, steps: 2}`). Reading and validating a YAML file into one is `sweeper.plan.spaces`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sweeper.plan.search_spec import SearchSpec
from trainables.kernel.config import TrialConfig
from trainables.kernel.field_types import type_problems
from trainables.kernel.settings import setting
from trainables.kernel.stage_settings import CertifySpec, EmpiricalSpec

# The stages' settings are the kernel's (`trainables.kernel.stage_settings`); a space holds them.
__all__ = [
    "TRIAL_KEYS",
    "CertifySpec",
    "EmpiricalSpec",
    "Grid",
    "Resources",
    "SearchSpec",
    "SweepSpec",
]

TRIAL_KEYS = frozenset(f.name for f in fields(TrialConfig))


@dataclass(frozen=True)
class Resources:
    """Per-trial (and per-certification-task) resources. Fractions pack trials on a GPU."""

    cpu: float = setting(1.0, "CPUs per trial and per task (fractions pack).")
    gpu: float = setting(0.0, "GPUs per trial and per task (fractions pack trials on a GPU).")

    def problems(self) -> list[str]:
        p = type_problems(self)
        if not p and (self.cpu < 0 or self.gpu < 0 or self.cpu + self.gpu == 0):
            p.append(
                f"cpu and gpu must be >= 0 and not both zero (got cpu={self.cpu}, gpu={self.gpu})"
            )
        return p


@dataclass(frozen=True)
class Grid:
    name: str
    fixed: Mapping[str, Any]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    # A stage that fine-tunes every trial of grid `parent` (which must come earlier): each of
    # its axis combinations is crossed with the parent's trials, copies their `inherit`
    # hyperparameters, and sets init_from to the parent's trial_id.
    parent: str | None = None
    inherit: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    name: str
    description: str
    fixed: Mapping[str, Any]
    grids: tuple[Grid, ...]
    resources: Resources = field(default_factory=Resources)
    certify: CertifySpec = field(default_factory=CertifySpec)
    smoke_fixed: Mapping[str, Any] = field(default_factory=dict)
    smoke_certify: Mapping[str, Any] = field(default_factory=dict)
    empirical: EmpiricalSpec = field(default_factory=EmpiricalSpec)
    search: SearchSpec = field(default_factory=SearchSpec)  # which grid points a run trains

    def smoked(self) -> SweepSpec:
        """The same sweep with the `smoke` overrides: tiny epochs and n for a quick look."""
        return dataclasses.replace(
            self,
            name=f"{self.name}-smoke",
            fixed={**self.fixed, **self.smoke_fixed},
            certify=dataclasses.replace(self.certify, **self.smoke_certify),
            smoke_fixed={},
            smoke_certify={},
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True, default=list)
