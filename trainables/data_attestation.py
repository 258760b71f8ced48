"""The signed data manifest: a bucket's data set read only as the key holder put it (issue 38).

Whoever may write the bucket can rewrite a test batch and the manifest together: the manifest
then vouches for itself. With a signing key, `sweeper data put` signs the manifest it writes
(step "data": the manifest's sha256, for that data URI) into `<url>/data.attestation.json`,
and every fetch in a process holding the key (the driver before Ray starts, each node's
first fetch) refuses a manifest whose statement is missing, of another URI, or not of its
bytes. Without a key nothing is signed or checked: the data reads as before, and the results
made from it are unattested anyway. Torch-free."""

from __future__ import annotations

import json

from trainables.attestations import MAX_STATEMENT, attest, attestation_path
from trainables.kernel import fileio
from trainables.kernel.attestation import SigningKey, load_signing_key, sha256_bytes

STEP = "data"
MANIFEST = "sweeper-data.json"


def sign_manifest(url: str, raw: bytes, key: SigningKey | None = None) -> str | None:
    """Sign the manifest `raw` just written at `url` (a checked data URI); the statement's
    path, None without a key."""
    return attest(url, STEP, {}, {MANIFEST: sha256_bytes(raw)}, {"url": url}, key)


def manifest_problem(url: str, raw: bytes, key: SigningKey | None = None) -> str | None:
    """Why the manifest `raw` read at `url` is not the one the key holder signed for `url`
    (with `key`, else this process's key), or None; always None without a key."""
    key = key or load_signing_key()
    if key is None:
        return None
    where = attestation_path(url, STEP)
    fix = (
        f"put it again with key {key.public.key_id}: sweeper data put DATASET --from DIR --to {url}"
    )
    try:
        envelope = json.loads(fileio.read_bytes(where, MAX_STATEMENT))
        statement = key.public.verify(envelope)
    except FileNotFoundError:
        return f"the data manifest at {url} is not signed ({where} is missing): {fix}"
    except ValueError as e:
        return f"the data manifest's statement {where} does not verify ({e}): {fix}"
    if statement.step != STEP or statement.settings.get("url") != url:
        return f"{where} is not the statement of the data at {url}: {fix}"
    if statement.outputs.get(MANIFEST) != sha256_bytes(raw):
        return f"the data manifest at {url} was changed after it was signed: {fix}"
    return None
