"""The user documentation as tests read it: README.md, then every ``docs/*.md`` (a glob, so a new
topic file is read without a change here)."""

from pathlib import Path

from stackmodel.stacks import REPO


def doc_files() -> list[Path]:
    """README.md, then ``docs/*.md`` in name order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
