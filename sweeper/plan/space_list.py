"""What `sweeper spaces` lists: each shipped space's trial count, resources and description.

Counting a space's trials means resolving every config of its grids (an ε axis crossed with
the Gaussian baseline collapses to one trial), thousands for the paper grids; the summaries
are therefore kept in a cache beside `sweeper bench`'s figures, each valid for the exact bytes
of its YAML file and the exact source of the code that expands it (any edit recomputes it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from sweeper.plan.grid import expand
from sweeper.plan.spaces import available_spaces, load_space, resolve_space_path
from trainables.kernel import fileio

# The code a space's expansion depends on: the plan package and the configs it builds.
_CODE = (Path(__file__).resolve().parent, Path(__file__).resolve().parents[2] / "trainables")


@dataclass(frozen=True)
class SpaceSummary:
    name: str
    trials: int
    cpu: float
    gpu: float
    description: str


def cache_path() -> Path:
    """$XDG_CACHE_HOME/sweeper/spaces.json, else ~/.cache/sweeper/spaces.json."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "sweeper" / "spaces.json"


def code_fingerprint() -> str:
    digest = hashlib.sha256()
    for folder in _CODE:
        for source in sorted(folder.rglob("*.py")):
            digest.update(str(source.relative_to(folder)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def summarize(name: str) -> SpaceSummary:
    """Load, validate and expand one space (SpecError listing its problems)."""
    spec = load_space(name)
    return SpaceSummary(
        name, len(expand(spec)), spec.resources.cpu, spec.resources.gpu, spec.description
    )


def shipped_summaries() -> list[SpaceSummary]:
    """Every shipped space's summary, from the cache where it still holds."""
    code, path = code_fingerprint(), cache_path()
    cached = _read(path, code)
    out, changed = [], False
    for name in available_spaces():
        text = hashlib.sha256(resolve_space_path(name).read_bytes()).hexdigest()
        entry = cached.get(name)
        if entry is None or entry.get("yaml") != text:
            entry = {"yaml": text, **asdict(summarize(name))}
            cached[name], changed = entry, True
        out.append(SpaceSummary(**{k: v for k, v in entry.items() if k != "yaml"}))
    if changed:
        _write(path, code, cached)
    return out


def _read(path: Path, code: str) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("code") != code
        or not isinstance(data.get("spaces"), dict)
    ):
        return {}
    return {k: v for k, v in data["spaces"].items() if _well_formed(v)}


_TYPES: dict[str, type | tuple[type, ...]] = {
    "yaml": str,
    "name": str,
    "trials": int,
    "cpu": (int, float),
    "gpu": (int, float),
    "description": str,
}


def _well_formed(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and set(entry) == set(_TYPES)
        and all(isinstance(entry[k], t) for k, t in _TYPES.items())
    )


def _write(path: Path, code: str, spaces: dict[str, dict]) -> None:
    with contextlib.suppress(OSError):  # a cache: a read-only home costs the next listing time
        fileio.write_bytes_atomic(str(path), json.dumps({"code": code, "spaces": spaces}).encode())
