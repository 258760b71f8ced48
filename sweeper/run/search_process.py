"""One radius's Gaussian process of the envelope search's surrogate (`search_surrogate`, whose
docstring says why this shape and these bounds), and the same process conditioned also on the
models still under way at their predicted accuracy (`Believer`: the kriging believer)."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular

LENGTH_SCALES = (0.1, 1.0)
SIGNAL_VARIANCES = (1e-2, 1.0)
NOISE_LEVELS = (1e-6, 1e-2)
RESTARTS = 0  # the optimiser's random restarts per tuning (`Process`)


class Process:
    """One radius's Gaussian process over every grid point that can reach it (σ a feature):
    accuracy = constant + Matérn-5/2 (one length scale per axis) + white noise, fitted to the
    accuracies centred on their mean but not rescaled, so the bounds below are in accuracy
    units. Each observation carries its known test-set noise p(1−p)/points (`alpha`); the
    white kernel takes what more there is (the training seed).

    The hyperparameters are those of `kernel` when given (conditioning only: a Cholesky
    factorisation; `offset`, the constant mean, too: a believer's, so that its pending models
    at their predicted accuracy move no prediction's mean), else chosen by maximising the
    marginal likelihood of these observations (one L-BFGS run from the initial values below;
    `RESTARTS` more from seeded random ones).
    Deterministic: the same observations give the same process."""

    def __init__(self, x: np.ndarray, y: np.ndarray, points: int, kernel: Any = None, offset=None):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        x = columns(x)
        if kernel is None:
            kernel = ConstantKernel(1e-2, SIGNAL_VARIANCES) * Matern(
                length_scale=np.full(x.shape[1], 0.5), length_scale_bounds=LENGTH_SCALES, nu=2.5
            ) + WhiteKernel(1e-4, NOISE_LEVELS)
            tuned: dict[str, Any] = {"n_restarts_optimizer": RESTARTS, "random_state": 0}
        else:
            tuned = {"optimizer": None}
        self.offset = float(y.mean()) if offset is None else float(offset)
        self.gp = regressor()(kernel, alpha=accuracy_noise(y, points), **tuned)
        with warnings.catch_warnings():
            # a length scale at its bound (an axis that does not matter) is an answer here
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp.fit(x, y - self.offset)

    @property
    def kernel(self) -> Any:
        """The fitted kernel (its hyperparameters), to condition other observations on."""
        return self.gp.kernel_

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, standard deviation) of the model's accuracy itself at each of `x`: the
        white noise is left out, so a point next to an observed one has little to offer."""
        mean, std = self.gp.predict(columns(x), return_std=True)
        return mean + self.offset, np.sqrt(np.maximum(std**2 - self.noise, 1e-12))

    @property
    def noise(self) -> float:
        """The white kernel's level: the training seed's noise, not the model's accuracy."""
        return float(self.gp.kernel_.k2.noise_level)


@functools.cache
def regressor() -> Any:
    """scikit-learn's `GaussianProcessRegressor`, except that a process whose hyperparameters
    are given (`optimizer=None`: conditioning only) does not evaluate its log marginal
    likelihood, which nothing here reads: scikit-learn computes it at every fit, a second
    factorisation of every model, about half of conditioning a radius's process."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    class Conditioned(GaussianProcessRegressor):
        def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True):
            if self.optimizer is None and not eval_gradient:
                return float("nan")
            return super().log_marginal_likelihood(theta, eval_gradient, clone_kernel)

    return Conditioned


def accuracy_noise(y: np.ndarray, points: int) -> np.ndarray:
    """The variance of each accuracy `y`, a mean over `points` test points: p(1 − p)/points,
    plus a jitter. A believed accuracy (`Believer`) is a prediction, which can pass 0 or 1,
    where p(1 − p) would be a negative variance (its factorisation failed, ending the driver):
    it is weighed as an accuracy at the bound."""
    p = np.clip(y, 0.0, 1.0)
    return p * (1 - p) / points + 1e-6


def columns(x: np.ndarray) -> np.ndarray:
    return x if x.shape[1] else np.zeros((len(x), 1))


class Believer:
    """`process` conditioned also on pending models (features `x`, believed accuracies `y`,
    each a mean over `points` test points: the noise an observation there would carry).

    An update of the fitted process, not a new fit. With the observed models' Cholesky factor
    L (scikit-learn's `L_`, of K + noise over them), the pending models' covariance given the
    observed ones is C_PP = K_PP + noise_P − VₚᵀVₚ with Vₚ = L⁻¹K_XP, a point's is
    C_xP = k_xP − VₓᵀVₚ, and its mean and variance move by C_xP C_PP⁻¹ (y_P − μ_P) and
    −C_xP C_PP⁻¹ C_Px: the process fitted to the observed and pending models together
    (Rasmussen & Williams eq. 2.24 in two steps; tested against that fit). A new fit
    factorised every model per radius at every decision with a model under way: on 500
    models with 6 pending, 0.58 s of a decision's 1.0 s of CPU."""

    def __init__(self, process: Process, x: np.ndarray, y: np.ndarray, points: int):
        self.process, gp = process, process.gp
        self.x = columns(x)
        self.v = solve_triangular(gp.L_, gp.kernel_(gp.X_train_, self.x), lower=True)
        noise = accuracy_noise(y, points)  # as `Process` weighs an observation
        c_pp = gp.kernel_(self.x) + np.diag(noise) - self.v.T @ self.v
        self.factor = cho_factor(c_pp, lower=True)
        self.weights = cho_solve(self.factor, y - process.predict(self.x)[0])

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, standard deviation) of the model's accuracy at each of `x`, as
        `Process.predict` (the white noise left out), given the pending models too. The
        observed models' prediction is scikit-learn's (Rasmussen & Williams Algorithm 2.1,
        lines 4–6), from the same Vₓ the update needs: solving for it twice was most of a
        decision's CPU."""
        process = self.process
        gp, x = process.gp, columns(x)
        k_trans = gp.kernel_(x, gp.X_train_)
        v_x = solve_triangular(gp.L_, k_trans.T, lower=True, check_finite=False)
        mean = k_trans @ gp.alpha_ + process.offset
        var = gp.kernel_.diag(x) - np.einsum("ij,ij->j", v_x, v_x) - process.noise
        c_xp = gp.kernel_(x, self.x) - v_x.T @ self.v
        narrowed = np.einsum("ij,ji->i", c_xp, cho_solve(self.factor, c_xp.T))
        return mean + c_xp @ self.weights, np.sqrt(np.maximum(var - narrowed, 1e-12))


def one_thread() -> Any:
    """BLAS on one thread while the surrogate fits and predicts (a context manager). Its
    matrices are small (tens to hundreds of rows), where OpenBLAS's threads cost more than they
    give, and a driver shares its cores with Ray's workers: measured on 2 busy cores, one
    64-row `cho_solve` took 5.5 ms of CPU on two threads (spinning) against 0.1 ms on one."""
    return _blas().limit(limits=1, user_api="blas")


@functools.cache
def _blas() -> Any:
    """The process's BLAS libraries, found once (numpy's and scipy's are loaded with this
    module): `threadpool_limits` searches the loaded libraries at every use, 2.3 ms of CPU here
    and more in a driver that has loaded Ray's (2.8 s of a search's 60 s in py-spy's samples,
    `benchmarks/sweep_scale.py --search`); a kept controller's limit, 0.02 ms."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
