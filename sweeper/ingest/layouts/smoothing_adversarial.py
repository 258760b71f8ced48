"""Hadisalman/smoothing-adversarial (SmoothAdv, Salman et al. 2019):
`PGD_<T>steps/eps_<k>/<dataset>/<arch>/noise_<σ>/test/sigma_<σ>` and its variants.

    PGD_<T>steps, DDN_<T>steps     method smoothadv, attack, steps T (also the singular
                                   `PGD_1step` of data/certify/imagenet); optional suffixes
      [_<E>epochs][_multiNoiseSamples|_multinoise]   epochs E
    eps_<k>                        ε = k/256 (the reference code's unit: eps_255 is 0.99609375,
                                   on ImageNet as on CIFAR-10: eps_127 is 0.49609375, not the
                                   paper's 0.5; deviation 3)
    replication                    method gaussian: the authors' Gaussian baselines on ImageNet
                                   (`replication/resnet50/noise_<σ>`)
    ImageNet                       a model of this layout on `imagenet` (its path names the data
                                   set, or --set dataset=imagenet) takes the `imagenet` space's
                                   protocol (`IMAGENET_PROTOCOL`: 90 epochs, ...), so it is that
                                   space's trial of the same settings
    self_training_PGD_<T>steps, self_training/PGD_<T>steps, weight_<η>
                                   self-training (η): needs --set pseudo_data, ...
    finetune_*                     pre-training then fine-tuning: needs --set init_from
    salman, smoothadv              method smoothadv
    PGD_<T>steps_baseAttackExp     appendix C.1's comparison (analyze.py's "no noise during
                                   attack"), attack and steps T, m_train 1, three trainings:
      with_noise                     SmoothAdv again (the same settings as PGD_<T>steps' own
                                     run): needs --set seed=... to tell the two runs apart
      without_noise/noise_<σ>        vanilla PGD + noise: method pgd_noise
      without_noise/noise_0.00       vanilla PGD (no noise in training), certified at several
                                     σ: method vanilla_pgd at the σ it is smoothed with
                                     (`vanilla`)
"""

from __future__ import annotations

import re

from sweeper.ingest.layouts.shared import NUM, Handler, number

# Training that a config needs more than the path to describe: the log is skipped unless
# --set gives the key (e.g. init_from: the trial_id of the pre-trained model).
NEEDS = {
    "self-training": ("pseudo_fingerprint", "pseudo_data, pseudo_fingerprint and pseudo_eta"),
    "pre-training then fine-tuning": ("init_from", "init_from (the pre-trained model's trial_id)"),
    "a second run of SmoothAdv": ("seed", "seed=1 (PGD_<T>steps holds a run of the same settings)"),
}


def needs(what: str, m: re.Match) -> dict:
    return {"_needs": (what, m.group(0))}


# What this layout's own parts (PGD_<T>steps, DDN_<T>steps, replication) mark in a path's
# values: its ImageNet models take `IMAGENET_PROTOCOL` (`protocol`), locuslab's do not.
LAYOUT = {"_layout": "smoothing_adversarial"}
# The `imagenet` space's fixed block without its environment (num_workers), which that space
# states is what the authors trained on ImageNet: ResNet-50, 90 epochs, batch 400 over 4 GPUs,
# lr 0.1 ×0.1 every 30 epochs, ε warmed up over 10, m_train 1. eval_subset (the per-epoch
# metric's 10,000 validation images) and data_parallel (4 DDP ranks for the code's
# DataParallel over 4 GPUs, deviation 9) are how sweeper runs it and part of a trial_id, so an
# imported model is the space's trial (tests/test_ingest_imagenet.py checks the two agree).
IMAGENET_PROTOCOL = {
    "arch": "resnet50",
    "epochs": 90,
    "batch_size": 400,
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 0.0001,
    "lr_step_size": 30,
    "lr_gamma": 0.1,
    "warmup_epochs": 10,
    "m_train": 1,
    "data_parallel": 4,
    "eval_subset": 10000,
}


def _attack(m: re.Match) -> dict:
    prefix, attack, steps, epochs = m.groups()
    values = {"attack": attack.lower(), "steps": int(steps), "_method": "smoothadv", **LAYOUT}
    values |= {"epochs": int(epochs)} if epochs else {}
    self_training = prefix is not None and "self_training" in prefix.lower()
    return values | (needs("self-training", m) if self_training else {})


def _base_attack(m: re.Match) -> dict:
    return {"attack": m.group(1).lower(), "steps": int(m.group(2)), "m_train": 1, **LAYOUT}


def vanilla(values: dict, methods: set[str]) -> tuple[dict, set[str]]:
    """A `without_noise/noise_0.00` model (trained without noise) is vanilla PGD smoothed at
    the σ of its log's name: method vanilla_pgd at that σ (its training uses no σ)."""
    if "pgd_noise" in methods and values.get("sigma") == 0 and values.get("sigma_cert"):
        return {**values, "sigma": values["sigma_cert"]}, (methods - {"pgd_noise"}) | {
            "vanilla_pgd"
        }
    return values, methods


def protocol(values: dict, dataset: str | None) -> dict:
    """A model of this layout trained on ImageNet (`dataset`: the --set one, else the path's)
    takes `IMAGENET_PROTOCOL` where its path does not say otherwise (`_30epochs`, ...)."""
    if values.get("_layout") == LAYOUT["_layout"] and dataset == "imagenet":
        return {**IMAGENET_PROTOCOL, **values}
    return values


PATTERNS: list[tuple[str, Handler]] = [
    (r"(pgd|ddn)_(\d+)steps?_baseattackexp", _base_attack),
    (r"(?:(.*)_)?(pgd|ddn)_(\d+)steps?(?:_(\d+)epochs)?(?:_multi(?:NoiseSamples|noise))?", _attack),
    (r"replication", lambda m: {"_method": "gaussian", **LAYOUT}),
    (r"with_noise", lambda m: {"_method": "smoothadv", **needs("a second run of SmoothAdv", m)}),
    (r"without_noise", lambda m: {"_method": "pgd_noise"}),
    (r"self_training", lambda m: needs("self-training", m)),
    (r"finetune_.*", lambda m: needs("pre-training then fine-tuning", m)),
    (rf"weight_{NUM}", lambda m: {"pseudo_eta": float(m.group(1))}),
    (rf"eps_{NUM}", number("epsilon", 256)),
]
METHOD_WORDS = {"salman": "smoothadv", "smoothadv": "smoothadv"}
