"""The settings of the two per-model stages, declared once with `trainables.kernel.settings`:
certification's (`CertifySpec`, a space's `certify` block and `sweeper certify`'s options,
taken as it is by `trainables.certify_points`) and the attack's (`EmpiricalSpec`, a space's
`empirical` block; `EmpiricalSetting`, one resolved (ε, m_test) setting, taken by
`trainables.empirical_points`). Pure Python: the driver plans and names them (`cert_id`,
`emp_id`), the workers run them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.field_types import type_problems
from trainables.kernel.final_points import FINAL_PARTS, FinalPoints, final_id
from trainables.kernel.run_modes import ESTIMATORS, PRECISIONS
from trainables.kernel.settings import (
    AtLeast,
    Between,
    ListOf,
    OneOf,
    Positive,
    Settings,
    bound_problems,
    declared,
    setting,
)

STRATEGIES = ("full", "envelope")  # certification strategies (CertifySpec.strategy)
ENVELOPE_MARK = "_envelope"  # begins the cert_id segment of strategy envelope (`strategy_tag`)


def strategy_of(cert_id: str) -> str:
    """The strategy a cert_id names: `envelope` when it carries `strategy_tag`, else `full`."""
    return "envelope" if ENVELOPE_MARK in cert_id else "full"


DECISION_RADII = tuple(round(0.25 * t, 10) for t in range(10))  # envelope's default: 0:2.25:0.25
ENVELOPE_ONLY = ("delta", "pilots", "radii")  # the settings only strategy envelope reads
# (`radii` is read by the final step too: the radii its candidates are chosen at)

# The DDRS settings as `sweeper certify --ddrs-<part>` says them: their own declarations.
DDRS_PARTS = {f.name: f.metadata["help"] for f in declared(DDRSSettings)}


@dataclass(frozen=True)
class CertifySpec:
    """CERTIFY settings. The paper's: n0=100, n=100,000, α=0.001 on every 20th test image.
    Each is declared once, here (`setting`): YAML, the `sweeper certify` options and their
    --help are read from these lines."""

    n0: int = setting(100, "Samples that select the class.", AtLeast(1))
    n: int = setting(100_000, "Monte-Carlo samples for the bound.", AtLeast(1))
    alpha: float = setting(0.001, "Failure probability.", Between(0, 0.5))
    skip: int = setting(20, "Certify every SKIP-th test point (0, skip, 2·skip, ...).", AtLeast(1))
    max_points: int | None = setting(
        500, "At most this many test points (null: the whole subset).", AtLeast(1)
    )
    sigma: float | None = setting(
        None,
        "Smoothing σ for certification (null: each model's training σ).",
        Positive(),
        flag="--sigma-cert",
    )
    batch_size: int = setting(
        1000, "Noisy samples per forward pass (lower it if a GPU runs out).", AtLeast(1)
    )
    points_per_batch: int | None = setting(
        None,
        "Test points per forward pass (null: enough to fill a batch at n0 samples each).",
        AtLeast(1),
    )
    shard_size: int = setting(50, "Test points per task (and Parquet file).", AtLeast(1))
    # In a space, `ddrs: {}` or true certifies every model a second time with σ_x per point
    # (the paper's OptimizeSigma settings); `sweeper certify --ddrs`.
    ddrs: DDRSSettings | None = setting(
        None,
        "Also certify with data-dependent σ per point (DDRS), then the memory pass.",
        Settings(DDRS_PARTS),
    )
    # How the base classifier is run (trainables.runtime). All three can change the votes, so
    # any non-default value is part of cert_id (see there).
    precision: str = setting(
        "fp32",
        "Numeric precision of the base classifier's forward passes (autocast; fp16 "
        "needs CUDA, bf16 a GPU or CPU with bf16 support). The certificate is of the classifier "
        "as run: deploy it (PREDICT) at the same one.",
        OneOf(PRECISIONS),
    )
    channels_last: bool = setting(
        False, "Run the base classifier in channels-last (NHWC) memory layout."
    )
    compile: bool = setting(
        False,
        "torch.compile the base classifier (runs eagerly, with a warning, where it "
        "cannot compile).",
    )
    # The certification strategy (issue 28; docs/guide/envelope-strategy.md): `full` certifies
    # every model on every point; `envelope` pilots every model and certifies, with exact
    # CERTIFY(n0, n, α), only those that could still reach the envelope.
    strategy: str = setting(
        "full",
        "full: every model on every point; envelope: pilot every model, certify only those "
        "that could still be on the envelope (radii 0:2.25:0.25).",
        OneOf(STRATEGIES),
    )
    delta: float = setting(
        0.01, "envelope: the chance a pruned model would have won, at most.", Between(0, 0.5)
    )
    pilots: tuple[int, ...] | None = setting(
        None,
        "envelope: cumulative pilot draws per stage, each below n (null: 1%, 3%, 10%, 30% of n).",
        ListOf(int, 1, null_ok=True),
    )

    radii: tuple[float, ...] | None = setting(
        None,
        "envelope: the radii the pruning decides at, increasing (null: 0:2.25:0.25).",
        ListOf(float, 0, null_ok=True),
    )

    # The papers' reporting protocol (issue 40; docs/guide/final-step.md): after the selection,
    # re-certify each envelope winner and every model within its confidence interval (at the
    # radii `radii`) on the report points. `sweeper certify --final`, `final: all` in a space.
    final: FinalPoints | None = setting(
        None,
        "Then re-certify each envelope winner, and the models within its confidence interval, "
        "on the report points (every test point unless the parts say otherwise).",
        Settings(FINAL_PARTS),
    )

    def __post_init__(self) -> None:  # YAML and the CLI give a list (or one number)
        for name in ("pilots", "radii"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(self, name, (value,))

    def problems(self) -> list[str]:
        found = type_problems(self) or bound_problems(self)
        if not found and self.final is not None and self.ddrs is not None:
            found.append("final does not take ddrs (certify DDRS without final)")
        if found or self.strategy != "envelope":
            return found
        stages = self.pilot_stages
        if list(stages) != sorted(set(stages)) or stages[-1] >= self.n or stages[0] < 1:
            found.append(f"pilots must increase and stay below n = {self.n} (got {stages})")
        grid = self.decision_radii
        if list(grid) != sorted(set(grid)) or grid[0] < 0:
            found.append(f"radii must increase from 0 or more (got {list(grid)})")
        if self.ddrs is not None:
            found.append("strategy envelope does not take ddrs (certify DDRS with full)")
        return found

    def idle(self, given: Iterable[str]) -> list[str]:
        """Which of the `given` setting names this strategy never reads (the envelope's own
        under `full`): set, they would change nothing, so the planners refuse them."""
        if self.strategy == "envelope":
            return []
        read = ("radii",) if self.final is not None else ()
        return [k for k in ENVELOPE_ONLY if k in given and k not in read]

    @property
    def pilot_stages(self) -> tuple[int, ...]:
        """The envelope strategy's cumulative pilot draws: `pilots`, or 1%, 3%, 10% and 30% of
        n (the paper's n = 100,000: 1,000, 3,000, 10,000, 30,000)."""
        if self.pilots is not None:
            return self.pilots
        return tuple(sorted({max(1, int(self.n * f)) for f in (0.01, 0.03, 0.1, 0.3)}))

    @property
    def decision_radii(self) -> tuple[float, ...]:
        """The envelope strategy's decision grid: `radii`, or 0:2.25:0.25."""
        return self.radii if self.radii is not None else DECISION_RADII

    @property
    def strategy_tag(self) -> str:
        """The cert_id segment of the envelope strategy ("" under full): `_envelope`, then
        `-delta-<δ>` and `-pilots-<a>-<b>…` where they are not the defaults."""
        if self.strategy == "full":
            return ""
        delta = "" if self.delta == 0.01 else f"-delta-{self.delta:g}"
        pilots = "" if self.pilots is None else "-pilots-" + "-".join(map(str, self.pilots))
        default = self.radii is None or tuple(self.radii) == DECISION_RADII
        radii = "" if default else "-radii-" + "-".join(f"{r:g}" for r in self.decision_radii)
        return f"{ENVELOPE_MARK}{delta}{pilots}{radii}"

    @property
    def draws_id(self) -> str:
        """What seeds a model's draws (`certify_points`): the cert_id without the strategy, so
        the `envelope` strategy certifies a point with the draws `full` takes for it."""
        tag = self.strategy_tag
        return self.cert_id[: len(self.cert_id) - len(tag)] if tag else self.cert_id

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
        fixed += "".join(f"_{t}" for t in self.run_tags) + self.strategy_tag
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

    def resolved(self, train_sigma: float) -> CertifySpec:
        """The settings as run on a model trained at `train_sigma`: `sigma` set (null: the
        training σ). What `trainables.certify_points` takes; the files keep the unresolved
        setting's `cert_id`."""
        return self if self.sigma is not None else dataclasses.replace(self, sigma=train_sigma)

    def test_points(self, num_test: int) -> list[int]:
        """The test points certified, of a split of `num_test`: every `skip`-th from 0, at
        most `max_points` (`storage.index_chunks`)."""
        return list(range(0, num_test, self.skip))[: self.max_points]

    @property
    def final_step(self) -> FinalStep | None:
        """The final step's setting (None without `final`): this one's n0, n, α, σ and run
        settings, strategy full, on the report points."""
        if self.final is None:
            return None
        base = dataclasses.replace(self, strategy="full", final=None)
        return FinalStep(
            **{f.name: getattr(base, f.name) for f in declared(CertifySpec)}, report=self.final
        )

    def points(self, available: int) -> int:
        """Test points per forward batch, of `available` left (`points_per_batch`; null:
        batch_size // n0, so the n0 stage fills a batch)."""
        p = self.points_per_batch or max(1, self.batch_size // self.n0)
        return max(1, min(p, available))


@dataclass(frozen=True)
class FinalStep(CertifySpec):
    """The final step's setting: the selection's CertifySpec (strategy full, no `final`)
    certified on the `report` points, under a cert_id of its own (`final_points.final_id`: the
    selection's, then the points' tag), so its rows never pool with the selection's."""

    report: FinalPoints = dataclasses.field(default_factory=FinalPoints)

    @property
    def selection_id(self) -> str:
        """The selection's cert_id without strategy tag: what the final cert_id begins with."""
        selection: str = CertifySpec.cert_id.fget(self)  # type: ignore[attr-defined]
        return selection

    @property
    def cert_id(self) -> str:
        return final_id(self.selection_id, self.report)

    def test_points(self, num_test: int) -> list[int]:
        return self.report.indices(num_test)


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

    epsilons: tuple[float, ...] = setting(
        (0.0, 0.25, 0.5, 1.0, 2.0), "ℓ2 attack radii (0: clean).", ListOf(float, 0)
    )
    m_test: tuple[int, ...] = setting((128,), "Noise draws of the attack.", ListOf(int, 1))
    steps: int = setting(20, "Attack steps (the paper: 20).", AtLeast(1))
    estimator: str = setting(
        "plugin",
        "The attack's gradient: plugin (6) or stein (7, gradient-free).",
        OneOf(ESTIMATORS),
    )
    n: int | None = setting(None, "PREDICT's Monte-Carlo samples.", AtLeast(1))
    alpha: float | None = setting(None, "PREDICT's level.", Between(0, 0.5))
    skip: int | None = setting(None, "Attack every SKIP-th test point.", AtLeast(1))
    max_points: int | str | None = setting(
        None, "At most this many test points (all: the whole subset).", AtLeast(1, all_ok=True)
    )
    shard_size: int | None = setting(None, "Test points per task.", AtLeast(1))
    batch_size: int | None = setting(
        None, "Noisy samples per forward pass, attack and PREDICT.", AtLeast(1)
    )

    def __post_init__(self) -> None:  # YAML and the CLI give lists (or one number)
        for name in ("epsilons", "m_test"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(self, name, (value,))

    def problems(self) -> list[str]:
        return bound_problems(self)  # null: inherited from certify, checked there


@dataclass(frozen=True)
class EmpiricalSetting:
    """One attack setting, fully resolved (no field inherited any more)."""

    epsilon: float
    m_test: int | None  # None when epsilon == 0 (no attack)
    steps: int | None
    estimator: str | None
    n: int
    alpha: float
    skip: int
    max_points: int | None  # None: every skip-th test point
    shard_size: int
    batch_size: int

    @property
    def emp_id(self) -> str:
        """Names the setting in file paths (shard_size and batch_size do not change rows)."""
        mp = "all" if self.max_points is None else self.max_points
        attack = (
            "clean"
            if self.epsilon == 0
            else f"eps-{self.epsilon:g}_m-{self.m_test}_T-{self.steps}_{self.estimator}"
        )
        return f"{attack}_n-{self.n}_alpha-{self.alpha:g}_skip-{self.skip}_max-{mp}"

    @property
    def setting_id(self) -> str:  # what the sharded-stage engine calls it
        return self.emp_id

    def test_points(self, num_test: int) -> list[int]:
        """Every `skip`-th test point, at most `max_points` (the certification's)."""
        return list(range(0, num_test, self.skip))[: self.max_points]
