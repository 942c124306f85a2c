"""Words a reader cannot follow or that are no longer true: the shipped stacks (and so every
`init-stack` copy) and the documentation."""

from __future__ import annotations

import re

import pytest
from docs_text import doc_files

from stackmodel.stacks import REPO, stack_names
from testbed.init_stack import new_stack_text

PROJECT_ISSUE = re.compile(r"\bissues? #?\d{1,2}\b")
"""This project's issue numbers (two digits at most: upstream issues cited run to thousands)."""


@pytest.mark.parametrize("stack", [s for s in stack_names() if s != "platform"])
def test_no_stack_or_copy_says_the_grid_waits_for_a_node_address(stack: str) -> None:
    text = (REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    for words in (text, new_stack_text("lab", stack, text)):
        assert "without the grid (a warning says so) until you set it" not in words
        assert "load.runner: cluster, the default" in words


def test_the_docs_cite_no_issue_number_and_no_machine_path() -> None:
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in doc_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PROJECT_ISSUE.search(line) or "../shared" in line or "/work/" in line
    ]
    assert found == []
