"""Hyperparameters from a log's path: every layout's names (`sweeper.ingest.layouts`) read
with one entry point, `path_values`.

The names below DIR count, and the names above DIR up to the first that is none of these (so
importing a leaf directory gives the same model); the innermost match wins; case-insensitive.
The method is smoothadv when an attack part is present, else the one method a keyword names
(cohen/gaussian only if no other), else gaussian (`importer` decides).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sweeper.ingest.layouts import jh_jeong, locuslab, shared, smoothing_adversarial
from sweeper.ingest.layouts.shared import Handler

LAYOUTS = (
    smoothing_adversarial,
    jh_jeong,
    locuslab,
)  # each module's names; `shared` holds the names all use
NEEDS = smoothing_adversarial.NEEDS
METHOD_WORDS = {word: method for layout in LAYOUTS for word, method in layout.METHOD_WORDS.items()}
PATTERNS: list[tuple[re.Pattern, Handler]] = [
    (re.compile(pattern, re.IGNORECASE), handler)
    for pattern, handler in [
        *(p for layout in LAYOUTS for p in layout.PATTERNS),
        *shared.PATTERNS,
        ("|".join(METHOD_WORDS), lambda m: {"_word": METHOD_WORDS[m.group(0).lower()]}),
    ]
]


def match(part: str) -> dict | None:
    """The values one path component names (None: it names none)."""
    for pattern, handler in PATTERNS:
        m = pattern.fullmatch(part)
        if m:
            return handler(m)
    return None


def path_values(log: Path, root: Path) -> tuple[dict[str, Any], set[str]]:
    """(hyperparameters named by the path, methods it names): the names below `root`, and the
    names above it up to the first that is not a hyperparameter; inner names win."""
    above: list[str] = []
    for part in reversed(root.parts):
        if match(part) is None:
            break
        above.insert(0, part)
    values: dict[str, Any] = {"_needs": []}
    methods: set[str] = set()
    for part in [*above, *log.relative_to(root).parts]:
        found = match(part) or {}
        methods |= {found.pop(k) for k in ("_method", "_word") if k in found}
        values["_needs"] += [found.pop("_needs")] if "_needs" in found else []
        values |= found
    return values, methods
