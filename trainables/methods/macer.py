"""MACER (Zhai et al. 2020): maximize the certified radius directly.

With k = m_train noises per input and F the logits:
  loss = mean_x −log mean_i softmax(F(x + δ_i))_y
         + λ · (1/b) Σ_{x correct} σ/2 · max(0, γ − [Φ⁻¹(p̂_y) − Φ⁻¹(p̂_2)]),
where p̂ = mean_i softmax(β·F(x + δ_i)) (inverse temperature β), "correct" means argmax p̂ = y,
p̂_2 is the largest other class and the gap must be finite (p̂_y = 1 gives Φ⁻¹ = ∞ and no
term), as in the authors' code. The hinge is zero once the gap exceeds the margin γ.
With `macer_deferred`, λ = 0 before the first LR drop (`lam_in_epoch`).

Under DDRS training the authors' CIFAR-10 script (MotasemAlfarra/Data_Dependent_Randomized_
Smoothing CIFAR10/train_macer.py) has its own robustness term, `ddrs_radius_hinge`:
  λ · mean_{x correct} max(0, γ − σ_x/2 · [Φ⁻¹(p̂_1) − Φ⁻¹(p̂_2)]),
p̂ the same mean softmax as the classification term (its network ends in a softmax: no β),
its two largest entries clamped to [0.02, 0.98], "correct" meaning argmax p̂ = y, and the mean
taken over the correct inputs only. It is the default of DDRS-trained MACER trials
(`ddrs_macer_loss: ddrs`, every epoch, as the script uses it before its epoch_switch too);
`ddrs_macer_loss: macer` trains them with MACER's term above at σ_x (sweeper before issue 26).
Its noise copies take σ as the script pairs them (`ddrs_noise_pairing: reference`, the
default; `copy_sigmas`): it repeats the batch input-major but σ copy-major (l. 163-166), so
copy j of input i is drawn at the σ_x of input (i·k + j) mod b, another input's for most
copies; the robustness term keeps each input's own σ_x (l. 137). `ddrs_noise_pairing: own`
draws each input's copies at its own σ_x (sweeper before issue 40).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables.kernel.config import TrialConfig, required
from trainables.methods.base import StepContext, StepOutput, draw_noise, noisy_copies, per_input

LOG_FLOOR = 1e-10
PROB_MIN, PROB_MAX = 1e-20, 1 - 1e-7
DDRS_CLAMP = (0.02, 0.98)  # train_macer.py l. 136, as OptimizeSigma's (`trainables.ddrs`)


def radius_hinge(
    logits: torch.Tensor,
    y: torch.Tensor,
    k: int,
    sigma: float | torch.Tensor,
    beta: float,
    gamma: float,
) -> torch.Tensor:
    """Per input (b,): σ/2·max(0, γ − gap) for correctly classified inputs with a finite gap,
    else 0. Logits (b·k, K) are grouped by input; σ is a float or a (b,) tensor (DDRS)."""
    p = F.softmax(beta * logits, dim=1).view(-1, k, logits.shape[1]).mean(dim=1)
    top2, idx = p.topk(2, dim=1)
    with torch.no_grad():
        finite = torch.isfinite(torch.special.ndtri(top2[:, 0]) - torch.special.ndtri(top2[:, 1]))
    keep = ((idx[:, 0] == y) & finite).to(logits.dtype)
    # Φ⁻¹ on clamped values: its derivative grows like exp(Φ⁻¹(p)²/2) and would overflow to
    # inf (and 0·inf = NaN) for p near 0 or 1. Clamping at 1e-20 moves a hinge by < 0.02·σ/2.
    safe = top2.clamp(PROB_MIN, PROB_MAX)
    gap = torch.special.ndtri(safe[:, 0]) - torch.special.ndtri(safe[:, 1])
    return sigma / 2 * torch.relu(gamma - gap) * keep


def ddrs_radius_hinge(
    p: torch.Tensor, y: torch.Tensor, sigma: float | torch.Tensor, gamma: float
) -> torch.Tensor:
    """The DDRS script's robustness term (train_macer.py l. 131-138), a scalar: the mean over
    inputs whose argmax of the mean softmax `p` (b, K) is y of relu(γ − σ/2·gap), gap =
    Φ⁻¹(p̂_1) − Φ⁻¹(p̂_2) of the two largest entries clamped to [0.02, 0.98] (no gradient
    through a clamped entry); σ a float or a (b,) tensor. 0 when no input is correct (the
    script's mean over none is NaN)."""
    top2, idx = p.topk(2, dim=1)
    correct = (idx[:, 0] == y).to(p.dtype)
    clamped = top2.clamp(*DDRS_CLAMP)
    gap = torch.special.ndtri(clamped[:, 0]) - torch.special.ndtri(clamped[:, 1])
    hinge = torch.relu(gamma - per_input(sigma, gap) / 2 * gap)
    return (hinge * correct).sum() / correct.sum().clamp_min(1)


def copy_sigmas(sigma: float | torch.Tensor, k: int, pairing: str | None) -> float | torch.Tensor:
    """The σ of each of the k noise copies of each of b inputs: `sigma` itself (a float, or
    (b,): every copy at its input's σ_x) but with pairing "reference" a (b, k) tensor, the DDRS
    script's: train_macer.py l. 163-166 lays the batch out input-major (`batch.repeat((1, k, 1,
    1)).view(b·k, ...)`: row i·k + j is copy j of input i) and σ copy-major (`sigma.repeat((1,
    k, 1, 1)).view(-1, 1, 1, 1)`: row r gets σ[r mod b]), so copy j of input i takes
    σ[(i·k + j) mod b]."""
    if pairing != "reference" or not isinstance(sigma, torch.Tensor) or sigma.dim() == 0:
        return sigma
    return sigma.repeat(k).view(-1, k)


def lam_in_epoch(cfg: TrialConfig, epoch: int) -> float:
    """λ in 0-based `epoch`: 0 before the first epoch trained at the dropped LR when
    macer_deferred (jh-jeong's train_macer.py: `if args.deferred and epoch <=
    args.lr_step_size: lbd = 0`, its LR dropping entering lr_step_size + 1; the SmoothMix
    appendix C.2: "λ is initially set to 0, and changed to λ = 12.0 after the first learning
    rate decay"), else `lam`."""
    first_drop = cfg.lr_step_size + (cfg.lr_step_offset or 0)
    if required(cfg.macer_deferred, "macer_deferred") and epoch < first_drop:
        return 0.0
    return required(cfg.lam, "lam")


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    cfg = ctx.cfg
    k = required(cfg.m_train, "m_train")
    beta, gamma = required(cfg.macer_beta, "macer_beta"), required(cfg.macer_gamma, "macer_gamma")
    noise = draw_noise(x, k, copy_sigmas(ctx.sigma, k, cfg.ddrs_noise_pairing), ctx.generator)
    inputs, targets = noisy_copies(x, noise, y)
    logits = model(inputs)
    p = F.softmax(logits, dim=1).view(x.shape[0], k, -1).mean(dim=1)
    classification = -torch.log(p.gather(1, y.unsqueeze(1)).squeeze(1) + LOG_FLOOR).mean()
    if cfg.ddrs_macer_loss == "ddrs":  # DDRS training, the DDRS script's term (its default)
        robustness = ddrs_radius_hinge(p, y, ctx.sigma, gamma)
    else:
        robustness = radius_hinge(logits, y, k, ctx.sigma, beta, gamma).mean()
    return StepOutput(classification + lam_in_epoch(cfg, ctx.epoch) * robustness, logits, targets)
