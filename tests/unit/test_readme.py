"""The guard table of docs/decisions.md (README.md's until issue 30 moved it) names every
kind of the field-case library's serving-engine kinds, each row with its evidence, its
response and its negative control."""

from __future__ import annotations

from tests.helpers.field_case_kinds import KINDS
from tests.helpers.paths import ROOT


def test_issue_13_readme_guard_table_lists_every_kind_with_four_columns() -> None:
    text = (ROOT / "docs" / "decisions.md").read_text()
    start = text.index("### Every kind of a serving engine")
    table = text[start:text.index("\n### ", start + 10)]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 4 and all(cells), f"a row without all four columns: {row[:80]}"
    named = " ".join(r.split(" | ")[0] for r in rows)
    # memory_floor (issue 13 made its NV_ERR_NO_MEMORY path stricter) has its row in the
    # guard table above this one.
    missing = sorted(k for k in KINDS - {"memory_floor"} if f"`{k}`" not in named)
    assert not missing, f"docs/decisions.md's table lacks rows for {missing}"
    assert "| `memory_floor` |" in text
