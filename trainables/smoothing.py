"""Randomized smoothing: CERTIFY and PREDICT of Cohen, Rosenfeld & Kolter (2019), the math
of the smoothed classifier (running it over a model's test points: `trainables.certify_points`).

The smoothed classifier is g(x) = argmax_c P(f(x + ε) = c), ε ~ N(0, σ² I), with noise added
in [0, 1] pixel space (the base classifier standardizes its input in its first layer), so
radii are ℓ2 distances in pixel units.

Guarantees (for a base classifier f that is a fixed function):
- `certify` returns (ĉ, R). With probability at least 1 − α over its sampling, if ĉ ≠ ABSTAIN
  then g(x + δ) = ĉ for every ‖δ‖₂ < R.
- `predict` returns a class that, with probability at least 1 − α, is g(x) (or ABSTAIN).

This module is pure: no Ray, no I/O; the device is that of the input. Sampling draws batches
of noise on the device, counts votes with `bincount` there, and never loops over samples in
Python; the only transfer to the host is the counts. Several test points can share one forward
batch (`certify_batch`). The base classifier is evaluated in eval mode (its modes are restored
afterwards). Precision is the caller's: `Smooth(dtype=...)` draws and adds the noise in that
dtype, and the caller runs it under the matching autocast (`trainables.runtime`, which
`certify_points` applies): the certificate is then one of the base classifier as run at that
precision.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from trainables.kernel.certificates import (
    ABSTAIN,
    Certificate,
    certificate_from_counts,
    predict_from_counts,
)

Draws = torch.Generator | Sequence[torch.Generator] | None
"""Where the noise comes from: one generator for the whole batch (its points' draws then
interleave in it), or one per point (each point's draws are its own stream: the same whichever
points share its forward batches, shard or run). None: torch's default generator."""


