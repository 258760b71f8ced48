"""The envelope search's surrogate: a Gaussian process per training σ (scikit-learn's
`GaussianProcessRegressor`) from a grid point's hyperparameters to its certified accuracy at
each radius of the grid, fitted to the curves of the models trained so far.

Why this shape (issue 37): in the published SmoothAdv CIFAR-10 logs, within one σ the accuracy at
each radius is smooth in (log ε, T, log m) up to the noise of the test points, and a GP per σ
on log-scaled axes predicts left-out models with R² 0.74–0.89. Across σ the curves differ in
kind (a model cannot certify beyond σ·Φ⁻¹(α^(1/n))), so each σ has its own process.

Features are read off the universe itself (`Features`): every hyperparameter that varies over
the grid except σ (the group), the seed and the environment's fields; a numeric one in
log scale when all its values are positive, scaled to [0, 1]; any other one-hot, null being a
value of its own (a Gaussian baseline has no ε: its ε is a separate indicator)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from trainables.kernel.config import ENVIRONMENT_FIELDS, TrialConfig

LENGTH_SCALES = (5e-2, 1e2)
NOISE_LEVELS = (1e-6, 1.0)
GROUP_FIELD = "sigma"  # one process per training σ
NOT_FEATURES = frozenset({GROUP_FIELD, "seed", "init_from", *ENVIRONMENT_FIELDS})


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


class Process:
    """One σ's Gaussian process over the grid radii (a multi-output fit: one kernel, each
    radius's accuracies normalised on their own). Deterministic: the optimiser's restarts
    are seeded, so the same observations give the same predictions."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        width = x.shape[1] if x.ndim == 2 and x.shape[1] else 1
        kernel = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(
            length_scale=np.ones(width), length_scale_bounds=LENGTH_SCALES, nu=2.5
        ) + WhiteKernel(1e-2, NOISE_LEVELS)
        self.gp = GaussianProcessRegressor(
            kernel, normalize_y=True, n_restarts_optimizer=2, random_state=0
        )
        with warnings.catch_warnings():
            # a length scale at its bound (an axis that does not matter) is an answer here
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp.fit(x if x.shape[1] else np.zeros((len(x), 1)), y)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, standard deviation) of the model's accuracy itself, each (points × radii):
        the white noise of the fit (a model's certified accuracy measured on finitely many
        test points) is left out, so a point next to an observed one has little to offer."""
        x = x if x.shape[1] else np.zeros((len(x), 1))
        mean, std = self.gp.predict(x, return_std=True)
        mean, std = np.asarray(mean), np.asarray(std)
        if mean.ndim == 1:
            mean, std = mean[:, None], std[:, None]
        noise = self.gp.kernel_.k2.noise_level * np.asarray(self.gp._y_train_std) ** 2
        return mean, np.sqrt(np.maximum(std**2 - noise, 1e-18))


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: np.ndarray) -> np.ndarray:
    """E[max(0, Y − best)] for Y ~ N(mean, std²), elementwise (points × radii; `best` per
    radius): (μ − b)·Φ(z) + s·φ(z), z = (μ − b)/s."""
    from scipy.stats import norm

    z = (mean - best) / std
    return (mean - best) * norm.cdf(z) + std * norm.pdf(z)
