"""Write a rendered stack to a folder and compare two rendered stacks object by object.

Pure functions over :class:`testbed.render.Rendered`: stable file names and order, and a
field-by-field diff (DeepDiff) in which lists of named items (DGD components, containers, env)
are matched by name rather than by position.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from deepdiff import DeepDiff

from testbed.render import Rendered

_KIND_ORDER = [
    "Namespace",
    "Secret",
    "Service",
    "Deployment",
    "DynamoGraphDeployment",
]


def object_key(obj: dict[str, Any]) -> str:
    """A stable identity for an object: ``<Kind>/<namespace>/<name>`` (no namespace: ``-``)."""
    meta = obj.get("metadata", {})
    return f"{obj['kind']}/{meta.get('namespace', '-')}/{meta['name']}"


def _rank(obj: dict[str, Any]) -> tuple[int, str]:
    kind = obj["kind"]
    rank = _KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)
    return rank, object_key(obj)


def ordered_objects(rendered: Rendered) -> list[dict[str, Any]]:
    """Every Kubernetes object, in apply order (namespace first, workloads last), then by key."""
    return sorted(rendered.kubernetes_objects(), key=_rank)


def file_name(index: int, obj: dict[str, Any]) -> str:
    """``NN-<kind>-<name>.yaml`` in lower case: stable for a given stack."""
    return f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


WRITTEN_FILE = ".testbed-render"
"""The list of files ``testbed render`` wrote into a folder, one name a line: the next render
there removes those and no other file."""


class RenderFolderError(ValueError):
    """``--out`` names a folder that holds files an earlier render did not write."""


def _own_files(out_dir: Path) -> list[Path]:
    """The files an earlier render wrote into ``out_dir`` (:data:`WRITTEN_FILE`).

    Raises:
        RenderFolderError: the folder holds files but no list of a render's.
    """
    listed = out_dir / WRITTEN_FILE
    if listed.exists():
        return [out_dir / name for name in listed.read_text().split() if "/" not in name]
    files = list(out_dir.iterdir()) if out_dir.is_dir() else []
    if (out_dir / "outputs.json").exists() and all(map(_older_render_file, files)):
        return files  # a render from before the list: its own names and its outputs.json only
    if files:
        raise RenderFolderError(
            f"--out {out_dir} holds files testbed render did not write, which it would mix "
            "with or replace: name an empty or new folder (e.g. out/render)"
        )
    return []


def _older_render_file(path: Path) -> bool:
    return path.name == "outputs.json" or bool(
        re.fullmatch(r"(\d\d-[a-z0-9.-]+|helm-release-[a-z0-9.-]+)\.yaml", path.name)
    )


def write_rendered(rendered: Rendered, out_dir: Path) -> list[Path]:
    """Write one YAML file per object, the Helm releases and the stack outputs.

    Files: ``NN-<kind>-<name>.yaml`` per object; ``helm-release-<name>.yaml`` per release
    (chart, version, repository, namespace, values); ``outputs.json`` (the stack outputs);
    :data:`WRITTEN_FILE`. The files of an earlier render (of any stack) are removed first, so
    the folder holds exactly this stack; a folder with other files is refused. Returns the
    paths written, in order.

    Raises:
        RenderFolderError: ``out_dir`` holds files no render wrote.
        OSError: a file cannot be written.
    """
    earlier = _own_files(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in earlier:
        old.unlink(missing_ok=True)
    written = []
    for i, obj in enumerate(ordered_objects(rendered), start=1):
        path = out_dir / file_name(i, obj)
        path.write_text(yaml.safe_dump(_canonical(obj), sort_keys=False))
        written.append(path)
    for release in rendered.helm_releases():
        path = out_dir / f"helm-release-{release.get('name', 'release')}.yaml"
        path.write_text(yaml.safe_dump(release, sort_keys=True))
        written.append(path)
    path = out_dir / "outputs.json"
    path.write_text(json.dumps(rendered.outputs, indent=2, sort_keys=True) + "\n")
    written.append(path)
    (out_dir / WRITTEN_FILE).write_text("".join(f"{p.name}\n" for p in written))
    return written


def add_written(out_dir: Path, path: Path) -> None:
    """Count ``path``, written into ``out_dir`` after :func:`write_rendered` (the crossover
    figure), among the render's own files, so that the next render into the folder removes it
    with the rest."""
    with (out_dir / WRITTEN_FILE).open("a", encoding="utf-8") as listed:
        listed.write(f"{path.name}\n")


def _canonical(obj: dict[str, Any]) -> dict[str, Any]:
    """apiVersion, kind, metadata first (as kubectl writes them), then the rest sorted."""
    head: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    rest = {k: obj[k] for k in sorted(obj) if k not in head}
    return {**head, **rest}


@dataclass(frozen=True)
class FieldChange:
    """One difference between two stacks.

    Attributes:
        object: the object's key (:func:`object_key`), or ``helm:<release>`` / ``outputs``.
        path: the field path, e.g. ``spec.components[prefill].replicas``; ``''`` for a whole
            object that exists on one side only.
        a, b: the values in stack A and B (None where absent).
    """

    object: str
    path: str
    a: Any
    b: Any


def _by_name(value: Any) -> Any:
    """Lists whose items are all dicts with a ``name`` become dicts keyed by that name."""
    if isinstance(value, dict):
        return {k: _by_name(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and "name" in v for v in value):
            return {str(v["name"]): _by_name(v) for v in value}
        return [_by_name(v) for v in value]
    return value


def _path(parts: list[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) or "." in str(p) or "/" in str(p) else f".{p}"
    return out.lstrip(".")


def diff_rendered(a: Rendered, b: Rendered) -> list[FieldChange]:
    """What changes from stack ``a`` to stack ``b``: objects added/removed, fields changed.

    Objects are matched by kind and name (namespaces may differ between stacks: a changed
    namespace is a field change); where one object of a kind is left unmatched on each side
    (e.g. the DGD, named after each stack's graph), those two are paired and their names show
    as a change. Helm releases are matched by name; stack outputs are compared too. Returns
    changes sorted by object, then path.
    """

    def index(r: Rendered) -> dict[str, Any]:
        objs: dict[str, Any] = {
            f"{o['kind']}/{o['metadata']['name']}": o for o in r.kubernetes_objects()
        }
        for rel in r.helm_releases():
            objs[f"helm:{rel.get('name', 'release')}"] = rel
        objs["outputs"] = r.outputs
        return objs

    left, right = index(a), index(b)
    _pair_lone_kinds(left, right)
    changes: list[FieldChange] = []
    for key in sorted(left.keys() | right.keys()):
        if key not in right:
            changes.append(FieldChange(key, "", "present", None))
            continue
        if key not in left:
            changes.append(FieldChange(key, "", None, "present"))
            continue
        # threshold_to_diff_deeper=0: never collapse a mostly-changed dict (e.g. components
        # with different names) into one whole-value change; report each item.
        delta = DeepDiff(
            _by_name(left[key]), _by_name(right[key]), view="tree", threshold_to_diff_deeper=0
        )
        for items in delta.values():
            for item in items:
                changes.append(
                    FieldChange(
                        key,
                        _path(item.path(output_format="list")),
                        None if _absent(item.t1) else item.t1,
                        None if _absent(item.t2) else item.t2,
                    )
                )
    return sorted(changes, key=lambda c: (c.object, c.path))


def _pair_lone_kinds(left: dict[str, Any], right: dict[str, Any]) -> None:
    """Re-key, in place, the one unmatched object of a kind on each side to ``<Kind>/a -> b``."""
    only_left = [k for k in left if k not in right and "/" in k]
    only_right = [k for k in right if k not in left and "/" in k]
    for kind in {k.split("/", 1)[0] for k in only_left}:
        lk = [k for k in only_left if k.startswith(f"{kind}/")]
        rk = [k for k in only_right if k.startswith(f"{kind}/")]
        if len(lk) == 1 and len(rk) == 1:
            paired = f"{lk[0]} -> {rk[0].split('/', 1)[1]}"
            left[paired] = left.pop(lk[0])
            right[paired] = right.pop(rk[0])


def _absent(value: Any) -> bool:
    """DeepDiff's marker for 'not there on this side'."""
    return type(value).__name__ == "NotPresent"
