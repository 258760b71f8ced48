"""Credentials inside the values a user passes on the command line: a storage URI, a Ray
address, an MLflow tracking URI. Found (`has_credentials`), refused (`credentials_problem`)
and hidden in every message (`redact`, `scrub`).

sweeper stores what it is given: the command line in the experiment's lease, the storage in
every trial's state and in Ray Tune's (`tune/run-*/tuner.pkl`), the tracking URI in Tune's
callbacks. So a value that carries a secret is refused, with the environment variables that
carry it instead, and a message that echoes such a value shows it through `redact`.

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


def _split(value: str) -> tuple[str, str, str]:
    """(`scheme://` or '', the authority and path, the query and fragment with their '?'/'#')."""
    scheme, sep, rest = value.partition("://")
    head, rest = (scheme + sep, rest) if sep else ("", value)
    cut = re.search(r"[?#]", rest)
    return (head, rest[: cut.start()], rest[cut.start() :]) if cut else (head, rest, "")


def userinfo(value: str) -> str | None:
    """The `user[:password]` before the host of `value`, or None: a remote URI's text up to
    its last `@` before the query, a local URI's only within its host part, a scheme-less
    value's only when it holds no `/` (`user:pass@host:10001`, not a path)."""
    head, body, _ = _split(str(value))
    if not head:
        return body.rpartition("@")[0] if "@" in body and "/" not in body else None
    if not fileio.is_uri(value):  # file://, local://: only the host part can hold userinfo
        body = body.partition("/")[0]
    return body.rpartition("@")[0] if "@" in body else None


def secret_key(key: str) -> bool:
    """Whether a query key names a secret (`SECRET_KEYS`, `SECRET_NAMES`; any case)."""
    key = key.lower()
    return key in SECRET_NAMES or any(part in key for part in SECRET_KEYS)


def _query(value: str) -> str:
    """The query of a remote URI (a local URI's is part of its path)."""
    tail = _split(str(value))[2]
    return tail[1:].partition("#")[0] if tail.startswith("?") and fileio.is_uri(value) else ""


def secret_params(value: str) -> list[tuple[str, str]]:
    """The query parameters of `value` that carry a credential: a secret-looking key, or a
    value with userinfo (`endpoint_override=http://user:pass@host`)."""
    pairs = parse_qsl(_query(value), keep_blank_values=True)
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
    head, body, tail = _split(value)
    remote_tail = tail if head and fileio.is_uri(value) else ""
    if userinfo(value) is None and not remote_tail:
        return value
    if not head or not fileio.is_uri(value):  # `user:pass@host`, `file://user@host/path`
        host = body.partition("/")[0] if head else body
        rest = body[len(host) :] + tail
        return f"{head}{HIDDEN}@{host.rpartition('@')[2]}{rest}"
    mark = "?" if remote_tail.startswith("?") else "#"
    return f"{head}{HIDDEN}@{body.rpartition('@')[2]}" + (f"{mark}{HIDDEN}" if remote_tail else "")


def scrub(text: str, *values: str | None) -> str:
    """`text` (a message from Ray, pyarrow or MLflow that may quote `values`) with every
    secret part of each value (its userinfo, its password, its query, each secret
    parameter's value) replaced by `***`."""
    parts: set[str] = set()
    for value in filter(None, values):
        info = userinfo(str(value))
        if info:
            parts |= {info, info.partition(":")[2]}
        parts |= {_query(str(value))} | {v for _, v in secret_params(str(value))}
    for part in sorted(filter(None, parts), key=len, reverse=True):  # longest first
        text = text.replace(part, HIDDEN)
    return text


def redact_args(args: list[str]) -> list[str]:
    """A command line's arguments with each URI and each value of --address (whose
    `user:pass@host:port` has no scheme) redacted if it carries credentials, `--flag=value`
    alike. Anything else (a path such as `runs@v2`) is kept: a command without secrets reads
    back as typed. (A lease written before this check may hold secrets: show its command
    through `redact_args(command.split())`.)"""
    shown = []
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if not (eq and flag.startswith("--")):
            flag, value = (args[i - 1] if i else ""), arg
        secret = ("://" in value or flag == "--address") and has_credentials(value)
        shown.append(arg[: len(arg) - len(value)] + redact(value) if secret else arg)
    return shown


def credentials_problem(
    flag: str, value: str | None, why: str, fix: str, what: str = "URI"
) -> str | None:
    """The one `error:` line refusing `value` of `flag` if it carries credentials: the value
    redacted, `why` credentials in its `what` are refused, and the `fix` (where they go)."""
    if not has_credentials(value):
        return None
    return f"{flag} {redact(str(value))}: credentials in the {what} are refused ({why}): {fix}"


def without_credentials(value: str) -> str:
    """`value` with its userinfo, secret query parameters and fragment removed, the rest kept
    as given: what to pass instead, once the credentials are in the environment."""
    head, body, tail = _split(str(value))
    info = userinfo(value)
    if info is not None:
        body = body[len(info) + 1 :]
    query = _query(value)
    if not query:  # a local value's '?' is part of its path; a fragment never is needed
        return head + body + (tail.partition("#")[0] if not fileio.is_uri(value) else "")
    kept = [p for p in query.split("&") if p and not secret_params(f"s3://b?{p}")]
    return head + body + ("?" + "&".join(kept) if kept else "")
