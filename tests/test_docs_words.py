"""Words a reader cannot follow or that are no longer true: the shipped stacks (and so every
`init-stack` copy), the documentation, and every file of the project."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_text import doc_files

from stackmodel.stacks import REPO, stack_names
from testbed.init_stack import new_stack_text

PROJECT_ISSUE = re.compile(r"\bissues? #?\d{1,2}\b")
"""This project's issue numbers (two digits at most: upstream issues cited run to thousands)."""
SIBLING_FOLDER = "/".join(("..", "shared"))
"""A folder beside the checkout, which a clone does not have (spelled in pieces, so that this file
does not name it)."""
MACHINE_PATH = "/".join(("", "work", ""))
"""A path of one machine (spelled in pieces, as above)."""
CI_SETTING = "export DYNAMO_TESTBED_UPSTREAM="
"""The one line that may name the folder beside the checkout: where .ci/run points the tests'
upstream files at CI's copy (tests/upstream_files.py)."""
NOT_THE_PROJECT = frozenset({"__pycache__", "out", "results"})
"""Folders that hold what runs leave behind (besides the hidden ones: .git, .venv, .upstream)."""


def project_files() -> list[Path]:
    """Every file of the project, as a clone has it: not git's own (``.git``, a folder or, in a
    worktree, a file), no hidden folder but ``.ci``, nothing a run leaves behind."""
    found = []
    for path in sorted(REPO.rglob("*")):
        parts = path.relative_to(REPO).parts
        hidden = parts[0] == ".git" or any(p.startswith(".") and p != ".ci" for p in parts[:-1])
        if path.is_file() and not hidden and not NOT_THE_PROJECT & set(parts[:-1]):
            found.append(path)
    return found


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
        if PROJECT_ISSUE.search(line) or SIBLING_FOLDER in line or MACHINE_PATH in line
    ]
    assert found == []


def test_no_project_file_names_a_folder_beside_the_checkout_or_a_machine_path() -> None:
    """Code, tests, docs, pyproject and CI: a clone stands alone, so none points at a folder
    beside it or a path of one machine, save the line of .ci/run that sets CI's copy."""
    files = project_files()
    assert {"pyproject.toml", ".ci/run", "scripts/fetch_upstream.py"} <= {
        p.relative_to(REPO).as_posix() for p in files
    }
    found = []
    for path in files:
        name = path.relative_to(REPO).as_posix()
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # not text: a figure, say
        for n, line in enumerate(text.splitlines(), 1):
            if name == ".ci/run" and line.startswith(CI_SETTING):
                continue
            if SIBLING_FOLDER in line or MACHINE_PATH in line:
                found.append(f"{name}:{n}: {line.strip()}")
    assert found == []


def test_ci_points_the_tests_upstream_files_at_its_copy_once() -> None:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert [line for line in lines if CI_SETTING in line] == [
        f'{CI_SETTING}"$PWD/{SIBLING_FOLDER}"'
    ]


def test_the_readme_says_what_prefix_kinds_are_before_it_uses_them() -> None:
    readme = (REPO / "README.md").read_text()
    first_use = min(readme.index("prefix kinds |"), readme.lower().index("prefix kinds"))
    assert readme.index("**prefix kinds**") <= first_use
    assert "how many\ndifferent long prompt prefixes" in readme


def test_the_layout_names_every_module_of_every_package() -> None:
    """docs/layout.md's paragraph of each product package (``- `outputs/`: ...``) names each of
    its modules (`` `tables.py` ``; one in a subpackage with it, `` `probe/` ``), but
    ``__init__.py`` and ``__main__.py`` (``python -m``)."""
    from test_import_graph import PACKAGES

    text = (REPO / "docs" / "layout.md").read_text()
    paragraphs = dict(re.findall(r"^- `(\w+)/`:(.*?)(?=^- |^#|\Z)", text, re.S | re.M))
    missing = []
    for package in PACKAGES:
        paragraph = paragraphs.get(package, "")
        for module in sorted((REPO / package).rglob("*.py")):
            path = module.relative_to(REPO / package)
            names = [f"`{path.name}`", *(f"`{folder}/`" for folder in path.parts[:-1])]
            dunder = path.name in ("__init__.py", "__main__.py")
            if not dunder and not all(name in paragraph for name in names):
                missing.append(f"{package}/{path}")
    assert missing == []


def test_every_project_module_or_template_a_text_names_exists() -> None:
    """A module or template of a product package that the docs or a module's docstring name in
    backticks (`` `outputs/templates/report.html.j2` ``) is there: a moved file leaves no
    pointer to its old folder."""
    from test_import_graph import PACKAGES

    packages = "|".join(PACKAGES)
    named = re.compile(rf"`((?:{packages})/[\w/.-]*\.(?:py|j2))`")
    modules = [path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))]
    gone = [
        f"{path.relative_to(REPO)}: {match}"
        for path in [*doc_files(), *modules]
        for match in named.findall(path.read_text())
        if not (REPO / match).is_file()
    ]
    assert gone == []
