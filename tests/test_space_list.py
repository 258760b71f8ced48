"""`sweeper spaces` from its cache (issue 17): an entry is used only for the exact bytes of its
YAML file and the exact source of the code that expands it; anything else recomputes it, and
an unwritable cache costs only time."""

from __future__ import annotations

import json

import pytest

from sweeper.plan import space_list
from sweeper.plan.grid import expand
from sweeper.plan.spaces import available_spaces, load_space


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "sweeper" / "spaces.json"


def test_counts_are_the_expansions_and_are_cached(cache):
    summaries = space_list.shipped_summaries()
    assert [s.name for s in summaries] == available_spaces()
    digits = next(s for s in summaries if s.name == "digits")
    spec = load_space("digits")
    assert (digits.trials, digits.cpu, digits.gpu) == (len(expand(spec)), 1, 0)
    assert digits.description == spec.description
    stored = json.loads(cache.read_text())
    assert stored["code"] == space_list.code_fingerprint()
    assert stored["spaces"]["digits"]["trials"] == digits.trials


def test_a_cached_entry_is_used_only_for_the_same_file_and_code(cache):
    space_list.shipped_summaries()
    stored = json.loads(cache.read_text())
    stored["spaces"]["digits"]["trials"] = 9999  # the cache is read as it is while it holds
    cache.write_text(json.dumps(stored))
    assert next(s for s in space_list.shipped_summaries() if s.name == "digits").trials == 9999
    stored["spaces"]["digits"]["yaml"] = "0" * 64  # another file: recomputed
    cache.write_text(json.dumps(stored))
    assert next(s for s in space_list.shipped_summaries() if s.name == "digits").trials == 34
    stored = json.loads(cache.read_text())
    stored["spaces"]["digits"]["trials"] = 9999
    stored["code"] = "other code"  # another version of sweeper: everything recomputed
    cache.write_text(json.dumps(stored))
    assert next(s for s in space_list.shipped_summaries() if s.name == "digits").trials == 34


@pytest.mark.parametrize("content", ["not json", "[]", '{"code": 1}', "", "WRONG_TYPES"])
def test_a_damaged_cache_is_ignored_and_rewritten(cache, content):
    cache.parent.mkdir(parents=True)
    if content == "WRONG_TYPES":  # the right code, an entry of the wrong shape
        entry = {
            "yaml": "",
            "name": "digits",
            "trials": "34",
            "cpu": 1,
            "gpu": 0,
            "description": "",
        }
        content = json.dumps({"code": space_list.code_fingerprint(), "spaces": {"digits": entry}})
    cache.write_text(content)
    assert len(space_list.shipped_summaries()) == len(available_spaces())
    assert json.loads(cache.read_text())["code"] == space_list.code_fingerprint()


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the directory would go
    assert len(space_list.shipped_summaries()) == len(available_spaces())
