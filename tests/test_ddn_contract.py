"""SmoothAdv-DDN's contract on every iterate it evaluates, and attacks under data parallelism.

A parameter-free model whose vote is wrong iff ‖input‖₂ > R, fed x = 0 and zero noise, shows
DDN's iterates exactly (the input is δ itself) and has a zero gradient everywhere (each step
goes along a standard normal draw of the generator). From the iterates the result follows
by the reference's rule: the first adversarial iterate of smallest ℓ2 norm (`l2 < best_l2`,
so the earliest of a tie), renormed into the ℓ2 ε-ball (`renorm_(p=2, dim=0)`) and quantized.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from trainables import attacks

# 3 channels and a batch of 4 (a radius per channel could not broadcast); few pixels, so
# that different iterates of equal norm are common.
SHAPE = (3, 1, 1)
BATCH = 4
LEVELS = 256
EPSILON = 3 / 255
# Adversarial iff beyond ε, so the kept iterate is always renormed; no ‖δ‖ on the grid of
# levels equals R (4.1² is no integer).
R = 4.1 / 255


class NormThreshold(nn.Module):
    """Votes class 1 (wrong, y = 0) iff ‖input‖₂ > R; a zero gradient. Records its inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        wrong = (x.flatten(1).norm(dim=1) > R).float()
        return torch.stack([1 - wrong, wrong], dim=1) + 0 * x.flatten(1).sum(dim=1, keepdim=True)


def run_ddn(seed: int, steps: int = 20) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model = NormThreshold()
    x = torch.zeros(BATCH, *SHAPE)
    y = torch.zeros(BATCH, dtype=torch.long)
    out = attacks.ddn(model, x, y, torch.zeros(BATCH, 1, *SHAPE), EPSILON, steps,
                      levels=LEVELS, generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return out, model.seen


def kept_by_the_reference(iterates: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(B, *SHAPE) the first adversarial iterate of least ℓ2 norm per row (0 if none), and
    the number of rows where a later, different iterate has that same norm (norms computed
    as DDN computes them, batched, so that float ties are its ties)."""
    best = torch.zeros_like(iterates[0])
    best_l2 = torch.full((BATCH,), float("inf"))
    norms = [delta.flatten(1).norm(p=2, dim=1) for delta in iterates]
    for delta, l2 in zip(iterates, norms, strict=True):
        for b in range(BATCH):
            if l2[b] > R and l2[b] < best_l2[b]:
                best[b], best_l2[b] = delta[b], l2[b]
    tied = 0
    for b in range(BATCH):
        tied += any(
            bool(l2[b] == best_l2[b]) and not torch.equal(d[b], best[b])
            for d, l2 in zip(iterates, norms, strict=True)
        )
    return best, tied


def test_ddn_keeps_the_first_smallest_adversarial_iterate_renormed_into_the_ball():
    ties = 0
    for seed in range(8):
        out, iterates = run_ddn(seed)
        best, tied = kept_by_the_reference(iterates)
        expected = attacks.quantize(torch.renorm(best, p=2, dim=0, maxnorm=EPSILON), LEVELS)
        assert torch.equal(out, expected), f"seed {seed}"
        ties += tied
    assert ties > 0  # some rows had two different iterates of the kept norm: the earlier won


def test_ddn_iterates_lie_on_the_quantization_grid_and_the_result_within_epsilon():
    out, iterates = run_ddn(seed=3)
    for delta in iterates:
        torch.testing.assert_close(delta * 255, torch.round(delta * 255), atol=1e-4, rtol=0)
    assert any(float(d.flatten(1).norm(dim=1).max()) > EPSILON for d in iterates)
    half_level = 0.5 / 255 * (torch.tensor(SHAPE).prod().sqrt())
    assert float(out.flatten(1).norm(dim=1).max()) <= EPSILON + float(half_level)


def test_ddn_random_steps_come_from_the_generator_not_the_global_rng():
    torch.manual_seed(0)
    first, _ = run_ddn(seed=11)
    torch.manual_seed(1)
    second, _ = run_ddn(seed=11)
    other, _ = run_ddn(seed=12)
    assert torch.equal(first, second)
    assert not torch.equal(first, other)


def test_attacks_run_the_module_inside_distributed_data_parallel(tmp_path):
    """Under DistributedDataParallel an attack's forward passes go to the wrapped module (they
    must not join the gradient reduction); one gloo process stands in for the ranks."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        inner = nn.Linear(4, 2)
        wrapped = nn.parallel.DistributedDataParallel(inner)
        assert attacks.unwrap(wrapped) is inner
        assert attacks.unwrap(inner) is inner
        with attacks.frozen_eval(wrapped) as model:
            assert model is inner
    finally:
        dist.destroy_process_group()
