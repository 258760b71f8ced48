"""Signed statements: a step's outputs bound to its inputs by sha256 (issue 38; docs/security.md).

A statement says what one step of a sweep made from what: `{step, inputs: {name: sha256},
outputs: {name: sha256}, settings, code}`. It is serialised as canonical JSON (keys sorted, no
whitespace, UTF-8, no NaN or infinity: the same statement is always the same bytes) and signed
with Ed25519 (`cryptography`) in a DSSE envelope (the in-toto/sigstore envelope:
`{payloadType, payload (base64), signatures: [{keyid, sig}]}`, the signature over DSSE's
pre-authentication encoding, so a payload signed as one type cannot be replayed as another).

The key is the one thing trusted: whoever may write the storage is not. The secret key lives
outside the storage, in `SWEEPER_SIGNING_KEY` (CI, clusters: the PEM text, or the base64 of
the 32-byte Ed25519 seed) or `<config>/sweeper/signing-key.pem` (mode 0600; `sweeper key
init`; <config> is $XDG_CONFIG_HOME, else ~/.config); a verifier needs only the public key.
Torch-free: driver and workers sign with the same code."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAYLOAD_TYPE = "application/vnd.sweeper.statement.v1+json"
KEY_ENV = "SWEEPER_SIGNING_KEY"
KEY_FILE = "signing-key.pem"
PUBLIC_FILE = "signing-key.pub.pem"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class AttestationError(ValueError):
    """A statement or envelope that does not verify, or a key that cannot be read."""


def canonical(value: Any) -> bytes:
    """The one byte string of a JSON value: keys sorted, no whitespace, UTF-8; NaN and
    infinity refused (they have no JSON spelling)."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The file's sha256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Statement:
    """What `step` made (`outputs`) from what (`inputs`), each a name → sha256 (hex), under
    `settings` (JSON values) by `code` (the code's version)."""

    step: str
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    code: str = ""

    def __post_init__(self) -> None:
        if not self.step:
            raise AttestationError("a statement names its step")
        for side in (self.inputs, self.outputs):
            for name, digest in side.items():
                if not isinstance(name, str) or not _DIGEST.match(str(digest)):
                    raise AttestationError(f"{name!r}: not a sha256 digest: {digest!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "inputs": dict(self.inputs),
            "outputs": dict(self.outputs),
            "settings": dict(self.settings),
            "code": self.code,
        }

    @classmethod
    def from_json(cls, value: object) -> Statement:
        if not isinstance(value, dict) or set(value) != {
            "step",
            "inputs",
            "outputs",
            "settings",
            "code",
        }:
            raise AttestationError("not a statement (its fields differ)")
        if not all(isinstance(value[k], dict) for k in ("inputs", "outputs", "settings")):
            raise AttestationError("a statement's inputs, outputs and settings are objects")
        if not isinstance(value["step"], str) or not isinstance(value["code"], str):
            raise AttestationError("a statement's step and code are strings")
        return cls(
            value["step"], value["inputs"], value["outputs"], value["settings"], value["code"]
        )


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def _key_id(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


class PublicKey:
    """An Ed25519 public key: verifies envelopes, never signs."""

    def __init__(self, key: Any):
        from cryptography.hazmat.primitives import serialization

        self.key = key
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = _key_id(raw)

    @classmethod
    def from_pem(cls, pem: bytes) -> PublicKey:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            key = serialization.load_pem_public_key(pem)
        except ValueError as e:
            raise AttestationError(f"not a PEM public key: {e}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise AttestationError("not an Ed25519 public key")
        return cls(key)

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def verify(self, envelope: object) -> Statement:
        """The statement an envelope signed by this key carries (AttestationError otherwise:
        another key, another payload type, a changed byte, not canonical)."""
        from cryptography.exceptions import InvalidSignature

        payload_type, body, signatures = _unpack(envelope)
        if payload_type != PAYLOAD_TYPE:
            raise AttestationError(f"payload type {payload_type!r}, not a sweeper statement")
        ours = [s for s in signatures if s[0] == self.key_id]
        if not ours:
            raise AttestationError("not signed by this key")
        try:
            self.key.verify(ours[0][1], pae(payload_type, body))
        except InvalidSignature:
            raise AttestationError("the signature does not match the statement") from None
        try:
            value = json.loads(body)
        except ValueError:
            raise AttestationError("the statement is not JSON") from None
        if canonical(value) != body:
            raise AttestationError("the statement is not in canonical form")
        return Statement.from_json(value)


def _unpack(envelope: object) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    if not isinstance(envelope, dict) or not isinstance(envelope.get("signatures"), list):
        raise AttestationError("not a signed envelope")
    try:
        body = base64.b64decode(str(envelope["payload"]), validate=True)
        signatures = [
            (str(s["keyid"]), base64.b64decode(str(s["sig"]), validate=True))
            for s in envelope["signatures"]
        ]
    except (KeyError, TypeError, binascii.Error):
        raise AttestationError("a malformed envelope") from None
    return str(envelope.get("payloadType")), body, signatures


class SigningKey:
    """An Ed25519 private key: signs statements. Never written to the storage or a log; its
    repr names only its key id."""

    def __init__(self, key: Any):
        self.key = key
        self.public = PublicKey(key.public_key())
        self.key_id = self.public.key_id

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id})"

    def __reduce__(self):  # never pickled (Tune's state, Ray's object store)
        raise TypeError("a signing key is not pickled: workers read it from their environment")

    @classmethod
    def generate(cls) -> SigningKey:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: str) -> SigningKey:
        """From PEM (PKCS#8, unencrypted) or the base64 of the 32-byte seed."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        text = text.strip()
        try:
            if text.startswith("-----BEGIN"):
                key = serialization.load_pem_private_key(text.encode(), password=None)
            else:
                key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(text, validate=True))
        except (ValueError, TypeError, binascii.Error):
            raise AttestationError("not an Ed25519 private key (PEM or base64 seed)") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise AttestationError("not an Ed25519 private key")
        return cls(key)

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def sign(self, statement: Statement) -> dict[str, Any]:
        """The DSSE envelope of `statement`, signed."""
        body = canonical(statement.to_json())
        sig = self.key.sign(pae(PAYLOAD_TYPE, body))
        return {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(body).decode("ascii"),
            "signatures": [{"keyid": self.key_id, "sig": base64.b64encode(sig).decode("ascii")}],
        }


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where `sweeper key init` keeps the key pair: $XDG_CONFIG_HOME/sweeper, else
    ~/.config/sweeper."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "sweeper"


def load_signing_key(environ: Mapping[str, str] | None = None) -> SigningKey | None:
    """The signing key of this process: $SWEEPER_SIGNING_KEY, else the key file under
    `config_dir`; None when there is neither (results are then unattested)."""
    env = os.environ if environ is None else environ
    if text := env.get(KEY_ENV, "").strip():
        return SigningKey.from_text(text)
    path = config_dir(env) / KEY_FILE
    if not path.is_file():
        return None
    if path.stat().st_mode & 0o077:
        raise AttestationError(f"{path}: readable by others; chmod 600 {path}")
    return SigningKey.from_text(path.read_text())


@dataclass(frozen=True)
class KeyPair:
    """Where `init_key` wrote the pair, and the key's id."""

    secret: Path
    public: Path
    key_id: str


def init_key(directory: Path) -> KeyPair:
    """A new key pair under `directory` (made 0700): the secret 0600, the public 0644. Never
    overwrites: an existing secret is an error (AttestationError) naming it."""
    secret, public = directory / KEY_FILE, directory / PUBLIC_FILE
    if secret.exists() or secret.is_symlink():
        raise AttestationError(f"{secret} exists; a key is never overwritten (move it away first)")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = SigningKey.generate()
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.pem())
    tmp = public.with_name(public.name + ".tmp")
    tmp.write_bytes(key.public.pem())
    os.chmod(tmp, 0o644)
    os.replace(tmp, public)
    return KeyPair(secret, public, key.key_id)
