"""The credentials a value may carry (a storage or data URI, a Ray address, an MLflow
tracking URI): found (`has_credentials`) and hidden (`redact`). In the kernel, so that the
workers' data cache words a refused data URI redacted as the driver does; what the driver
refuses and how its messages hide a value: `sweeper.results.credentials`.

A credential is any of:

- userinfo before the host: `s3://AKIA:secret@bucket`, `ray://user:pass@host:10001`,
  `user:pass@host:10001`. In a remote URI every `@` before the query counts (a secret key
  holding an unescaped `/`, as AWS's often do, would otherwise pass as a path);
- a query parameter whose key looks secret (`SECRET_KEYS`, case-insensitively a part of the
  key): `?secret_key=`, `?aws_secret_access_key=`, `?access_token=`, `?client_secret=`,
  `?session_token=`, Azure's `?sig=`;
- userinfo inside a query value that is itself an address:
  `?endpoint_override=http://user:pass@host:9000`.

A local path (`/data/user@host`) or a local URI's path (`file:///tmp/a@b?c`) is never one.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from trainables.kernel import fileio

# Parts of a query key that mark its value as a secret (`key` covers access_key, secret_key,
# account_key, sse_customer_key; a false alarm only refuses an unusual option).
SECRET_KEYS = ("key", "secret", "token", "passw", "pwd", "credential", "session", "signature")
SECRET_NAMES = frozenset({"sig"})  # whole keys too short to match as a part (Azure SAS)
HIDDEN = "***"


def split_uri(value: str) -> tuple[str, str, str]:
    """(`scheme://` or '', the authority and path, the query and fragment with their '?'/'#')."""
    scheme, sep, rest = value.partition("://")
    head, rest = (scheme + sep, rest) if sep else ("", value)
    cut = re.search(r"[?#]", rest)
    return (head, rest[: cut.start()], rest[cut.start() :]) if cut else (head, rest, "")


def userinfo(value: str) -> str | None:
    """The `user[:password]` before the host of `value`, or None: a remote URI's text up to
    its last `@` before the query, a local URI's only within its host part, a scheme-less
    value's only when it holds no `/` (`user:pass@host:10001`, not a path)."""
    head, body, _ = split_uri(str(value))
    if not head:
        return body.rpartition("@")[0] if "@" in body and "/" not in body else None
    if not fileio.is_uri(value):  # file://, local://: only the host part can hold userinfo
        body = body.partition("/")[0]
    return body.rpartition("@")[0] if "@" in body else None


def secret_key(key: str) -> bool:
    """Whether a query key names a secret (`SECRET_KEYS`, `SECRET_NAMES`; any case)."""
    key = key.lower()
    return key in SECRET_NAMES or any(part in key for part in SECRET_KEYS)


def remote_query(value: str) -> str:
    """The query of a remote URI (a local URI's is part of its path)."""
    tail = split_uri(str(value))[2]
    return tail[1:].partition("#")[0] if tail.startswith("?") and fileio.is_uri(value) else ""


def secret_params(value: str) -> list[tuple[str, str]]:
    """The query parameters of `value` that carry a credential: a secret-looking key, or a
    value with userinfo (`endpoint_override=http://user:pass@host`)."""
    pairs = parse_qsl(remote_query(value), keep_blank_values=True)
    return [(k, v) for k, v in pairs if secret_key(k) or userinfo(v) is not None]


def has_credentials(value: str | None) -> bool:
    """Whether `value` carries a credential (see the module docstring)."""
    if not value:
        return False
    return userinfo(str(value)) is not None or bool(secret_params(str(value)))


def redact(value: str) -> str:
    """`value` for a message: userinfo shown as `***@`, and a remote URI's whole query and
    fragment as `?***` (a query may hold a secret under a key no list foresees), with
    `***@` before the host then too, so the shape says something was hidden. Anything else
    (a path, a local URI's path and query, a plain address) is returned as it is."""
    value = str(value)
    head, body, tail = split_uri(value)
    remote_tail = tail if head and fileio.is_uri(value) else ""
    if userinfo(value) is None and not remote_tail:
        return value
    if not head or not fileio.is_uri(value):  # `user:pass@host`, `file://user@host/path`
        host = body.partition("/")[0] if head else body
        rest = body[len(host) :] + tail
        return f"{head}{HIDDEN}@{host.rpartition('@')[2]}{rest}"
    mark = "?" if remote_tail.startswith("?") else "#"
    return f"{head}{HIDDEN}@{body.rpartition('@')[2]}" + (f"{mark}{HIDDEN}" if remote_tail else "")
