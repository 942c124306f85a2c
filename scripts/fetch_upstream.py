"""Fetch the upstream Dynamo files the tests read into one cache folder, each checked against its
sha256 in ``scripts/upstream_manifest.json``.

Run: ``python scripts/fetch_upstream.py [--dest DIR] [--base-url URL] [--verify]``.

- The cache folder is ``--dest``, else ``$DYNAMO_TESTBED_UPSTREAM``, else ``.upstream/`` in the
  repository: the folder the tests read (``tests/upstream_files.py``), laid out as
  ``dynamo-crds/<crd>.yaml`` and ``dynamo-chart/<values>.yaml``.
- Each file comes from ``<base URL>/<its path in the repository>``. The base URL defaults to
  https://raw.githubusercontent.com/ai-dynamo/dynamo/<commit> at the manifest's commit; a
  ``file://`` or ``http://`` URL, or a plain folder (a checkout of that commit), works too.
- A file already in the folder with the manifest's sha256 is kept; one that differs is fetched
  again. A download whose sha256 differs from the manifest's is refused: nothing is written
  for it, and the command exits 1 naming the file, both hashes and the URL.
- ``--verify`` downloads nothing: it exits 1 if a file is missing or differs, else 0.

Python's standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parent.parent
MANIFEST = Path(__file__).resolve().parent / "upstream_manifest.json"
ENV_VAR = "DYNAMO_TESTBED_UPSTREAM"
"""The environment variable that names the cache folder (the tests read the same one)."""
DEFAULT_DEST = REPO / ".upstream"
"""The cache folder when neither ``--dest`` nor the variable names one (ignored by git)."""
RAW_URL = "https://raw.githubusercontent.com/{repository}/{commit}"
TIMEOUT_S = 60.0
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class UpstreamFile:
    """One file: ``name`` its path in the cache folder, ``source`` its path in the repository,
    ``sha256`` the hex digest of its bytes."""

    name: str
    source: str
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """The pinned ``repository`` (owner/name), its ``commit`` and the ``files`` taken from it."""

    repository: str
    commit: str
    files: tuple[UpstreamFile, ...]

    def default_base_url(self) -> str:
        """raw.githubusercontent.com at the pinned commit."""
        return RAW_URL.format(repository=self.repository, commit=self.commit)


def _relative(path: str, what: str) -> str:
    """``path`` if it is a relative POSIX path that stays below its root, else ValueError."""
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts or "\\" in path:
        raise ValueError(f"{what} {path!r} must be a relative path without '..'")
    return path


def load_manifest(path: Path = MANIFEST) -> Manifest:
    """The manifest at ``path`` (JSON: ``repository``, ``commit``, ``files``: cache name ->
    ``{"source", "sha256"}``).

    Raises:
        ValueError: a field is missing or malformed (the message names it).
        OSError: the file cannot be read.
    """
    raw = json.loads(path.read_text())
    try:
        repository, commit, entries = raw["repository"], raw["commit"], raw["files"]
        files = tuple(
            UpstreamFile(_relative(name, "file"), _relative(e["source"], "source"), e["sha256"])
            for name, e in entries.items()
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: malformed manifest ({exc!r})") from exc
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ValueError(f"{path}: commit {commit!r} is not a 40-digit hex commit")
    bad = [f.name for f in files if not _SHA256.match(f.sha256)]
    if bad or not files:
        raise ValueError(f"{path}: no files, or a sha256 that is not 64 hex digits: {bad}")
    return Manifest(repository, commit, files)


def cache_dir(dest: str | None = None) -> Path:
    """The cache folder: ``dest``, else ``$DYNAMO_TESTBED_UPSTREAM``, else ``.upstream/``."""
    chosen = dest or os.environ.get(ENV_VAR)
    return Path(chosen).expanduser().resolve() if chosen else DEFAULT_DEST


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _base_url(base: str) -> str:
    """A URL without a trailing slash; a plain folder becomes its ``file://`` URL."""
    if "://" not in base:
        return Path(base).expanduser().resolve().as_uri()
    return base.rstrip("/")


