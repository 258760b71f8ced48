"""The envelope search's surrogate: a Gaussian process per grid radius (scikit-learn's
`GaussianProcessRegressor`) from a grid point's hyperparameters, training σ included, to its
certified accuracy at that radius, fitted to the curves of the models trained so far.

Why this shape (issue 37): in the published SmoothAdv CIFAR-10 logs the accuracy at each radius
is smooth in (log σ, log ε, T, log m) up to the noise of the test points. One process over all
σ lets what is learnt at one σ (m_train helps, the best ε grows with σ) inform the others; a
process per σ saw about ten models and was sure of what it had not seen. A σ's models cannot
certify beyond σ·Φ⁻¹(α^(1/n)), so a radius's process is fitted only to the σ that reach it and
the others are exact zeros there (`Surrogate`), not a cliff the kernel would have to bend to.

The bounds (`search_process`) are what keep a process with few models honest (replayed on
the published logs: with the defaults of scikit-learn it stopped at half the cost and missed
the envelope by 0.06):
- the noise is known, not fitted away: each accuracy is a mean over the certified test points
  (`points`: 500 in the published logs), variance p(1−p)/points (`alpha`); the white kernel
  adds at most 0.1² (training seeds);
- the signal's standard deviation is at least 0.1 (`SIGNAL_VARIANCES`), above the spread of
  one σ's accuracies over the published grid (0.03–0.09): a handful of similar models does not
  prove the rest of the grid similar. Replayed over 10 bootstraps of the test points, a floor
  of 0.07 stopped at 11% of the cost (median) and missed the envelope by up to 0.042 (6 of 10
  within 0.02); 0.1 stopped at 14% and missed by at most 0.024 (7 of 10 within 0.02);
- a length scale is at most 1 on axes scaled to [0, 1] (`LENGTH_SCALES`): no axis is declared
  irrelevant before models that differ along it have been seen.

Features are read off the universe itself (`Features`): every hyperparameter that varies over
the grid except the seed and the environment's fields; a numeric one in log scale when all its
values are positive, scaled to [0, 1]; any other one-hot, null being a value of its own (a
Gaussian baseline has no ε: its ε is a separate indicator).

What a decision costs (issue 37's control plane; docs/guide/envelope-search.md): the fits and
predictions run on one BLAS thread (`one_thread`); a radius's process is kept while its models
are, its hyperparameters while their tuning sample is (`Tuned`); the optimiser runs once from
fixed initial values (`RESTARTS`: a seeded restart doubled a tuning's CPU; without it the
replay on the published logs stops where it did on 8 of 10 seeds, one seed 0.1% of the cost
later and one two models earlier, still missing by 0.024 where it missed by 0.022)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweeper.run.search_process import Believer, Process, one_thread
from trainables.kernel.config import ENVIRONMENT_FIELDS, TrialConfig

TUNED_MODELS = 64  # observations a radius's hyperparameters are tuned on (`Tuned`)
GROUP_FIELD = "sigma"  # the initial design covers each training σ
NOT_FEATURES = frozenset({"seed", "init_from", *ENVIRONMENT_FIELDS})


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class _Numeric:
    name: str
    log: bool
    low: float
    span: float
    has_null: bool

    def columns(self, value: object) -> list[float]:
        if value is None:
            return [0.5, 1.0] if self.has_null else [0.5]
        x = math.log(float(value)) if self.log else float(value)  # type: ignore[arg-type]
        scaled = (x - self.low) / self.span
        return [scaled, 0.0] if self.has_null else [scaled]


@dataclass(frozen=True)
class _Categorical:
    name: str
    values: tuple[object, ...]

    def columns(self, value: object) -> list[float]:
        if len(self.values) == 2:  # one column says which of two
            return [float(value == self.values[1])]
        return [float(value == v) for v in self.values]


class Features:
    """A grid point as a vector: the universe's varying hyperparameters (module docstring)."""

    def __init__(self, universe: list[TrialConfig]):
        dicts = [t.to_dict() for t in universe]
        self.parts: list[_Numeric | _Categorical] = []
        kept: list[list[str]] = []  # the kept parts' values, as text, per point
        for name in dicts[0] if dicts else []:
            values = [d[name] for d in dicts]
            if name in NOT_FEATURES or len(set(map(repr, values))) < 2:
                continue
            if kept and _determined(kept, values):
                continue  # a function of the axes already kept (ddn_gamma of attack, ...)
            self.parts.append(_part(name, values))
            kept.append(list(map(repr, values)))

    @property
    def width(self) -> int:
        return sum(
            len(p.columns(None)) if isinstance(p, _Numeric) else len(p.values) for p in self.parts
        )

    def vector(self, trial: TrialConfig) -> np.ndarray:
        d = trial.to_dict()
        return np.array([c for p in self.parts for c in p.columns(d[p.name])], dtype=np.float64)

    def matrix(self, trials: list[TrialConfig]) -> np.ndarray:
        if not trials:
            return np.zeros((0, self.width))
        return np.stack([self.vector(t) for t in trials])


