"""What a sweep will cost: device-hours of training and of certification, per trial, per group
of alike trials and in total, from throughput figures (`sweeper.plan.throughput`), before anything
runs. Pure Python: no torch, no Ray, no data (data set sizes are known constants).

Work is counted in samples through the base classifier, as the training methods
(`trainables.methods`) and CERTIFY do it:
- a training epoch pushes every training input through `step_passes` forward+backward passes
  (noisy copies, attack steps, SmoothMix's mixed copies, ...), plus DDRS's σ-ascent steps and
  self-training's pseudo-labelled batches, and evaluates the test subset clean and noisy (two
  forwards per input);
- CERTIFY costs n0 + n forwards per certified point (and, for data-dependent σ, K·samples
  forward+backward passes of OptimizeSigma).
Forward+backward passes are priced at the training-step rate (attack steps skip the weight
gradients and the update, so they are priced a little high), forwards at the forward rate.
Data loading, checkpointing and Python overheads are not priced.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sweeper.plan.spec import CertifySpec, Resources
from sweeper.plan.throughput import Figure
from trainables.kernel.catalog import DATASETS
from trainables.kernel.config import TrialConfig, required
from trainables.methods import EPSILON_METHODS, REGISTRY

# Inputs per split as the project's loaders make them: CIFAR-10 50,000/10,000; ImageNet (and
# ImageNet32) 1,281,167 train and the 50,000 validation images; MNIST 60,000/10,000; digits:
# scikit-learn's 1,797 split 75/25 stratified (trainables.datasets) into 1,347/450.
TRAIN_SIZE = {
    "cifar10": 50_000,
    "imagenet": 1_281_167,
    "mnist": 60_000,
    "digits": 1_347,
    "imagenet32": 1_281_167,
}
TEST_SIZE = {
    "cifar10": 10_000,
    "imagenet": 50_000,
    "mnist": 10_000,
    "digits": 450,
    "imagenet32": 50_000,
}
assert set(TRAIN_SIZE) == set(TEST_SIZE) == set(DATASETS), "a data set without its sizes"


def step_passes(cfg: TrialConfig, attacked: bool = True) -> int:
    """Forward+backward passes per training input in one epoch (`attacked`: ε > 0 that epoch),
    as the method's row says (`trainables.methods.Method.passes`)."""
    t = cfg.steps or 0
    t = t if attacked or cfg.method not in EPSILON_METHODS else 0
    return REGISTRY[cfg.method].passes(cfg.m_train or 1, t)


def attack_epochs(cfg: TrialConfig) -> int:
    """Epochs whose ε is > 0: none for ε = 0; every epoch under the reference warm-up (ε/W in
    the first); all but the first under the paper's (0 in the first epoch; see
    `trainables.methods.base.warmup_factor`)."""
    if cfg.method not in EPSILON_METHODS or not cfg.epsilon:
        return 0
    paper = cfg.warmup_schedule == "paper" and (cfg.warmup_epochs or 0) > 1
    return cfg.epochs - (1 if paper else 0)


def train_inputs(cfg: TrialConfig) -> int:
    size = TRAIN_SIZE[cfg.dataset]
    return size if cfg.train_subset is None else min(size, cfg.train_subset)


def training_work(cfg: TrialConfig) -> tuple[float, float]:
    """(forward+backward passes, forwards) of training one trial to cfg.epochs."""
    attacked = attack_epochs(cfg)
    per_input = attacked * step_passes(cfg, True) + (cfg.epochs - attacked) * step_passes(
        cfg, False
    )
    if cfg.ddrs_iterations:  # OptimizeSigma before every chunk's step (none at K = 0)
        steps = cfg.ddrs_iterations * required(cfg.ddrs_samples, "ddrs_samples")
        per_input += (cfg.epochs - required(cfg.ddrs_start_epoch, "ddrs_start_epoch")) * steps
    passes = per_input * train_inputs(cfg) * (1 + (cfg.pseudo_ratio or 0))
    test = TEST_SIZE[cfg.dataset]
    evaluated = test if cfg.eval_subset is None else min(test, cfg.eval_subset)
    return float(passes), float(2 * evaluated * cfg.epochs)


def certified_points(dataset: str, spec: CertifySpec) -> int:
    """Every `skip`-th test point, at most `max_points` (`storage.index_chunks`); a final
    step's report points (`FinalStep.test_points`)."""
    return len(spec.test_points(TEST_SIZE[dataset]))


# The dry run's assumption for the `envelope` strategy (issue 28): the share of models
# certified fully (n draws after every pilot stage) is not known before the pilots; 0.02 is
# what the SmoothAdv benchmark's 26.8x fewer forward passes implies (its probes, partial
# certifications and completions counted as that share of full ones), where pilots resolve a
# point's radius level (n = 100,000). Where they cannot, the share is larger: the dry run's
# `shares` per σ (`sweeper.run.envelope_outlook`). The pilot is priced on every point
# (a ceiling: only points whose selected class is their label are drawn).
ENVELOPE_FULL_SHARE = 0.02
Shares = Mapping[float, float]  # certification σ -> share of its models certified fully


