"""The typed search space: a frozen `SweepSpec` and the settings it carries.

A space declares `fixed` hyperparameters, one or more `grids` (each a product of axes, the
sweep being their union), per-trial `resources`, the `certify` settings, the `empirical`
robustness settings (for `sweeper empirical`) and `smoke` overrides for a quick look. An axis
value may be a mapping, to set several fields together (e.g. `{attack: pgd, steps: 1}` vs
`{attack: ddn, steps: 2}`). Reading and validating a YAML file into one is `sweeper.plan.spaces`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sweeper.plan.run_settings import PRECISIONS
from trainables.config import DDRSSettings, TrialConfig, type_problems

TRIAL_KEYS = frozenset(f.name for f in fields(TrialConfig))


@dataclass(frozen=True)
class Resources:
    """Per-trial (and per-certification-task) resources. Fractions pack trials on a GPU."""

    cpu: float = 1.0
    gpu: float = 0.0

    def problems(self) -> list[str]:
        p = type_problems(self)
        if not p and (self.cpu < 0 or self.gpu < 0 or self.cpu + self.gpu == 0):
            p.append(
                f"cpu and gpu must be >= 0 and not both zero (got cpu={self.cpu}, gpu={self.gpu})"
            )
        return p


@dataclass(frozen=True)
class CertifySpec:
    """CERTIFY settings. The paper's: n0=100, n=100,000, α=0.001 on every 20th test image."""

    n0: int = 100
    n: int = 100_000
    alpha: float = 0.001
    skip: int = 20  # certify test points 0, skip, 2·skip, ...
    max_points: int | None = 500  # at most this many points (None: the whole subset)
    sigma: float | None = None  # σ_cert; None: each model's training σ
    batch_size: int = 1000  # noisy samples per forward pass (lower it if a GPU runs out)
    points_per_batch: int | None = None  # None: enough points to fill a batch at n0 samples each
    shard_size: int = 50  # test points per certification task (and Parquet file)
    # Data-dependent smoothing (DDRS): in a space, certify every model a second time with σ_x
    # per point ({} or true: the paper's OptimizeSigma settings); `sweeper certify --ddrs`.
    ddrs: DDRSSettings | None = None
    # How the base classifier is run (trainables.runtime). Each is declared with its type,
    # default, allowed values and help (the CLI reads the help from here); all three can change
    # the votes, so any non-default value is part of cert_id (see there).
    precision: str = field(default="fp32", metadata={
        "choices": PRECISIONS,
        "help": "Numeric precision of the base classifier's forward passes: fp32, bf16 or fp16 "
                "(autocast; fp16 needs CUDA, bf16 a GPU or CPU with bf16 support). The "
                "certificate is of the classifier as run: deploy it (PREDICT) at the same one.",
    })  # fmt: skip
    channels_last: bool = field(default=False, metadata={
        "help": "Run the base classifier in channels-last (NHWC) memory layout.",
    })  # fmt: skip
    compile: bool = field(default=False, metadata={
        "help": "torch.compile the base classifier (runs eagerly, with a warning, where it "
                "cannot compile).",
    })  # fmt: skip

    def problems(self) -> list[str]:
        p = type_problems(self)
        if p:
            return p
        p += stage_problems(self)
        for name in ("n0", "points_per_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                p.append(f"{name} must be an integer >= 1 (got {getattr(self, name)})")
        if self.sigma is not None and not self.sigma > 0:
            p.append(f"sigma must be > 0 (got {self.sigma})")
        if self.ddrs is not None:
            p += [f"ddrs.{q}" for q in self.ddrs.problems()]
        if self.precision not in PRECISIONS:
            p.append(f"unknown precision {self.precision!r} (valid: {', '.join(PRECISIONS)})")
        return p

    @property
    def cert_id(self) -> str:
        """Names the settings in file paths; new settings give new files, old rows stay.

        The defaults (fp32, NCHW, eager) add nothing, so every id written before these settings
        existed still names its files. Otherwise `_prec-<p>`, `_cl` and `_compiled` are added,
        because each can change the votes: a certificate is of the base classifier as it was
        run, and rows of different runs must not pool. bf16/fp16 obviously; channels_last and
        compile too: measured on this project's AVX2 CPU (oneDNN), both give logits that differ
        from NCHW eager ones in the last bits, so a vote near a decision boundary can flip."""
        sigma = "train" if self.sigma is None else f"{self.sigma:g}"
        mp = "all" if self.max_points is None else self.max_points
        fixed = (
            f"sigma-{sigma}_n0-{self.n0}_n-{self.n}_alpha-{self.alpha:g}_skip-{self.skip}_max-{mp}"
        )
        fixed += "".join(f"_{t}" for t in self.run_tags)
        return fixed if self.ddrs is None else f"{fixed}_{self.ddrs.tag}"

    @property
    def run_tags(self) -> tuple[str, ...]:
        """The cert_id segments of the non-default run settings (none at the defaults)."""
        tags = () if self.precision == "fp32" else (f"prec-{self.precision}",)
        return tags + ("cl",) * self.channels_last + ("compiled",) * self.compile

    @property
    def setting_id(self) -> str:  # what the sharded-stage engine calls it
        return self.cert_id

    def variants(self) -> list[CertifySpec]:
        """The settings a run certifies with: fixed σ, and data-dependent σ too if `ddrs`."""
        fixed = dataclasses.replace(self, ddrs=None)
        return [fixed] if self.ddrs is None else [fixed, self]


ESTIMATORS = ("plugin", "stein")  # = trainables.empirical.ESTIMATORS (spec stays torch-free)


@dataclass(frozen=True)
class EmpiricalSpec:
    """Empirical robustness (`sweeper empirical`, SmoothAdv section 4.2): SmoothAdv-PGD with
    `steps` steps at each ℓ2 radius ε of `epsilons` and each m_test, then PREDICT (n, α).

    Defaults: ε ∈ {0, 0.25, 0.5, 1, 2} (ε = 0 is no attack, run once: the clean smoothed
    accuracy); m_test = 128 and 20 steps, the paper's Fig. 1 attack (its Fig. 3 sweeps m_test
    over 1, 4, 8, 16, 64, 128; every (ε, m_test) costs one PREDICT pass per point); the
    plug-in estimator (6) ("stein": the gradient-free (7), weaker, appendix C.6). n, alpha,
    skip, max_points, shard_size and batch_size left null follow the `certify` block, so the
    empirical and certified accuracies use the same points, n and α (paper: 1e5, 0.001);
    max_points "all" attacks the whole subset."""

    epsilons: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)
    m_test: tuple[int, ...] = (128,)
    steps: int = 20
    estimator: str = "plugin"
    n: int | None = None
    alpha: float | None = None
    skip: int | None = None
    max_points: int | str | None = None
    shard_size: int | None = None
    batch_size: int | None = None  # noisy samples per forward pass, attack and PREDICT

    def __post_init__(self) -> None:  # YAML and the CLI give lists (or one number)
        for name in ("epsilons", "m_test"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(self, name, (value,))

    def problems(self) -> list[str]:
        p = _values_problems("epsilons", self.epsilons, float, 0, "a number >= 0")
        p += _values_problems("m_test", self.m_test, int, 1, "an integer >= 1")
        if not _int_at_least(self.steps, 1):
            p.append(f"steps must be an integer >= 1 (got {self.steps!r})")
        p += stage_problems(self)  # null: inherited from certify, checked there
        if self.estimator not in ESTIMATORS:
            p.append(f"unknown estimator {self.estimator!r} (valid: {', '.join(ESTIMATORS)})")
        return p


def stage_problems(settings: Any) -> list[str]:
    """The settings every sharded stage has (certification, the empirical attack), checked by
    one rule each: n, skip, shard_size, batch_size integers >= 1; max_points an integer >= 1
    (or "all"/null); alpha in (0, 0.5), a failure probability. A null value is not checked
    (the empirical block inherits it from certify)."""
    p = []
    for name in ("n", "skip", "shard_size", "batch_size"):
        value = getattr(settings, name)
        if value is not None and not _int_at_least(value, 1):
            p.append(f"{name} must be an integer >= 1 (got {value!r})")
    mp = settings.max_points
    if not (mp is None or mp == "all" or _int_at_least(mp, 1)):
        p.append(f"max_points must be an integer >= 1, all or null (got {mp!r})")
    a = settings.alpha
    if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a < 0.5):
        p.append(f"alpha must be a number in (0, 0.5) (got {a!r})")
    return p


def _int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _values_problems(name: str, values: Any, kind: type, low: float, what: str) -> list[str]:
    if not isinstance(values, tuple) or not values:
        return [f"{name} must be a non-empty list (got {values!r})"]
    kinds = (int, float) if kind is float else (int,)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, kinds) or not v >= low]
    return [f"{name}: every value must be {what} (got {v!r})" for v in bad]


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