def _determined(kept: list[list[str]], values: list[object]) -> bool:
    """Whether `values` are one value per combination of the kept parts' values."""
    seen: dict[tuple[str, ...], str] = {}
    for i, v in enumerate(values):
        key = tuple(k[i] for k in kept)
        if seen.setdefault(key, repr(v)) != repr(v):
            return False
    return True


def _part(name: str, values: list[object]) -> _Numeric | _Categorical:
    present = [v for v in values if v is not None]
    if present and all(_number(v) for v in present) and len(set(present)) > 1:
        log = all(float(v) > 0 for v in present)  # type: ignore[arg-type]
        xs = [math.log(float(v)) if log else float(v) for v in present]  # type: ignore[arg-type]
        return _Numeric(name, log, min(xs), max(xs) - min(xs), len(present) < len(values))
    unique = tuple({repr(v): v for v in values}.values())
    return _Categorical(name, unique)


def group_of(trial: TrialConfig) -> object:
    return getattr(trial, GROUP_FIELD)


def tuning_rank(trial_id: str) -> bytes:
    """A fixed pseudo-random order of the grid's points (the tuning subset's)."""
    return hashlib.sha256(trial_id.encode()).digest()


class Tuned:
    """Each radius's process kept between decisions, so that a decision is cheap while the
    process stays a function of the observations alone (a resumed driver that observes the
    same curves proposes the same points; `tests/test_envelope_search.py`):

    - a radius whose models are the same as at the last fit (the new model's σ does not reach
      it) keeps its process: nothing is tuned or factorised again;
    - otherwise its hyperparameters are tuned on at most `TUNED_MODELS` of its models, the
      first in `tuning_rank` order (a fixed pseudo-random sample), and kept while that sample
      is unchanged; every model is then conditioned on with them (one Cholesky factorisation).

    Why not re-tune only when a radius's model count crosses a geometric milestone (×1.25,
    ×1.5): a sample that is a function of the observation set changes whenever a new model
    ranks among it, with chance k/(n+1) for k of n models, milestones or not. Counted on the
    published grid's 461 models revealed in random order (10 radii, 3 orders): 1,477
    re-tunings with k = min(n, 64), 1,427 with k on a ×1.25 ladder, 1,373 on ×1.5, 2,182
    before radii were kept. Re-tuning only at the crossings (130–226) would make the kernel
    depend on the order the curves arrived in. A tuning of 64 models costs 25–40 ms of CPU on
    one BLAS thread (`one_thread`), one L-BFGS run (`RESTARTS`)."""

    def __init__(self) -> None:
        self._kernels: dict[int, tuple[tuple[str, ...], Any]] = {}  # radius -> (subset, kernel)
        self._fitted: dict[int, tuple[tuple[tuple[str, ...], bytes], Process]] = {}

    def process(
        self,
        r: int,
        ids: list[str],
        x: np.ndarray,
        y: np.ndarray,
        points: int,
        believed: int = 0,
    ):
        """Radius `r`'s process of the models `ids` (features `x`, accuracies `y`): the last
        one again if they are the same (a model whose σ does not reach `r` changes nothing
        there), else conditioned on them with the kernel of their tuning sample. The last
        `believed` rows are pending models at their predicted accuracy (`Surrogate`'s
        believer): conditioned on, never tuned on, and their process not kept."""
        key = (tuple(ids), y.tobytes())
        known = self._fitted.get(r)
        if known is not None and known[0] == key:
            return known[1]
        process = self._process(r, ids, x, y, points, len(ids) - believed)
        if not believed:
            self._fitted[r] = (key, process)
        return process

    def _process(
        self, r: int, ids: list[str], x: np.ndarray, y: np.ndarray, points: int, real: int
    ):
        if real < len(ids):  # a believer: the observed models' process, conditioned further
            seen = self.process(r, ids[:real], x[:real], y[:real], points)
            return Believer(seen, x[real:], y[real:], points)
        if real <= TUNED_MODELS:
            return Process(x, y, points)  # tuned on all of them: nothing to gain by reuse
        order = sorted(range(real), key=lambda i: tuning_rank(ids[i]))[:TUNED_MODELS]
        subset = tuple(ids[i] for i in order)
        known = self._kernels.get(r)
        if known is None or known[0] != subset:
            known = (subset, Process(x[order], y[order], points).kernel)
            self._kernels[r] = known
        return Process(x, y, points, kernel=known[1])


