"""scripts/fetch_upstream.py: the upstream Dynamo files the tests read, fetched at the pinned commit
and checked against the manifest's sha256.

GitHub is not reached here: the fetches come from a ``file://`` URL, a plain folder and a local
HTTP server laid out as the repository is, with a manifest of their own.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from upstream_files import DEFAULT_DIR, ENV_VAR, NAMES, upstream_dir, upstream_file

from stackmodel.stacks import REPO

SCRIPT = REPO / "scripts" / "fetch_upstream.py"
PINNED = "2a6da14c83617f5412caba5777dbf0e2399e9c5f"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_upstream", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


fetch_upstream: Any = _load_script()

FAKE_FILES = {
    "dynamo-crds/a.yaml": ("deploy/crds/a.yaml", b"kind: CustomResourceDefinition\n"),
    "dynamo-chart/values.yaml": ("deploy/chart/values.yaml", b"dynamo-operator: {}\n"),
}
"""A small stand-in repository: cache name -> (path in the repository, bytes)."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def upstream_repo(tmp_path: Path) -> Path:
    """The stand-in repository's files under ``tmp_path/repo``."""
    root = tmp_path / "repo"
    for source, data in FAKE_FILES.values():
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).write_bytes(data)
    return root


def _manifest(tmp_path: Path, **wrong: bytes) -> Path:
    """A manifest of the stand-in files; ``wrong`` maps a cache name (``/`` as ``__``) to the
    bytes whose sha256 it lists instead of the file's."""
    files = {
        name: {"source": source, "sha256": _sha(wrong.get(name.replace("/", "__"), data))}
        for name, (source, data) in FAKE_FILES.items()
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"repository": "o/r", "commit": "a" * 40, "files": files}))
    return path


def _run(tmp_path: Path, dest: Path, *args: str, **wrong: bytes) -> int:
    manifest = _manifest(tmp_path, **wrong)
    status: int = fetch_upstream.main(["--manifest", str(manifest), "--dest", str(dest), *args])
    return status


def test_the_manifest_pins_exactly_the_files_the_tests_read() -> None:
    manifest = fetch_upstream.load_manifest()
    assert (manifest.repository, manifest.commit) == ("ai-dynamo/dynamo", PINNED)
    assert sorted(f.name for f in manifest.files) == sorted(NAMES)
    assert {f.name: f.source for f in manifest.files} == {
        "dynamo-crds/nvidia.com_dynamographdeployments.yaml": (
            "deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml"
        ),
        "dynamo-chart/values.yaml": "deploy/helm/charts/platform/values.yaml",
        "dynamo-chart/components__operator__values.yaml": (
            "deploy/helm/charts/platform/components/operator/values.yaml"
        ),
    }


def test_the_default_url_is_github_raw_at_the_pinned_commit() -> None:
    manifest = fetch_upstream.load_manifest()
    assert manifest.default_base_url() == (
        f"https://raw.githubusercontent.com/ai-dynamo/dynamo/{PINNED}"
    )


def test_the_pinned_files_have_the_manifests_sha256() -> None:
    """The manifest's hashes are those of the files the tests read (skips without them)."""
    for f in fetch_upstream.load_manifest().files:
        assert fetch_upstream.file_sha256(upstream_file(f.name)) == f.sha256, f.name


def test_the_script_and_the_tests_read_one_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (fetch_upstream.ENV_VAR, fetch_upstream.DEFAULT_DEST) == (ENV_VAR, DEFAULT_DIR)
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert fetch_upstream.cache_dir() == upstream_dir() == REPO / ".upstream"
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert fetch_upstream.cache_dir() == upstream_dir() == tmp_path
    assert fetch_upstream.cache_dir(str(tmp_path / "other")) == tmp_path / "other"


def test_a_missing_file_skips_naming_the_script_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(pytest.skip.Exception) as skipped:
        upstream_file(NAMES[0])
    reason = str(skipped.value)
    assert "python scripts/fetch_upstream.py" in reason
    assert ENV_VAR in reason and str(tmp_path) in reason


def test_the_gitignore_keeps_the_default_folder_out() -> None:
    assert "/.upstream/" in (REPO / ".gitignore").read_text().splitlines()


