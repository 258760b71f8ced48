"""What a report's numbers rest on, as `sweeper verify` and the reads see it (issue 38): the
index's "Attestation" section, and the † the winners table puts beside a winner resting on an
unattested file (made without a key, or planted). Nothing is said without a key to check with."""

from __future__ import annotations

from sweeper.results.attestation_reads import Attestations

MARK = "†"


def attestation_section(
    attestations: Attestations | None, models: set[tuple[str, str]], attested_only: bool
) -> list[str]:
    """The index's markdown lines: the key, the files verified, and which of the report's
    `models` (trial_id, cert_id) rest on unattested files (or that they were left out)."""
    if attestations is None:
        return []
    a = attestations
    lines = [
        "## Attestation",
        "",
        f"- Checked with key {a.key_id}: {a.attested} results files verified; files whose "
        "statement fails are left out of every table (`sweeper verify` names them).",
    ]
    resting = sorted(a.unattested & models) if not attested_only else sorted(a.unattested)
    if attested_only:
        lines.append(
            f"- {len(resting)} models resting on unattested files left out (--attested-only)."
        )
    elif resting:
        named = ", ".join(f"{t} ({c})" for t, c in resting)
        lines.append(
            f"- {len(resting)} models rest on unattested files (made without a key, or "
            f"planted) and are counted: {named}. A winner among them is marked {MARK}."
        )
    else:
        lines.append("- Every model in this report rests on attested files only.")
    return [*lines, ""]
