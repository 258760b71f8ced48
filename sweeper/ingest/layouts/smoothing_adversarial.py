"""Hadisalman/smoothing-adversarial (SmoothAdv, Salman et al. 2019):
`PGD_<T>steps/eps_<k>/<dataset>/<arch>/noise_<σ>/test/sigma_<σ>` and its variants.

    PGD_<T>steps, DDN_<T>steps     method smoothadv, attack, steps T; optional suffixes
      [_<E>epochs][_multiNoiseSamples|_multinoise]   epochs E
    eps_<k>                        ε = k/256 (the reference code's unit: eps_255 is 0.99609375)
    self_training_PGD_<T>steps, weight_<η>   self-training (η): needs --set pseudo_data, ...
    finetune_*                     pre-training then fine-tuning: needs --set init_from
    salman, smoothadv              method smoothadv
"""

from __future__ import annotations

import re

from sweeper.ingest.layouts.shared import NUM, Handler, number

# Training that a config needs more than the path to describe: the log is skipped unless
# --set gives the key (e.g. init_from: the trial_id of the pre-trained model).
NEEDS = {
    "self-training": ("pseudo_fingerprint", "pseudo_data, pseudo_fingerprint and pseudo_eta"),
    "pre-training then fine-tuning": ("init_from", "init_from (the pre-trained model's trial_id)"),
}


def needs(what: str, m: re.Match) -> dict:
    return {"_needs": (what, m.group(0))}


def _attack(m: re.Match) -> dict:
    prefix, attack, steps, epochs = m.groups()
    values = {"attack": attack.lower(), "steps": int(steps), "_method": "smoothadv"}
    values |= {"epochs": int(epochs)} if epochs else {}
    self_training = prefix is not None and "self_training" in prefix.lower()
    return values | (needs("self-training", m) if self_training else {})


PATTERNS: list[tuple[str, Handler]] = [
    (r"(?:(.*)_)?(pgd|ddn)_(\d+)steps(?:_(\d+)epochs)?(?:_multi(?:NoiseSamples|noise))?", _attack),
    (r"finetune_.*", lambda m: needs("pre-training then fine-tuning", m)),
    (rf"weight_{NUM}", lambda m: {"pseudo_eta": float(m.group(1))}),
    (rf"eps_{NUM}", number("epsilon", 256)),
]
METHOD_WORDS = {"salman": "smoothadv", "smoothadv": "smoothadv"}