def envelope_point_forwards(spec: CertifySpec, full_share: float = ENVELOPE_FULL_SHARE) -> float:
    """Forwards per point under `envelope`, estimated: the n0 selection and the first pilot
    on every model, the later pilot stages and the n draws on `full_share` of them."""
    stages = spec.pilot_stages
    return spec.n0 + stages[0] + full_share * (stages[-1] - stages[0] + spec.n)


def strategy_certify_hours(
    trials: list[TrialConfig],
    spec: CertifySpec,
    figures: dict[str, Figure],
    shares: Shares | None = None,
) -> dict[str, float]:
    """The certification device-hours of `trials` under each strategy (envelope: estimated,
    `shares` or `ENVELOPE_FULL_SHARE`), whatever the space's own strategy."""
    return {
        strategy: price_sweep(
            trials, replace(spec, strategy=strategy, ddrs=None), figures, shares
        ).certify_hours
        for strategy in ("full", "envelope")
    }


def certify_work(
    cfg: TrialConfig, spec: CertifySpec, shares: Shares | None = None
) -> tuple[float, float]:
    """(forward+backward passes, forwards) of certifying one model with every variant of
    `spec` (fixed σ, and data-dependent σ when spec.ddrs is set); `shares`: the envelope
    strategy's share of models certified fully per certification σ (default
    `ENVELOPE_FULL_SHARE`)."""
    passes = forwards = 0.0
    for variant in spec.variants():
        points = certified_points(cfg.dataset, variant)
        per_point: float = variant.n0 + variant.n
        if variant.strategy == "envelope":
            sigma = variant.sigma if variant.sigma is not None else cfg.sigma
            share = (shares or {}).get(sigma, ENVELOPE_FULL_SHARE)
            per_point = envelope_point_forwards(variant, share)
        forwards += points * per_point
        if variant.ddrs is not None:
            passes += points * variant.ddrs.iterations * variant.ddrs.samples
    return passes, forwards


@dataclass(frozen=True)
class TrialCost:
    """One trial's device-hours on the figures' device (whole GPU, or one CPU core)."""

    trial: TrialConfig
    train_hours: float
    certify_hours: float
    certify_forwards: float

    @property
    def hours(self) -> float:
        return self.train_hours + self.certify_hours


def hours(passes: float, forwards: float, figure: Figure) -> float:
    return (passes / figure.train + forwards / figure.forward) / 3600


def price(
    cfg: TrialConfig, spec: CertifySpec, figure: Figure, shares: Shares | None = None
) -> TrialCost:
    train = training_work(cfg)
    cert = certify_work(cfg, spec, shares)
    return TrialCost(cfg, hours(*train, figure), hours(*cert, figure), cert[1])


def group_label(cfg: TrialConfig) -> str:
    """The fields that set a trial's cost (PGD and DDN cost the same); a group's trials may
    still differ a little (ε = 0, warm-up, eval_subset), so its per-trial cost is a mean."""
    parts = [cfg.dataset, required(cfg.arch, "arch"), cfg.method]
    parts += [f"T={cfg.steps}"] if cfg.steps is not None else []
    parts += [f"m={cfg.m_train}"] if cfg.m_train is not None else []
    parts += [f"{cfg.epochs} ep"]
    parts += [f"{train_inputs(cfg):,} inputs"] if cfg.train_subset is not None else []
    parts += ["DDRS"] if cfg.ddrs_start_epoch is not None else []
    parts += ["self-training"] if cfg.pseudo_ratio else []
    return " ".join(parts)


@dataclass(frozen=True)
class Group:
    label: str
    trials: int
    passes: int  # forward+backward passes per training input per epoch, after any warm-up
    train_hours: float  # the group's total
    certify_hours: float


def groups(costs: list[TrialCost]) -> list[Group]:
    """Alike trials together, in the order the sweep first lists them."""
    found: dict[str, list[TrialCost]] = {}
    for c in costs:
        found.setdefault(group_label(c.trial), []).append(c)
    return [
        Group(
            label,
            len(cs),
            step_passes(cs[0].trial),
            sum(c.train_hours for c in cs),
            sum(c.certify_hours for c in cs),
        )
        for label, cs in found.items()
    ]


@dataclass(frozen=True)
class SweepCost:
    costs: list[TrialCost]

    @property
    def train_hours(self) -> float:
        return sum(c.train_hours for c in self.costs)

    @property
    def certify_hours(self) -> float:
        return sum(c.certify_hours for c in self.costs)

    @property
    def hours(self) -> float:
        return self.train_hours + self.certify_hours

    def spread(self) -> tuple[float, float, float]:
        """(min, median, max) of a trial's device-hours."""
        per_trial = [c.hours for c in self.costs]
        return min(per_trial), statistics.median(per_trial), max(per_trial)

    def forwards_per_model(self) -> tuple[float, float]:
        """(fewest, most) certification forwards of one model."""
        counts = [c.certify_forwards for c in self.costs]
        return min(counts), max(counts)