class Surrogate:
    """The curves of the whole grid: a `Process` per radius, fitted to the models (not
    diverged) whose σ reaches that radius. A σ reaches a radius when one of its models has
    certified anything there; beyond, its accuracy is a structural zero (a model cannot
    certify beyond σ·Φ⁻¹(α^(1/n))), predicted exactly, not fitted. A σ not yet observed is
    taken to reach every radius. `points`: the test points each accuracy is a mean over;
    `ids`: the models' trial ids and `tuned` the hyperparameters kept between fits (`Tuned`);
    `believed`: how many of the last rows are pending models at their predicted curves (a
    kriging believer: conditioned on with the observed models' kernels, so a point beside one
    already under way is not proposed as the same bet)."""

    def __init__(
        self,
        x: np.ndarray,
        curves: np.ndarray,
        groups: list[object],
        points: int,
        ids: list[str],
        tuned: Tuned,
        believed: int = 0,
    ):
        self.reach: dict[object, np.ndarray] = {}
        real = len(ids) - believed
        for g, curve in zip(groups[:real], curves[:real], strict=True):
            self.reach[g] = self.reach.get(g, np.zeros(curves.shape[1], bool)) | (curve > 0)
        self.processes: list[Process | Believer | float] = []  # a float: every model alike
        with one_thread():
            self._fit(x, curves, groups, points, ids, tuned, real)

    def _fit(
        self,
        x: np.ndarray,
        curves: np.ndarray,
        groups: list[object],
        points: int,
        ids: list[str],
        tuned: Tuned,
        real: int,
    ) -> None:
        every = np.ones(curves.shape[1], bool)  # a σ not observed yet reaches every radius
        for r in range(curves.shape[1]):
            rows = [i for i, g in enumerate(groups) if self.reach.get(g, every)[r]]
            values = curves[rows, r]
            observed = [i for i in rows if i < real]
            fit = len(observed) >= 2 and len(set(curves[observed, r])) > 1
            same = float(curves[observed, r].mean()) if observed else 0.0
            if fit:
                kept = [ids[i] for i in rows]
                believed = len(rows) - len(observed)
                self.processes.append(tuned.process(r, kept, x[rows], values, points, believed))
            else:
                self.processes.append(same)

    def predict(self, x: np.ndarray, groups: list[object]) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std), each (points × radii); zero where a point's σ cannot reach."""
        radii = len(self.processes)
        mean, std = np.zeros((len(x), radii)), np.zeros((len(x), radii))
        every = np.ones(radii, bool)  # a σ not observed yet reaches every radius
        reach = np.stack([self.reach.get(g, every) for g in groups]) if groups else None
        with one_thread():
            for r, process in enumerate(self.processes):
                rows = np.flatnonzero(reach[:, r]) if reach is not None else np.zeros(0, int)
                if not len(rows):
                    continue
                if not isinstance(process, float):
                    mean[rows, r], std[rows, r] = process.predict(x[rows])
                else:
                    mean[rows, r] = process  # too little to fit: what was seen, no spread
        return mean, std


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: np.ndarray) -> np.ndarray:
    """E[max(0, Y − best)] for Y ~ N(mean, std²), elementwise (points × radii; `best` per
    radius): (μ − b)·Φ(z) + s·φ(z), z = (μ − b)/s."""
    from scipy.stats import norm

    std = np.maximum(std, 1e-12)
    z = (mean - best) / std
    return (mean - best) * norm.cdf(z) + std * norm.pdf(z)