def test_fetch_from_a_file_url_then_keep_what_is_there(
    tmp_path: Path, upstream_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "cache"
    assert _run(tmp_path, dest, "--base-url", upstream_repo.as_uri()) == 0
    for name, (_, data) in FAKE_FILES.items():
        assert (dest / name).read_bytes() == data
    assert "dynamo-crds/a.yaml: fetched" in capsys.readouterr().out
    # A second run keeps the files (the source is gone: nothing is fetched).
    for source, _ in FAKE_FILES.values():
        (upstream_repo / source).unlink()
    assert _run(tmp_path, dest, "--base-url", upstream_repo.as_uri()) == 0
    assert "dynamo-crds/a.yaml: already there" in capsys.readouterr().out
    assert _run(tmp_path, dest, "--verify") == 0


def test_a_plain_folder_is_a_base_url(tmp_path: Path, upstream_repo: Path) -> None:
    dest = tmp_path / "cache"
    assert _run(tmp_path, dest, "--base-url", str(upstream_repo)) == 0
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == ["a.yaml", "values.yaml"]


def test_the_variable_names_the_folder(
    tmp_path: Path, upstream_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "from-env"))
    manifest = _manifest(tmp_path)
    assert fetch_upstream.main(["--manifest", str(manifest), "--base-url", str(upstream_repo)]) == 0
    assert (tmp_path / "from-env" / "dynamo-chart" / "values.yaml").is_file()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr (the tests read the command's own)."""


@pytest.fixture
def http_base(upstream_repo: Path) -> Iterator[str]:
    """The stand-in repository served over HTTP on 127.0.0.1."""
    handler = partial(_QuietHandler, directory=str(upstream_repo))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_over_http(tmp_path: Path, http_base: str) -> None:
    dest = tmp_path / "cache"
    assert _run(tmp_path, dest, "--base-url", http_base + "/") == 0
    for name, (_, data) in FAKE_FILES.items():
        assert (dest / name).read_bytes() == data


def test_a_file_the_server_lacks_fails_naming_its_url(
    tmp_path: Path, http_base: str, upstream_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (upstream_repo / "deploy/crds/a.yaml").unlink()
    dest = tmp_path / "cache"
    assert _run(tmp_path, dest, "--base-url", http_base) == 1
    err = capsys.readouterr().err
    assert f"error: dynamo-crds/a.yaml: cannot fetch {http_base}/deploy/crds/a.yaml" in err
    assert "HTTP 404" in err
    assert not (dest / "dynamo-crds" / "a.yaml").exists()
    assert (dest / "dynamo-chart" / "values.yaml").is_file()  # the others still come


def test_a_wrong_hash_is_refused_and_nothing_is_written(
    tmp_path: Path, upstream_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "cache"
    wrong = {"dynamo-crds__a.yaml": b"what the manifest pinned\n"}
    assert _run(tmp_path, dest, "--base-url", upstream_repo.as_uri(), **wrong) == 1
    err = capsys.readouterr().err
    got, expected = _sha(FAKE_FILES["dynamo-crds/a.yaml"][1]), _sha(wrong["dynamo-crds__a.yaml"])
    assert f"error: dynamo-crds/a.yaml: sha256 {got}, expected {expected} (refused: " in err
    assert not (dest / "dynamo-crds").exists()  # no temporary left, no empty folder either
    # A file already there that differs is not replaced by a download that differs too.
    (dest / "dynamo-crds").mkdir(parents=True)
    (dest / "dynamo-crds" / "a.yaml").write_bytes(b"stale\n")
    assert _run(tmp_path, dest, "--base-url", upstream_repo.as_uri(), **wrong) == 1
    assert (dest / "dynamo-crds" / "a.yaml").read_bytes() == b"stale\n"


def test_a_file_that_differs_is_fetched_again(tmp_path: Path, upstream_repo: Path) -> None:
    dest = tmp_path / "cache"
    (dest / "dynamo-crds").mkdir(parents=True)
    (dest / "dynamo-crds" / "a.yaml").write_bytes(b"stale\n")
    assert _run(tmp_path, dest, "--base-url", upstream_repo.as_uri()) == 0
    assert (dest / "dynamo-crds" / "a.yaml").read_bytes() == FAKE_FILES["dynamo-crds/a.yaml"][1]


def test_verify_names_a_missing_or_changed_file(
    tmp_path: Path, upstream_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "cache"
    assert _run(tmp_path, dest, "--verify") == 1
    assert f"error: dynamo-crds/a.yaml: missing in {dest}" in capsys.readouterr().err
    assert _run(tmp_path, dest, "--base-url", str(upstream_repo)) == 0
    changed = b"changed\n"
    (dest / "dynamo-chart" / "values.yaml").write_bytes(changed)
    capsys.readouterr()
    assert _run(tmp_path, dest, "--verify") == 1
    err = capsys.readouterr().err
    assert f"error: dynamo-chart/values.yaml: sha256 {_sha(changed)}, expected" in err
    assert "a.yaml" not in err


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("commit", "main", "is not a 40-digit hex commit"),
        ("files", {"x.yaml": {"source": "x.yaml", "sha256": "00"}}, "not 64 hex digits"),
        ("files", {"../x.yaml": {"source": "x.yaml", "sha256": "0" * 64}}, "without '..'"),
        ("files", {"x.yaml": {"sha256": "0" * 64}}, "malformed manifest"),
    ],
)
def test_a_malformed_manifest_is_refused(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    raw = {"repository": "o/r", "commit": "a" * 40, "files": {}, field: value}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=message):
        fetch_upstream.load_manifest(path)


def test_the_command_runs_on_the_standard_library_alone(tmp_path: Path) -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)
    # -I: isolated from the project's environment and site-packages' extras.
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT), "--verify", "--dest", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert f"dynamo-crds/nvidia.com_dynamographdeployments.yaml: missing in {tmp_path}" in (
        done.stderr
    )


def test_an_unreachable_source_says_how_to_fetch_offline_and_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "cache"
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}"
    assert _run(tmp_path, dest, "--base-url", unreachable, "--timeout", "2") == 1
    err = capsys.readouterr().err
    assert f"cannot fetch {unreachable}/" in err
    assert "point --base-url at a checkout of o/r at aaaaaaaaaaaa (a folder)" in err
    assert not dest.exists()
    assert _run(tmp_path, dest, "--verify") == 1
    assert f"fetch them: python scripts/fetch_upstream.py --dest {dest}" in capsys.readouterr().err
