"""cluster/Dockerfile and .dockerignore: the base image pinned by digest (the same as
cluster.yaml's), a reproducible install (the hash-locked requirements, then the project with
nothing resolved afresh), nothing fetched by a script, and a build context that holds only
what the image installs (issue 29 §3).

No Docker daemon here: .dockerignore is checked with the rule BuildKit applies (moby's
patternmatcher: patterns in order, the last one matching a path or any of its parent folders
decides, `!` lets back in, `**` any number of folders), written out below and checked against
known cases."""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path

import ray
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "cluster" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
IMAGE = re.compile(r"rayproject/ray:(?P<tag>[\w.-]+)@sha256:(?P<digest>[0-9a-f]{64}|REPLACE_ME)")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(lets back in, regex) per pattern of a .dockerignore, in order."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((negated, _regex(pattern)))
    return rules


def ignored(rules: list[tuple[bool, re.Pattern[str]]], path: str) -> bool:
    """Whether the build context leaves `path` (relative, with /) out."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    out = False
    for negated, rx in rules:
        if any(rx.fullmatch(c) for c in candidates):
            out = not negated
    return out


def test_the_ignore_rule_is_the_one_docker_applies():
    rules = ignore_rules("*\n!src\nsrc/**/*.pyc\n**/.env\n")
    assert not ignored(rules, "src/a/b.py")
    assert ignored(rules, "src/a/b.pyc") and ignored(rules, "src/.env")
    assert ignored(rules, ".git/HEAD") and ignored(rules, "README.md")
    # without the leading `*`, what no pattern names gets in: the check is not vacuous
    loose = ignore_rules(".git\nresults\n")
    assert ignored(loose, ".git/objects/ab") and ignored(loose, "results/x/sweep.json")
    assert not ignored(loose, ".venv/lib/python3.11/site-packages/torch/__init__.py")


# What the context must leave out (the issue's .git, 7 GB .venv and results/, and more).
LEFT_OUT = [
    ".git/HEAD",
    ".git/objects/pack/pack-1.pack",
    ".venv/lib/python3.11/site-packages/torch/__init__.py",
    "results/digits/sweep.json",
    "results/digits/trials/79badc34a5b1/checkpoint.pt",
    "data/cifar-10-batches-py/data_batch_1",
    "mutants/sweeper/x.py",
    "site/index.html",
    "tests/test_cli.py",
    "docs/index.md",
    "benchmarks/sweep_scale.py",
    ".env",
    "sweeper/.env",
    "deploy.pem",
    "sweeper/results/server.key",
    "trainables/credentials",
    "search_spaces/gcp-credentials.json",
    "id_rsa",
    ".aws/credentials",
    ".ssh/id_ed25519",
    "sweeper/__pycache__/storage.cpython-311.pyc",
    "sweeper.egg-info/PKG-INFO",
    "cluster.yaml",
]


def test_the_build_context_holds_only_what_the_image_installs():
    rules = ignore_rules(DOCKERIGNORE.read_text())
    assert [p for p in LEFT_OUT if not ignored(rules, p)] == []
    kept = ["pyproject.toml", "README.md", "requirements/cluster.txt"]
    for package in ("sweeper", "trainables", "search_spaces"):
        kept += [
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    assert len(kept) > 50
    assert [p for p in kept if ignored(rules, p)] == []
    # every path the Dockerfile copies is in the context (else the build fails)
    sources = [s for word, args in instructions() if word == "COPY" for s in _copy_sources(args)]
    assert len(sources) >= 6
    assert [s for s in sources if ignored(rules, s) or not (ROOT / s).exists()] == []


def _copy_sources(args: str) -> list[str]:
    words = [w for w in shlex.split(args) if not w.startswith("--")]
    return [s.rstrip("/") for s in words[:-1]]


def test_the_base_image_is_pinned_by_digest_and_is_cluster_yamls():
    (base,) = [args for word, args in instructions() if word == "FROM"]
    image = IMAGE.fullmatch(base)
    assert image, base
    tag = image["tag"].split("-")
    assert ray.__version__ in tag and "py311" in tag and tag[-1] == "gpu"
    cluster = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert base == cluster["docker"]["image"]  # one digest to fill in, the same bytes everywhere
    text = DOCKERFILE.read_text()
    assert f"docker buildx imagetools inspect rayproject/ray:{image['tag']} " in text
    if image["digest"] == "REPLACE_ME":  # documented: where it goes, and that the build stops
        assert "replace sha256:REPLACE_ME here and in cluster.yaml" in text
        assert "invalid reference format" in text


def test_the_install_is_the_hash_locked_requirements_then_the_project_alone():
    steps = [(w, a) for w, a in instructions() if w in ("COPY", "RUN", "ADD")]
    assert not [a for w, a in steps if w == "ADD"]  # ADD can fetch URLs
    runs = [a for w, a in steps if w == "RUN"]
    assert runs == [
        "pip install -q --require-hashes -r requirements/cluster.txt",
        "pip install -q --no-deps --no-build-isolation -e .",
    ]
    # the lock is installed before any code is copied (its own layer)
    first_run = steps.index(("RUN", runs[0]))
    assert [_copy_sources(a) for w, a in steps[:first_run]] == [["requirements/cluster.txt"]]
    # --no-build-isolation builds with the locked setuptools, which meets [build-system]
    lock = (ROOT / "requirements" / "cluster.txt").read_text()
    locked = re.search(r"^setuptools==(\d+)\.", lock, re.M)
    required = re.search(
        r'requires = \["setuptools>=(\d+)"\]', (ROOT / "pyproject.toml").read_text()
    )
    assert locked and required and int(locked[1]) >= int(required[1])


def fetch_and_run(text: str) -> list[str]:
    """Lines that pipe a download into a shell, or run a script fetched unchecked."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    return [
        ln
        for ln in lines
        if re.search(r"(curl|wget)[^|#]*\|\s*(sudo\s+)?(ba|z)?sh\b", ln)
        or re.search(r"(curl|wget)\b.*&&.*\bsh\s+/tmp/", ln)
    ]


def test_nothing_pipes_a_download_into_a_shell():
    assert fetch_and_run("RUN curl -fsSL https://x/i.sh | sudo sh") != []
    assert fetch_and_run("curl -fsSL -o /tmp/i.sh https://x && sudo sh /tmp/i.sh --install") != []
    for path in (
        DOCKERFILE,
        ROOT / "cluster.yaml",
        ROOT / "cluster" / "slurm" / "sweeper.sbatch",
        ROOT / "cluster" / "kuberay" / "rayjob.yaml",
    ):
        text = path.read_text()
        assert fetch_and_run(text) == [], path
        assert "efs-utils-installer" not in text
