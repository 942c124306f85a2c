"""``testbed load-role STACK``: the Role the in-cluster load step needs in the stack's
namespace (:data:`incluster.manifests.LOAD_STEP_RULES`), as a manifest an administrator
applies: ``testbed load-role kv-routing --user alice | kubectl apply -f -``. With ``--user``,
``--group`` or ``--service-account`` a RoleBinding to them follows. Imports of what the command
runs are inside it (``tests/test_cli_help.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RBAC_GROUP = "rbac.authorization.k8s.io"


def role_manifests(
    namespace: str,
    users: list[str],
    groups: list[str],
    service_accounts: list[str],
) -> str:
    """The Role, and a RoleBinding when any subject is named, as one YAML stream.

    Raises:
        ValueError: a service account not given as ``NAMESPACE:NAME``.
    """
    import yaml

    from incluster.manifests import load_step_binding, load_step_role

    subjects = [{"kind": "User", "apiGroup": RBAC_GROUP, "name": u} for u in users]
    subjects += [{"kind": "Group", "apiGroup": RBAC_GROUP, "name": g} for g in groups]
    for account in service_accounts:
        ns, _, name = account.partition(":")
        if not ns or not name:
            raise ValueError(
                f"--service-account {account}: give it as NAMESPACE:NAME, e.g. "
                f"--service-account {namespace}:deployer"
            )
        subjects.append({"kind": "ServiceAccount", "name": name, "namespace": ns})
    objects = [load_step_role(namespace)]
    if subjects:
        objects.append(load_step_binding(namespace, subjects))
    return yaml.safe_dump_all(objects, sort_keys=False)


def load_role_command(
    stack: Annotated[str, typer.Argument(help="Stack name (stacks/Pulumi.STACK.yaml).")],
    user: Annotated[
        list[str] | None, typer.Option("--user", help="Bind the Role to this user.")
    ] = None,
    group: Annotated[
        list[str] | None, typer.Option("--group", help="Bind the Role to this group.")
    ] = None,
    service_account: Annotated[
        list[str] | None,
        typer.Option("--service-account", help="Bind it to this NAMESPACE:NAME account."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the YAML here instead of stdout.")
    ] = None,
) -> None:
    """Print the Role the load step needs in STACK's namespace (load.runner: cluster), and a
    RoleBinding to the subjects named; apply it with `kubectl apply -f -`.

    Example: testbed load-role kv-routing --user alice | kubectl apply -f -
    """
    from stackmodel.errors import StackConfigError
    from stackmodel.stacks import StackFileError, load_stack
    from testbed.console import fail

    try:
        namespace = load_stack(stack).cfg.namespace
    except (FileNotFoundError, StackFileError, StackConfigError) as exc:
        fail(str(exc))
    try:
        text = role_manifests(namespace, user or [], group or [], service_account or [])
    except ValueError as exc:
        fail(str(exc))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}: Role testbed-load-step in namespace {namespace}", err=True)
