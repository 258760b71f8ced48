"""The transcripts of the documentation (README.md and docs/) are written by
docs/make_transcripts.py from real runs, never pasted: each one is that script's, for the
commands it shows, and a fresh run of those commands prints the same lines, numbers aside
(floats differ between CPUs: nothing computed on another machine is compared bit for bit).
The demo's smoke sweep takes about a minute, so it is checked for its commands and origin only;
the other transcripts read or plan (a small experiment written by tests/certified_rows.py, a
dry run) and are run afresh here."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "make_transcripts", ROOT / "docs" / "make_transcripts.py"
)
assert _spec and _spec.loader
mt = importlib.util.module_from_spec(_spec)
sys.modules["make_transcripts"] = mt
_spec.loader.exec_module(mt)

CHECKED = [name for name, t in mt.TRANSCRIPTS.items() if t.checked]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def transcript(name: str) -> tuple[str, list[str]]:
    """The header line and the code block of transcript `name` on its page."""
    page = ROOT / mt.TRANSCRIPTS[name].page
    (found,) = [(b[1], b[2]) for b in mt.blocks(page.read_text()) if b[0] == name]
    return found


def test_every_transcript_of_the_docs_is_the_scripts_for_the_commands_it_shows():
    seen: dict[str, Path] = {}
    for page in pages():
        for name, header, code, _ in mt.blocks(page.read_text()):
            assert name in mt.TRANSCRIPTS, f"{page}: transcript {name} is no script's"
            assert name not in seen, f"transcript {name} on {seen[name]} and {page}"
            seen[name] = page
            expected = mt.TRANSCRIPTS[name]
            assert page == ROOT / expected.page
            origin = mt.HEADER.match(header)
            assert origin and origin["name"] == name, f"{page}: {header!r}"
            assert code and code[0].startswith("$ "), f"{page}: transcript {name} is empty"
            assert mt.commands_of(code) == [c.line for c in expected.commands]
    assert seen.keys() == mt.TRANSCRIPTS.keys()


def test_no_transcript_is_pasted():
    """A code block that shows a `$ ` prompt with what it printed is a transcript."""
    for page in pages():
        text = page.read_text()
        spans = [b[3] for b in mt.blocks(text)]
        for block in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
            if re.search(r"^\$ ", block[1], re.M):
                inside = any(start <= block.start() < end for start, end in spans)
                assert inside, f"{page}: a pasted transcript: {block[1][:80]!r}"


def test_each_transcript_names_a_commit_of_this_repository():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (mutmut's copy)")
    shallow = ["git", "rev-parse", "--is-shallow-repository"]
    if subprocess.run(shallow, cwd=ROOT, capture_output=True, text=True).stdout.strip() == "true":
        pytest.skip("a shallow clone holds no earlier commit")
    for name in mt.TRANSCRIPTS:
        header, _ = transcript(name)
        commit = mt.HEADER.match(header)["commit"]
        done = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True
        )
        assert done.returncode == 0, f"transcript {name}: no commit {commit}"


@pytest.mark.parametrize("name", CHECKED)
def test_a_fresh_run_prints_the_transcripts_lines_modulo_numbers(name, tmp_path):
    _, code = transcript(name)
    fresh = mt.produce(name, tmp_path)
    assert mt.normalized(fresh) == mt.normalized(code)


def test_transcripts_are_compared_modulo_numbers_and_alignment_only():
    assert mt.normalized(["│   0.25 │  0.600* │ 1,315 GPU-h", "━━━ a  b"]) == mt.normalized(
        ["│ 0.5 │ 0.800* │ 16,640 GPU-h", "━ a b"]
    )
    assert mt.normalized(["σ = 0.25"]) != mt.normalized(["ε = 0.25"])
    assert mt.normalized(["3 models"]) != mt.normalized(["3 trials"])


def test_long_outputs_keep_their_first_and_last_lines():
    command = mt.Command("sweeper spaces", head=2, tail=1)
    lines = [f"line {i}" for i in range(10)]
    assert command.elide(lines) == ["line 0", "line 1", "... (7 more lines)", "line 9"]
    assert command.elide(lines[:4]) == lines[:4]
