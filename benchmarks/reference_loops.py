"""The authors' loops, re-implemented for the benchmarks to compare against.

Written from reading the public reference code, not copied from it:
- CERTIFY as in `code/core.py` of locuslab/smoothing (Cohen et al.), which
  Hadisalman/smoothing-adversarial repeats unchanged: one input per call; per forward batch
  the input is repeated `this_batch_size` times, fresh Gaussian noise of that shape is drawn
  and added, the predictions are copied to the host and counted in a Python loop; the
  Clopper-Pearson bound comes from statsmodels' proportion_confint.
- One SmoothAdv-PGD training batch as `code/train_pgd.py` (`train`) runs it with
  `--num-noise-vec m --train-multi-noise --adv-training --attack PGD`: the loader batch is cut
  into m minibatches of B/m inputs, each repeated m times (B samples), noise drawn for every
  sample; the model is put in eval mode with its parameters frozen (`requires_grad_(model,
  False)`) for `PGD_L2._attack_mutlinoise` (T steps of SGD on δ with learning rate 2ε/T, the
  loss −NLL of the log of the mean softmax over the m noisy copies, the δ gradient renormed
  per input, clamped to [0, 1] and renormed to ε), then back to train mode for the
  cross-entropy step on all B noisy adversarial samples.
Both run in fp32, eagerly, in NCHW, exactly as the reference does.
"""

from __future__ import annotations

from math import ceil

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import norm
from statsmodels.stats.proportion import proportion_confint


def _count(predictions: np.ndarray, num_classes: int) -> np.ndarray:
    counts = np.zeros(num_classes, dtype=int)
    for label in predictions:  # the reference counts one prediction at a time
        counts[label] += 1
    return counts


def sample_noise(model, x, num: int, batch_size: int, sigma: float, num_classes: int):
    """Per-class votes of `model` on `num` noisy copies of x (C, H, W)."""
    with torch.no_grad():
        counts = np.zeros(num_classes, dtype=int)
        for _ in range(ceil(num / batch_size)):
            this_batch_size = min(batch_size, num)
            num -= this_batch_size
            batch = x.repeat((this_batch_size, 1, 1, 1))
            noise = torch.randn_like(batch, device=x.device) * sigma
            predictions = model(batch + noise).argmax(1)
            counts += _count(predictions.cpu().numpy(), num_classes)
        return counts


def certify(model, x, n0: int, n: int, alpha: float, batch_size: int, sigma: float, k: int):
    """(prediction, radius) of CERTIFY for one input, the reference's way."""
    model.eval()
    c_hat = sample_noise(model, x, n0, batch_size, sigma, k).argmax().item()
    n_a = sample_noise(model, x, n, batch_size, sigma, k)[c_hat].item()
    p_lower = proportion_confint(n_a, n, alpha=2 * alpha, method="beta")[0]
    return (-1, 0.0) if p_lower < 0.5 else (c_hat, sigma * norm.ppf(p_lower))


def _requires_grad(model, flag: bool) -> None:
    for p in model.parameters():
        p.requires_grad_(flag)


def pgd_multinoise(model, inputs, labels, noise, m: int, epsilon: float, steps: int):
    """`PGD_L2._attack_mutlinoise`: inputs (B·m, C, H, W) are each of the B/m inputs repeated m
    times; returns the adversarial inputs, repeated the same way."""
    delta = torch.zeros((len(labels), *inputs.shape[1:]), requires_grad=True, device=inputs.device)
    optimizer = torch.optim.SGD([delta], lr=epsilon / steps * 2)
    for _ in range(steps):
        adv = inputs + delta.repeat(1, m, 1, 1).view_as(inputs) + noise
        logits = model(adv)
        logits.argmax(1).reshape(-1, m).mode(1)  # computed by the reference, used by DDN only
        softmax = F.softmax(logits, dim=1)
        average = softmax.reshape(-1, m, logits.shape[-1]).mean(1, keepdim=True).squeeze(1)
        loss = -F.nll_loss(torch.log(average.clamp(min=1e-20)), labels)
        optimizer.zero_grad()
        loss.backward()
        grad_norms = delta.grad.view(len(labels), -1).norm(p=2, dim=1)
        delta.grad.div_(grad_norms.view(-1, 1, 1, 1))
        if (grad_norms == 0).any():
            delta.grad[grad_norms == 0] = torch.randn_like(delta.grad[grad_norms == 0])
        optimizer.step()
        delta.data.add_(inputs[::m]).clamp_(0, 1).sub_(inputs[::m])
        delta.data.renorm_(p=2, dim=0, maxnorm=epsilon)
    # Still attached to δ, as the reference returns it: the training backward reaches δ too.
    return inputs + delta.repeat(1, m, 1, 1).view_as(inputs)


def smoothadv_batch(model, optimizer, x, y, m: int, epsilon: float, steps: int, sigma: float):
    """One loader batch (x, y) of train_pgd.py's `train` loop (multi-noise PGD training)."""
    model.train()
    _requires_grad(model, True)
    size = len(x) // m
    for i in range(m):
        inputs, targets = x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]
        inputs = inputs.repeat((1, m, 1, 1)).view(len(inputs) * m, *x.shape[1:])
        noise = torch.randn_like(inputs, device=x.device) * sigma
        _requires_grad(model, False)
        model.eval()
        inputs = pgd_multinoise(model, inputs, targets, noise, m, epsilon, steps)
        model.train()
        _requires_grad(model, True)
        outputs = model(inputs + noise)
        targets = targets.unsqueeze(1).repeat(1, m).reshape(-1, 1).squeeze()
        loss = F.cross_entropy(outputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
