"""The typed cert_id (`trainables.kernel.cert_ids`): one module spells a certification setting
and reads it back; the names it writes are the ones every stored file already has, and every
shipped space's trial ids stay what they were (issue 41 item 2)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from sweeper.plan.grid import expand
from sweeper.plan.run_settings import run_settings
from sweeper.plan.spaces import available_spaces, load_space
from sweeper.results.envelope_records import delta_of
from sweeper.results.provenance import most_points
from trainables.kernel.cert_ids import (
    DECISION_RADII,
    CertId,
    Envelope,
    is_imported,
    strategy_of,
)
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.stage_settings import CertifySpec

# The digest of every shipped space's (and its smoke run's) sorted trial ids, resolved configs
# (`to_dict`, the Parquet's identity columns) and cert_ids, computed by `_shipped_record` at
# the commit before issue 41 item 2 (7244ffe). A change would orphan stored trials or rows:
# only change it on purpose (a new or edited space changes it too, and says so here).
SHIPPED_DIGEST = "efbf3229b50db504c30d59bfc6ba8ae268a7c811ab4470cb67f4f48023909181"

# cert_ids of settings beyond the shipped spaces' (each kind of segment), as the code before
# the typed cert_id spelled them (7244ffe): they name files on users' storage.
PINNED = {
    "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500": CertifySpec(),
    "sigma-0.5_n0-7_n-1234_alpha-1e-05_skip-3_max-all": CertifySpec(
        sigma=0.5, max_points=None, alpha=1e-05, n=1234, n0=7, skip=3
    ),
    "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500_prec-bf16_cl_compiled": (
        CertifySpec(precision="bf16", channels_last=True, compile=True)
    ),
    "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500_envelope": CertifySpec(
        strategy="envelope"
    ),
    "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500_envelope-delta-0.05-pilots-10-30"
    "-radii-0-0.5-1.25": CertifySpec(
        strategy="envelope", delta=0.05, pilots=(10, 30), radii=(0.0, 0.5, 1.25)
    ),
    "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500_ddrs-K100-lr0.0001-n1-min0.001": (
        CertifySpec(ddrs=DDRSSettings())
    ),
    "sigma-0.12_n0-100_n-100000_alpha-0.001_skip-20_max-500_prec-fp16_ddrs-K7-lr1e-05-n3"
    "-min0.0005": CertifySpec(
        ddrs=DDRSSettings(iterations=7, lr=1e-05, samples=3, min_sigma=0.0005),
        sigma=0.12,
        precision="fp16",
    ),
    "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500_prec-bf16_envelope-delta-1e-05"
    "-radii-0-1e-05": CertifySpec(
        strategy="envelope", precision="bf16", delta=1e-05, radii=(0.0, 1e-05)
    ),
}


def _shipped_record() -> dict:
    record = {}
    for name in available_spaces():
        spec = load_space(name)
        record[name] = {}
        for label, s in (("space", spec), ("smoke", spec.smoked())):
            trials = expand(s)
            configs = sorted((t.trial_id, t.to_dict()) for t in trials)
            record[name][label] = {
                "trials": sorted(t.trial_id for t in trials),
                "configs": hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest(),
                "cert_ids": [v.cert_id for v in s.certify.variants()] + [s.certify.draws_id],
            }
    return record


def _shipped_certify() -> list[CertifySpec]:
    specs = [load_space(name) for name in available_spaces()]
    return [v for s in specs for t in (s, s.smoked()) for v in t.certify.variants()]


def test_the_shipped_spaces_keep_their_trial_ids_configs_and_cert_ids():
    record = json.dumps(_shipped_record(), sort_keys=True)
    assert hashlib.sha256(record.encode()).hexdigest() == SHIPPED_DIGEST, record[:2000]


@pytest.mark.parametrize("cert_id", sorted(PINNED))
def test_every_kind_of_setting_keeps_its_cert_id(cert_id):
    spec = PINNED[cert_id]
    assert spec.problems() == []
    assert spec.cert_id == cert_id
    assert CertId.parse(cert_id) == spec.cert
    assert str(spec.cert) == cert_id


def test_every_shipped_setting_reads_back_as_itself():
    certify = _shipped_certify()
    assert len(certify) == 2 * len(available_spaces())
    for spec in certify:
        parsed = CertId.parse(spec.cert_id)
        assert parsed == spec.cert and parsed.text == spec.cert_id
        assert (parsed.n, parsed.n0, parsed.alpha, parsed.sigma) == (
            spec.n,
            spec.n0,
            spec.alpha,
            spec.sigma,
        )
        assert (parsed.skip, parsed.max_points, parsed.strategy) == (
            spec.skip,
            spec.max_points,
            spec.strategy,
        )


def test_every_variant_of_a_shipped_setting_reads_back_as_itself():
    """Each shipped setting with each kind of segment added: run settings, the envelope
    strategy (default and not), DDRS."""
    extra = [
        {"precision": "bf16"},
        {"channels_last": True, "compile": True},
        {"strategy": "envelope"},
        {"strategy": "envelope", "delta": 0.2, "pilots": (3, 9), "radii": (0.0, 0.3)},
        {"ddrs": DDRSSettings(iterations=3, lr=0.5, samples=2, min_sigma=0.01)},
        {"sigma": 0.37, "max_points": None},
    ]
    for base in _shipped_certify():
        for change in extra:
            spec = dataclasses.replace(base, **change)
            assert spec.problems() == [], (spec, change)
            assert CertId.parse(spec.cert_id) == spec.cert, spec.cert_id


def test_the_envelope_strategy_draws_as_full_does():
    full = CertifySpec(n=500)
    envelope = dataclasses.replace(full, strategy="envelope", delta=0.05, pilots=(5, 50))
    assert envelope.draws_id == full.draws_id == full.cert_id
    assert envelope.cert.without_strategy() == full.cert
    assert (
        CertifySpec(strategy="envelope", radii=DECISION_RADII).cert
        == CertifySpec(strategy="envelope").cert
    )  # the default grid spelled out names the same files
    assert Envelope().tag == "_envelope"


def test_only_the_spelling_it_writes_names_a_setting():
    base = "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500"
    assert CertId.parse(base) == CertifySpec().cert
    for wrong in [
        base.replace("n-100000", "n-0100000"),  # a number not as `:g` prints it
        base.replace("alpha-0.001", "alpha-1e-3"),
        base.replace("max-500", "max-500.0"),
        base + "_prec-fp32",  # a default spelled out
        base + "_prec-fp64",  # no such precision
        base + "_compiled_cl",  # segments out of order
        base + "_envelope-delta-0.01",  # the default δ spelled out
        base + "_envelope-radii-" + "-".join(f"{r:g}" for r in DECISION_RADII),
        base + "_cl_cl",
        base + "_ddrs-K1-lr0.1-n1-min0",  # σ_x ≥ 0 names no setting
        base + "_unknown",
        base.replace("skip-20_", ""),
        base.replace("sigma-train", "sigma-1_000"),
        "imported-sigma-0.25-n-100000-alpha-1",
        "imported-sigma-0.25-n-1e5-alpha-0.001",
        "",
        "sigma",
    ]:
        assert CertId.parse(wrong) is None, wrong


def test_what_the_reads_take_from_a_cert_id():
    imported = CertId.imported_from(0.25, 100_000, 0.001)
    assert imported.text == "imported-sigma-0.25-n-100000-alpha-0.001"
    assert CertId.parse(imported.text) == imported and imported.imported
    assert is_imported(imported.text) and not is_imported(CertifySpec().cert_id)
    fast = CertifySpec(precision="bf16", compile=True, strategy="envelope", delta=0.2)
    assert strategy_of(fast.cert_id) == "envelope" and strategy_of(imported.text) == "full"
    assert run_settings(fast.cert_id) == "bf16, compiled"
    assert run_settings(imported.text) == "fp32" and run_settings("nothing") == "unknown"
    assert delta_of(fast.cert_id) == 0.2 and delta_of(CertifySpec().cert_id) is None
    assert delta_of(CertifySpec(strategy="envelope").cert_id) == 0.01
    assert most_points(CertifySpec(skip=3, max_points=None).cert_id, "digits") == 150
    assert most_points(imported.text, "digits") == 450
