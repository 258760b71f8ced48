"""The mutation score of `make mutate`, per mutated file, from mutmut's results.

Reads the `mutants/**/*.py.meta` files mutmut 3 writes (`exit_code_by_key`: one exit code per
mutant, named by mutmut's own `status_by_exit_code`) and prints, per file, killed / scored and
the survivors. A timeout counts as killed (the mutant made the tests hang: they noticed it).
Mutants listed in tests/mutation-equivalents.md are left out of the score: each entry names
the mutant, the mutated line as mutmut shows it and why no test can tell it from the original.
An entry whose line no longer matches the mutant (the code moved, mutmut renumbered) is stale:
it hides nothing and is reported.

Exit 1 if a non-equivalent mutant of the smoothing math or the envelope (STRICT) survived or
was never tested; other files are reported only. Exit 2 if there are no results (run
`mutmut run` first). Run from anywhere: `python tests/mutation_score.py`.
`--prepare` readies an incremental run instead (`make mutate` calls it first).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tests" / "mutation-equivalents.md"
STRICT = (
    "trainables/smoothing.py",
    "trainables/kernel/certificates.py",
    "sweeper/results/envelope.py",
)
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
NO_TESTS = {code for code, status in status_by_exit_code.items() if status == "no tests"}
# "- `mutant.name` `mutated line`: why" (the reason may go on over indented lines)
ENTRY = re.compile(r"^- `(?P<name>[^`]+)` `(?P<line>[^`]+)`:\s*(?P<why>.*)$")


@dataclass
class FileScore:
    path: str
    killed: int = 0
    equivalent: int = 0
    survivors: list[tuple[str, str]] = field(default_factory=list)  # (mutant, status)

    @property
    def unchecked(self) -> int:
        return sum(status == "not checked" for _, status in self.survivors)

    @property
    def scored(self) -> int:
        """Mutants run and not equivalent (one not run yet is not in the score, but fails
        STRICT files all the same)."""
        return self.killed + len(self.survivors) - self.unchecked

    def line(self) -> str:
        share = 100.0 * self.killed / self.scored if self.scored else 100.0
        rest = f", {self.unchecked} not run yet" if self.unchecked else ""
        surviving = len(self.survivors) - self.unchecked
        return (
            f"{self.path:<28} {self.killed:>4}/{self.scored:<4} killed  {share:5.1f}%"
            f"  ({self.equivalent} equivalent, {surviving} surviving{rest})"
        )


def read_equivalents(path: Path = EQUIVALENTS) -> dict[str, tuple[str, str]]:
    """mutant name -> (mutated line, reason); an entry without a reason is refused."""
    entries: dict[str, tuple[str, str]] = {}
    if not path.exists():
        return entries
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = ENTRY.match(text)
        if match is None:
            continue
        if not match["why"].strip():
            raise SystemExit(f"error: {path.name}:{number}: {match['name']} needs a reason")
        entries[match["name"]] = (match["line"].strip(), match["why"].strip())
    return entries


def mutated_lines(name: str, source: str) -> list[str]:
    """The lines mutant `name` adds to its function (its diff's `+` lines, stripped)."""
    diff = get_diff_for_mutant(name, path=source)
    return [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]


def score_file(meta: Path, equivalents: dict, stale: list[str]) -> FileScore:
    source = str(meta.relative_to(ROOT / "mutants"))[: -len(".meta")]
    score = FileScore(source)
    for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
        status = status_by_exit_code[code]
        if status in KILLED:
            score.killed += 1
        elif name in equivalents and status != "not checked":
            if equivalents[name][0] in mutated_lines(name, source):
                score.equivalent += 1
                continue
            stale.append(name)
            score.survivors.append((name, status))
        else:
            score.survivors.append((name, status))
    return score


def prepare() -> int:
    """Before an incremental `mutmut run`, forget the verdicts newer tests may change:
    mutmut maps tests to functions once and keeps the map, so a function added since reads as
    covered by no test ("no tests", never run), and a survivor is never run again even when a
    test was added to kill it. Drops those verdicts (except survivors listed as equivalent) and
    the map (mutmut-stats.json): the run maps the tests afresh and tests them again."""
    equivalents, forgotten = read_equivalents(), 0
    for meta in sorted((ROOT / "mutants").glob("**/*.py.meta")):
        try:
            data = json.loads(meta.read_text())
        except ValueError:  # mutmut writes in place: a run stopped while saving empties it
            print(f"{meta.name}: unreadable, its mutants will be generated and run again")
            meta.unlink()
            meta.with_suffix("").unlink(missing_ok=True)  # the mutated copy: regenerated
            continue
        codes = data["exit_code_by_key"]
        retest = [name for name, code in codes.items() if _retest(name, code, equivalents)]
        if retest:
            codes.update(dict.fromkeys(retest))
            tmp = meta.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=4))
            tmp.replace(meta)
            forgotten += len(retest)
    (ROOT / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    print(f"{forgotten} untested or surviving mutants will be tested again; test map dropped")
    return 0


def _retest(name: str, code: int | None, equivalents: dict) -> bool:
    status = status_by_exit_code[code]
    return code in NO_TESTS or (status == "survived" and name not in equivalents)


def main() -> int:
    os.chdir(ROOT)  # mutmut's paths (mutants/..., the .spans indexes) are relative to the root
    if sys.argv[1:] == ["--prepare"]:
        return prepare()
    metas = sorted((ROOT / "mutants").glob("**/*.py.meta"))
    if not metas:
        print("error: no mutmut results under mutants/: run `make mutate`", file=sys.stderr)
        return 2
    equivalents, stale = read_equivalents(), list[str]()
    scores = [score_file(meta, equivalents, stale) for meta in metas]
    total = FileScore("total")
    for score in scores:
        print(score.line())
        for name, status in score.survivors:
            if status != "not checked":
                print(f"    {status}: {name}")
        total.killed += score.killed
        total.equivalent += score.equivalent
        total.survivors += score.survivors
    print(total.line())
    for name in stale:
        print(f"stale entry in {EQUIVALENTS.name} (its line is no longer the mutant's): {name}")
    strict = [s for s in scores if s.path in STRICT and s.survivors]
    if strict:
        names = ", ".join(s.path for s in strict)
        print(f"FAIL: non-equivalent mutants survived (or were not run) in {names}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
