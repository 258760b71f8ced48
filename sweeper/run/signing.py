"""The driver's signing key on its way to the workers (issue 38; docs/security.md).

The key is read once, before Ray starts, from $SWEEPER_SIGNING_KEY or the key file of `sweeper
key init` (`trainables.kernel.attestation.load_signing_key`), and handed to every worker
process as that same environment variable through Ray's runtime environment: never through
the storage, which is not trusted, and never in Tune's state. The workers sign what they make
(`trainables.attestations`)."""

from __future__ import annotations

from trainables.kernel.attestation import KEY_ENV, AttestationError, load_signing_key
from trainables.kernel.errors import ProblemsError


def workers_signing_env() -> dict | None:
    """Ray's `runtime_env` giving every worker the driver's key; None without a key (the
    results are then unattested). A key that cannot be read is a ProblemsError (exit 2),
    raised before Ray starts."""
    try:
        key = load_signing_key()
    except (AttestationError, OSError) as e:
        raise ProblemsError([f"signing key: {e} (see `sweeper key init`)"]) from None
    return None if key is None else {"env_vars": {KEY_ENV: key.pem().decode()}}
