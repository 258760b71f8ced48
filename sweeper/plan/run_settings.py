"""How certification runs the base classifier (precision, channels_last, compile): the values,
their checks against the resources, and reading them back from a cert_id. Torch-free; the
settings themselves are `CertifySpec` fields (`sweeper.plan.spec`), run by `trainables.runtime`."""

from __future__ import annotations

from typing import Any

from trainables.kernel.cert_ids import CertId


def precision_problem(certify: Any, resources: Any) -> str | None:
    """fp16 certification (a CertifySpec) where the tasks get no GPU (Resources): every shard
    would fail on its worker."""
    if certify.precision == "fp16" and not resources.gpu:
        return (
            "certify.precision fp16 needs CUDA, but the certification tasks get no GPU "
            "(resources.gpu 0 or --cpu-only): use precision fp32 (or bf16 on a CPU with bf16 "
            "instructions)"
        )
    return None


def run_settings(cert_id: str) -> str:
    """How the base classifier of a certification setting was run, from its cert_id: e.g.
    "fp32" or "bf16, channels_last, compiled"; "unknown" for a cert_id naming no setting."""
    setting = CertId.parse(cert_id)
    return "unknown" if setting is None else setting.run_settings()
