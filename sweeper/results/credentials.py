"""Credentials inside the values a user passes on the command line or in a space: a storage
URI, a Ray address, an MLflow tracking URI, a data directory or data URI (`--data-dir`, `data
put --to/--from`, a space's `data_dir` and `pseudo_data`, `import --set`). Refused
(`credentials_problem`, `data_credentials_problem`, `space_credentials_problems`) and hidden in
every message (`redact`, `scrub`); what counts as a credential, and `redact`, are the kernel's
(`trainables.kernel.credential_parts`, re-exported here).

sweeper stores what it is given: the command line in the experiment's lease, the storage in
every trial's state and in Ray Tune's (`tune/run-*/tuner.pkl`), the tracking URI in Tune's
callbacks, the data directory in sweep.json, every trial.json and checkpoint, the Parquet
metadata and Tune's state. So a value that carries a secret is refused before anything is
written, with the environment variables that carry it instead, and a message that echoes such
a value shows it through `redact`.
"""

from __future__ import annotations

from trainables.kernel import fileio
from trainables.kernel.credential_parts import (
    HIDDEN,
    has_credentials,
    redact,
    remote_query,
    secret_params,
    split_uri,
    userinfo,
)

__all__ = [  # the kernel's, for the driver's modules: one place to import from
    "HIDDEN",
    "credentials_problem",
    "data_credentials_problem",
    "has_credentials",
    "redact",
    "redact_args",
    "scrub",
    "secret_params",
    "space_credentials_problems",
    "userinfo",
    "without_credentials",
]


def scrub(text: str, *values: str | None) -> str:
    """`text` (a message from Ray, pyarrow or MLflow that may quote `values`) with every
    secret part of each value (its userinfo, its password, its query, each secret
    parameter's value) replaced by `***`."""
    parts: set[str] = set()
    for value in filter(None, values):
        info = userinfo(str(value))
        if info:
            parts |= {info, info.partition(":")[2]}
        parts |= {remote_query(str(value))} | {v for _, v in secret_params(str(value))}
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
    head, body, tail = split_uri(str(value))
    info = userinfo(value)
    if info is not None:
        body = body[len(info) + 1 :]
    query = remote_query(value)
    if not query:  # a local value's '?' is part of its path; a fragment never is needed
        return head + body + (tail.partition("#")[0] if not fileio.is_uri(value) else "")
    kept = [p for p in query.split("&") if p and not secret_params(f"s3://b?{p}")]
    return head + body + ("?" + "&".join(kept) if kept else "")


DATA_WHY = "a data location is stored in sweep.json, every trial's state and checkpoint, and Tune's"
DATA_FIX = (
    "give {plain}, with the credentials in the environment (AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS) or the nodes' roles"
)
DATA_FIELDS = ("data_dir", "pseudo_data")  # a trial's fields that name where its data is


def data_credentials_problem(flag: str, value: str | None) -> str | None:
    """The one `error:` line refusing a data directory or data URI given as `flag` (--data-dir,
    --to, --from, a space's pseudo_data) if it carries credentials, the value redacted. A
    local path (no `://`: `data@v2`, `/data/user@host`) is never one."""
    if "://" not in str(value or "") or not has_credentials(value):
        return None
    fix = DATA_FIX.format(plain=without_credentials(str(value)))
    return credentials_problem(flag, value, DATA_WHY, fix, "data location")


def space_credentials_problems(doc: object, where: str = "") -> list[str]:
    """One line per value of a space's YAML document that carries credentials, named by its
    place (`grids[0].fixed.pseudo_data`) and redacted: every value of a data field
    (`DATA_FIELDS`) and every other string holding a URI (`://`), however deep."""
    if isinstance(doc, dict):
        items = [(f"{where}.{k}" if where else str(k), v) for k, v in doc.items()]
    elif isinstance(doc, list):
        items = [(f"{where}[{i}]", v) for i, v in enumerate(doc)]
    elif isinstance(doc, str) and ("://" in doc or where.rpartition(".")[2] in DATA_FIELDS):
        return [p] if (p := data_credentials_problem(where, doc)) else []
    else:
        return []
    return [p for place, value in items for p in space_credentials_problems(value, place)]
