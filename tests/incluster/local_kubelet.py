"""A local stand-in for the kubelet: starts the container of a rendered load Job's pod as a
subprocess with exactly its command, arguments and environment (plus ``JOB_COMPLETION_INDEX``,
which Kubernetes sets in an Indexed Job's pods), its ConfigMap's items written under a folder
that stands for the mount path (paths in args and env are moved there), and a ``blocked``
folder first on ``PYTHONPATH`` whose pandas, pyarrow, matplotlib, rich, kubernetes and pulumi
raise ImportError: the runtime image may not need them. The pod's stdout is its log."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BLOCKED = ("pandas", "pyarrow", "matplotlib", "rich", "kubernetes", "pulumi", "components")


def materialize(job: dict[str, Any], configmap: dict[str, Any], root: Path) -> Path:
    """Write the Job's ConfigMap volume under ``root`` as the kubelet mounts it; returns the
    local folder that stands for the mount path."""
    spec = job["spec"]["template"]["spec"]
    (volume,) = spec["volumes"]
    (mount,) = spec["containers"][0]["volumeMounts"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    local = root / mount["mountPath"].lstrip("/")
    for item in volume["configMap"]["items"]:
        path = local / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(configmap["data"][item["key"]])
    blocked = root / "blocked"
    for name in BLOCKED:
        (blocked / name).mkdir(parents=True, exist_ok=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not needed in the load pod')\n"
        )
    return local


def start_pod(
    job: dict[str, Any],
    configmap: dict[str, Any],
    index: int,
    root: Path,
    replace: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start pod ``index`` of ``job``; ``replace`` maps argument values (the in-cluster URL and
    barrier host) to local ones. Its working directory is an empty folder: only the mounted
    sources and the installed packages are importable."""
    local = materialize(job, configmap, root)
    mount = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:1] == ["python3"]
    args = [str(local) + a[len(mount) :] if a.startswith(mount) else a for a in container["args"]]
    args = [(replace or {}).get(a, a) for a in args]
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": str(index)}
    for var in container["env"]:
        value = var["value"]
        env[var["name"]] = str(local) + value[len(mount) :] if value.startswith(mount) else value
    env["PYTHONPATH"] = f"{root / 'blocked'}{os.pathsep}{env['PYTHONPATH']}"
    cwd = root / f"cwd-{index}"
    cwd.mkdir(exist_ok=True)
    command = [sys.executable, *container["command"][1:], *args]
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