def verify(manifest: Manifest, dest: Path) -> list[str]:
    """One line per manifest file missing from ``dest`` or differing from its sha256."""
    problems = []
    for f in manifest.files:
        path = dest / f.name
        if not path.is_file():
            problems.append(f"{f.name}: missing in {dest}")
        elif (found := file_sha256(path)) != f.sha256:
            problems.append(f"{f.name}: sha256 {found}, expected {f.sha256}")
    return problems


def _download(url: str, target: Path, expected: str, timeout_s: float) -> str | None:
    """Fetch ``url`` into ``target`` if its sha256 is ``expected``; else leave ``target`` (and a
    folder it would have made) as it was and return why."""
    made = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout_s) as resp:
            while chunk := resp.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != expected:
            return f"sha256 {digest.hexdigest()}, expected {expected} (refused: {url})"
        os.replace(tmp, target)
        made.clear()
        return None
    except urllib.error.HTTPError as exc:
        return f"cannot fetch {url}: HTTP {exc.code} {exc.reason}"
    except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError is an OSError
        reason = getattr(exc, "reason", None) or exc
        return f"cannot fetch {url}: {reason}"
    finally:
        tmp.unlink(missing_ok=True)
        for folder in made:  # innermost first: only the folders made for this file, if empty
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()


def fetch(
    manifest: Manifest, dest: Path, base_url: str | None = None, timeout_s: float = TIMEOUT_S
) -> tuple[list[str], list[str]]:
    """Bring every manifest file into ``dest`` (kept if already there with its sha256): the
    lines for files now in place, and the lines for files that could not be (none written)."""
    base = _base_url(base_url) if base_url else manifest.default_base_url()
    done, failed = [], []
    for f in manifest.files:
        target = dest / f.name
        if target.is_file() and file_sha256(target) == f.sha256:
            done.append(f"{f.name}: already there")
            continue
        problem = _download(f"{base}/{f.source}", target, f.sha256, timeout_s)
        if problem is None:
            done.append(f"{f.name}: fetched")
        else:
            failed.append(f"{f.name}: {problem}")
    return done, failed


def main(argv: list[str] | None = None) -> int:
    """The command line; the exit status (0 all files in place, 1 otherwise, 2 bad usage)."""
    parser = argparse.ArgumentParser(
        prog="python scripts/fetch_upstream.py",
        description="Fetch the upstream Dynamo files the tests read into one cache folder, "
        "each checked against its sha256 in scripts/upstream_manifest.json.",
    )
    parser.add_argument(
        "--dest", help=f"cache folder (default: ${ENV_VAR}, else {DEFAULT_DEST.name}/ here)"
    )
    parser.add_argument(
        "--base-url",
        help="where the repository's files are: a URL (https://, http://, file://) or a folder "
        "(default: raw.githubusercontent.com at the manifest's commit)",
    )
    parser.add_argument(
        "--verify", action="store_true", help="download nothing; check the folder's files"
    )
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        manifest = load_manifest(args.manifest)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    dest = cache_dir(args.dest)
    pinned = f"{manifest.repository} at {manifest.commit[:12]}"
    if args.verify:
        problems = verify(manifest, dest)
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        if problems:
            where = f" --dest {dest}" if args.dest else ""
            print(f"fetch them: python scripts/fetch_upstream.py{where}", file=sys.stderr)
        else:
            print(f"{len(manifest.files)} upstream files of {pinned} in {dest}: sha256 ok")
        return 1 if problems else 0
    done, failed = fetch(manifest, dest, args.base_url, args.timeout)
    for line in done:
        print(line)
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    if failed:
        if any(": cannot fetch " in line for line in failed):
            print(
                f"where the files cannot be fetched from, point --base-url at a checkout of "
                f"{pinned} (a folder) or a mirror of it",
                file=sys.stderr,
            )
        return 1
    print(f"{len(done)} upstream files of {pinned} in {dest}")
    if dest != cache_dir():
        print(f"the tests read them with {ENV_VAR}={dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
