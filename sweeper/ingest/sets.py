"""`sweeper import --set key=value`: what the path cannot say, checked before any log is read.

A key is a TrialConfig field or a certification setting (n0, n, alpha: default the papers'
100, 100000, 0.001; sigma_cert: default the σ in the log's name, else the training σ); a value
is a YAML scalar, and a word that reads as a number (1e-3) is that number. The certification
settings are stored with the rows and bound their radii, so each is checked here: n0 and n
integers >= 1, alpha in (0, 1), sigma_cert > 0. `final=true`: the logs are a final step's
re-certifications on the report points (issue 40; their cert_id ends `_final-skip-1-max-all`,
beside the selection's logs of the same models imported without it).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import yaml

from sweeper.results.credentials import data_credentials_problem
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ProblemsError

PAPER_CERTIFY = {"n0": 100, "n": 100_000, "alpha": 0.001}
CERT_KEYS = ("n0", "n", "alpha", "sigma_cert", "final")
TRIAL_KEYS = tuple(sorted(f.name for f in fields(TrialConfig)))


class IngestError(ProblemsError):
    """Bad input to an import; `problems` has one line each. Nothing was written."""


def parse_sets(items: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`--set key=value` items -> (TrialConfig values, certification values); one problem per
    bad item. Values are YAML scalars; a word that reads as a number (1e-3) is that number."""
    trial: dict[str, Any] = {}
    cert: dict[str, Any] = {}
    problems: list[str] = []
    for item in items:
        key, sep, text = (s.strip() for s in item.partition("="))
        value = _scalar(text) if sep else None
        if secret := data_credentials_problem(f"--set {key}", text):
            problems.append(secret)  # first: the other lines below echo the value
        elif not sep or not key:
            problems.append(f"--set {item!r}: expected key=value")
        elif key not in TRIAL_KEYS and key not in CERT_KEYS:
            problems.append(
                f"--set {key}: unknown key (valid: {', '.join(TRIAL_KEYS + CERT_KEYS)})"
            )
        elif value is _BAD:
            problems.append(
                f"--set {key}: expected one number, word, true/false or null, got {text!r}"
            )
        elif key in trial or key in cert:
            problems.append(f"--set {key}: given twice")
        else:
            (cert if key in CERT_KEYS else trial)[key] = value
    problems += _cert_problems({**PAPER_CERTIFY, **cert})
    if problems:
        raise IngestError(problems)
    return trial, cert


_BAD = object()  # not a scalar


def _scalar(text: str) -> Any:
    try:
        value = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return _BAD
    if isinstance(value, str):
        try:
            return float(value) if math.isfinite(float(value)) else value
        except ValueError:
            return value
    return value if value is None or isinstance(value, (bool, int, float)) else _BAD


def _cert_problems(cert: dict[str, Any]) -> list[str]:
    p = []
    for key in ("n0", "n"):
        if not (type(cert[key]) is int and cert[key] >= 1):
            p.append(f"--set {key}: must be an integer >= 1 (got {cert[key]!r})")
    alpha = cert["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        p.append(f"--set alpha: must be a number in (0, 1) (got {alpha!r})")
    if cert.get("final", False) not in (True, False):
        p.append(f"--set final: must be true or false (got {cert['final']!r})")
    s = cert.get("sigma_cert")
    if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0):
        p.append(f"--set sigma_cert: must be a number > 0 (got {s!r})")
    return p