def price_sweep(
    trials: list[TrialConfig],
    spec: CertifySpec,
    figures: dict[str, Figure],
    shares: Shares | None = None,
) -> SweepCost:
    """Every trial priced with its architecture's figure (`shares`: as `certify_work`)."""
    return SweepCost([price(t, spec, figures[required(t.arch, "arch")], shares) for t in trials])


@dataclass(frozen=True)
class Devices:
    """What the sweep runs on: GPUs and CPUs (None: not known, assumed not to limit)."""

    gpus: float
    cpus: float | None
    where: str


@dataclass(frozen=True)
class WallClock:
    hours: float
    at_once: int  # trials running together
    devices: float  # GPUs (or CPU cores) kept busy


def wall_clock(
    sweep: SweepCost, per_trial: Resources, kind: str, capacity: Devices
) -> WallClock | None:
    """Wall-clock hours on `capacity`, or None when not one trial fits. Trials packed on a GPU
    share its throughput (Ray fills one GPU's fractions before the next), so the occupied GPUs
    (or CPU cores, one per trial thread) work off the sweep's device-hours together; the
    longest chain of trials (a fine-tune trial after its parent) is a lower bound."""
    at_once = len(sweep.costs)
    if capacity.cpus is not None and per_trial.cpu > 0:
        at_once = min(at_once, math.floor(capacity.cpus / per_trial.cpu + 1e-9))
    if kind == "gpu":
        at_once = min(at_once, math.floor(capacity.gpus / per_trial.gpu + 1e-9))
    if at_once < 1:
        return None
    if kind == "gpu":
        width = max(1.0, per_trial.gpu)
        busy = min(capacity.gpus, math.ceil(at_once * per_trial.gpu - 1e-9))
    else:
        width = busy = max(1, int(per_trial.cpu))
        busy *= at_once
    return WallClock(max(sweep.hours / busy, longest_chain(sweep) / width), int(at_once), busy)


def longest_chain(sweep: SweepCost) -> float:
    """Device-hours of the longest trial, a fine-tune trial counted with the parents it waits
    for (two-stage sweeps: `init_from`)."""
    own = {c.trial.trial_id: c for c in sweep.costs}

    def chain(cost: TrialCost) -> float:
        parent = own.get(cost.trial.init_from) if cost.trial.init_from else None
        return cost.hours + (chain(parent) if parent else 0.0)

    return max(chain(c) for c in sweep.costs)


def train_hours(
    trials: list[TrialConfig], spec: CertifySpec, kind: str
) -> tuple[dict[str, float], str]:
    """Each trial's training device-hours (the envelope search's cost of a grid point: what
    differs between points, (T+1)·m passes for SmoothAdv; certifying one costs the same for
    every point of a space), with the figures the dry run uses (measured on this machine,
    else shipped), and their unit: GPU-hours, or core-hours for trials without a GPU."""
    from sweeper.plan import throughput

    measured, _ = throughput.read_measured(throughput.figures_path())
    archs = sorted({required(t.arch, "arch") for t in trials})
    figures = {a: f for a, (f, _) in throughput.figures_for(kind, archs, measured).items()}
    costs = {c.trial.trial_id: c.train_hours for c in price_sweep(trials, spec, figures).costs}
    return costs, "GPU-hours" if kind == "gpu" else "core-hours"


# The dry run's model of the envelope search (issue 37): the share of the grid's device-hours
# the search spends before it stops by itself, the median over the replay on the published
# SmoothAdv CIFAR-10 logs with 6 trials at once, as on a cluster (`benchmarks/envelope_search.py`;
# docs/guide/envelope-search.md: 15% one trial at a time). The search's own spending depends on
# the landscape, so this is an expectation, not a bound.
SEARCH_SHARE = 0.19


@dataclass(frozen=True)
class SearchCost:
    """Device-hours of the grid (`full`) and expected under the envelope search (`search`,
    training and certification, the audit included), and whether `budget` caps it."""

    full: tuple[float, float]  # (training, certification)
    search: tuple[float, float]
    budget: float | None
    capped: bool


def search_cost(sweep: SweepCost, audit: float, budget: float | None) -> SearchCost:
    """The envelope search's expected cost over `sweep`'s trials: `SEARCH_SHARE` of them and
    `audit` of that again, scaled down where `budget` (training device-hours) is lower (the
    audit comes after)."""
    share = SEARCH_SHARE * (1 + audit)
    train, certify = sweep.train_hours * share, sweep.certify_hours * share
    searched = SEARCH_SHARE * sweep.train_hours
    capped = budget is not None and searched > budget
    if capped and budget is not None:
        scale = budget / searched
        train, certify = train * scale, certify * scale
    return SearchCost((sweep.train_hours, sweep.certify_hours), (train, certify), budget, capped)
