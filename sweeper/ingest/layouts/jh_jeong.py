"""The jh-jeong repositories (smoothing-consistency, smoothmix): `<dataset>/<method>/...`
with the training settings as directories and the log named `noise_<σ>[_<run>]`, their
baselines included (e.g. `macer/num_<m>/lbd_<λ>/gamma_<γ>/beta_<β>/<arch>/noise_<σ>`).

    pgd_<k>_<T>[_<W>], ddn_<k>_<T>_<W>_<i>_<γ>   their SmoothAdv runs (method smoothadv):
                                   ε = k/256, T, warm-up W, DDN γ (the named DDN ε0 = i/256 is
                                   not used: train_salman.py resets it to the warmed-up ε every
                                   epoch, our default)
    lbd_<λ>, eta_<η>               λ and η (kept where the method uses them)
    gamma_<γ>, beta_<β>            MACER's γ and β
    consistency | stab, stability | smoothmix | macer   the method

The log itself is named `noise_<σ>[_<run>]` (locuslab's and SmoothAdv's are `sigma_<σ>` under
`noise_<σ>/test/`): such a model was trained by the jh-jeong code, whatever its method, with
that code's protocol (`PROTOCOL`): its StepLR stepped with `scheduler.step(epoch)` after each
epoch (train_macer.py l. 89, train_salman.py l. 118, train_cohen.py l. 73: the LR drops one
epoch late) and every network behind `get_normalize_layer`, (x − μ)/s (architectures.py), and
the numbers Jeong & Shin 2020 (appendix A.1) trained every CIFAR-10 model with, MACER's too:
150 epochs, batch 256, lr 0.1 dropping every 50 epochs, weight decay 1e-4 (the shared
`trainables.methods.PROTOCOL`, not MACER main.py's; their MNIST runs' 90 epochs at lr 0.01
are not told apart).
"""

from __future__ import annotations

import re

from sweeper.ingest.layouts.shared import NUM, Handler, number
from trainables.methods import PROTOCOL as SHARED_PROTOCOL


def _attack(m: re.Match) -> dict:
    attack, eps, steps, warmup, _init, gamma = m.groups()
    values = {"attack": attack.lower(), "epsilon": float(eps) / 256, "steps": int(steps)}
    values |= {"warmup_epochs": int(warmup)} if warmup else {}
    # the named initial norm never took effect (reset to the epoch's ε): ddn_init_norm stays None
    values |= {"ddn_gamma": float(gamma)} if gamma else {}
    return values | {"_method": "smoothadv"}


LOG_NAME = re.compile(rf"noise_{NUM}(?:_.*)?")
PROTOCOL = {**SHARED_PROTOCOL, "lr_step_offset": 1}

PATTERNS: list[tuple[str, Handler]] = [
    (rf"(pgd|ddn)_{NUM}_(\d+)(?:_(\d+))?(?:_{NUM}_{NUM})?", _attack),
    (rf"lbd_{NUM}", number("lam")),
    (rf"eta_{NUM}", number("eta")),
    (rf"gamma_{NUM}", number("macer_gamma")),
    (rf"beta_{NUM}", number("macer_beta")),
]
METHOD_WORDS = {
    "consistency": "consistency",
    "stab": "stability",
    "stability": "stability",
    "smoothmix": "smoothmix",
    "macer": "macer",
}