class Smooth:
    """A smoothed classifier around `base_classifier` (a module mapping (B,C,H,W) -> logits).
    Its noisy batches have `dtype` (None: the inputs' own); for a reduced precision, call it
    under the matching autocast (`trainables.runtime.autocast`), as `certify_points` does."""

    ABSTAIN = ABSTAIN

    def __init__(
        self,
        base_classifier: torch.nn.Module,
        num_classes: int,
        sigma: float,
        dtype: torch.dtype | None = None,
    ) -> None:
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0 (got {sigma})")
        self.base_classifier = base_classifier
        self.num_classes = num_classes
        self.sigma = float(sigma)
        self.dtype = dtype

    def certify(
        self,
        x: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
    ) -> tuple[int, float]:
        """CERTIFY for one input x of shape (C,H,W): (prediction, radius)."""
        cert = self.certify_batch(x.unsqueeze(0), n0, n, alpha, batch_size, generator)[0]
        return cert.prediction, cert.radius

    def certificate(
        self,
        x: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
    ) -> Certificate:
        """CERTIFY for one input, with nA, n and p_lower kept."""
        return self.certify_batch(x.unsqueeze(0), n0, n, alpha, batch_size, generator)[0]

    def certify_batch(
        self,
        xs: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: Draws = None,
        sigmas: torch.Tensor | None = None,
        estimation: Draws = None,
    ) -> list[Certificate]:
        """CERTIFY for each of the P inputs in `xs` (P,C,H,W), sharing forward batches.

        Each input gets its own n0 selection samples and n fresh estimation samples, so the
        guarantee holds per input exactly as in the one-at-a-time algorithm. `sigmas` (P,)
        smooths each input with its own σ (data-dependent smoothing) instead of self.sigma.
        The selection draws come from `generator`, the estimation draws from `estimation` if
        given (per point: `certify_points`), else from `generator` after them.
        """
        counts0 = self.sample_counts(xs, n0, batch_size, generator, sigmas)
        cAHat = counts0.argmax(dim=1)
        later = generator if estimation is None else estimation
        counts = self.sample_counts(xs, n, batch_size, later, sigmas)
        nA = counts.gather(1, cAHat.unsqueeze(1)).squeeze(1)
        per_point: list[float] = [self.sigma] * len(xs) if sigmas is None else sigmas.tolist()
        return [
            certificate_from_counts(c, a, n, alpha, s)
            for c, a, s in zip(cAHat.tolist(), nA.tolist(), per_point, strict=True)
        ]

    def predict(
        self,
        x: torch.Tensor,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
    ) -> int:
        """PREDICT for one input x (C,H,W): the smoothed prediction or ABSTAIN."""
        counts = self.sample_counts(x.unsqueeze(0), n, batch_size, generator)[0]
        return predict_from_counts(counts.cpu().numpy(), alpha)

    def sample_counts(
        self,
        xs: torch.Tensor,
        num: int,
        batch_size: int,
        generator: Draws = None,
        sigmas: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Votes of the base classifier under noise: (P, num_classes) int64 counts, each row
        summing to `num`; noise N(0, σ²) with σ = self.sigma or, per point, `sigmas` (P,).
        Every forward batch holds at most max(batch_size, 1) noisy samples: up to `batch_size`
        points at a time, each with batch_size // (those points) draws.

        The base classifier runs in eval mode (each submodule's mode is restored afterwards),
        so batch-norm uses its running statistics and no point's votes depend on another's.
        With one generator per point (`Draws`) a point's noise is its own stream, the same for
        any grouping when C·H·W is a multiple of 16 (torch's CPU normal_ transforms its
        uniforms in blocks of 16, so consecutive calls continue one stream); on a GPU the
        stream also depends on the chunk sizes.
        """
        P = xs.shape[0]
        counts = torch.zeros(P, self.num_classes, dtype=torch.long, device=xs.device)
        group = max(1, min(P, batch_size))
        per_point = max(1, batch_size // group)
        with _eval_mode(self.base_classifier), torch.inference_mode():
            for start in range(0, P, group):
                chunk = xs[start : start + group]
                scale = None if sigmas is None else sigmas[start : start + group]
                gens = generator
                if isinstance(gens, Sequence):
                    gens = gens[start : start + group]
                counts[start : start + group] = self._chunk_counts(
                    chunk, num, per_point, gens, scale
                )
        return counts

    def _chunk_counts(
        self,
        xs: torch.Tensor,
        num: int,
        per_point: int,
        generator: Draws,
        sigmas: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`sample_counts` for the g points of xs, `per_point` draws each per forward batch.

        The noisy batch is one preallocated buffer: noise is drawn into it in place (scaled by
        σ on the fly) and xs is added by broadcasting, so nothing is repeated or reallocated.
        The buffer has the compute dtype: `self.dtype`, else xs's own."""
        g, shape, K = xs.shape[0], xs.shape[1:], self.num_classes
        k = min(per_point, num)
        buffer = torch.empty((g * k, *shape), dtype=self.dtype or xs.dtype, device=xs.device)
        offsets = torch.arange(g, device=xs.device).unsqueeze(1) * K
        counts = torch.zeros(g * K, dtype=torch.long, device=xs.device)
        remaining = num
        while remaining > 0:
            k = min(k, remaining)
            noisy = buffer[: g * k].view(g, k, *shape)
            _noise(noisy, self.sigma if sigmas is None else 1.0, generator)
            if sigmas is not None:
                noisy.mul_(sigmas.view(g, *[1] * (noisy.dim() - 1)))
            noisy.add_(xs.unsqueeze(1))
            preds = self.base_classifier(noisy.view(g * k, *shape)).argmax(dim=1)
            counts += torch.bincount((preds.view(g, k) + offsets).view(-1), minlength=g * K)
            remaining -= k
        return counts.view(g, K)


def _noise(noisy: torch.Tensor, std: float, generator: Draws) -> None:
    """Fill `noisy` (g, k, ...) with N(0, std²): from one generator, or point i's k draws from
    generator[i]."""
    if isinstance(generator, Sequence):
        for point, gen in zip(noisy, generator, strict=True):
            point.normal_(0.0, std, generator=gen)
    else:
        noisy.normal_(0.0, std, generator=generator)


@contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Put every submodule in eval mode; restore each one's own mode afterwards."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, training in modes:
            m.training = training
