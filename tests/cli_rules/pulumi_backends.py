"""How Pulumi's backends parse a stack reference name, restated in Python.

A StackReference (and the ``pulumi:pulumi:readStackOutputs`` invoke) hands its name to the
backend's ``ParseStackReference`` (pulumi/pulumi ``pkg/backend/backend.go`` L408-411,
``backendClient.GetStackOutputs``). Each function below restates one backend's parser at
pulumi/pulumi ``pulumi_cli.PULUMI_COMMIT`` (file and lines given), returning the
``(organization, project, stack)`` it resolves to (None where the backend has no such part).
"""

from __future__ import annotations

import re

STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]*")
"""``stackNameRegex`` (``sdk/go/common/tokens/stack_name.go`` L51)."""


class BackendRefError(Exception):
    """The error the backend returns, which fails a StackReference read."""


def parse_stack_name(name: str) -> str:
    """``tokens.ParseStackName`` (``stack_name.go`` L54-85): non-empty, at most 100 characters,
    only letters, digits, ``_``, ``.`` and ``-``."""
    if name == "":
        raise BackendRefError("a stack name may not be empty")
    if len(name) > 100:
        raise BackendRefError("a stack name cannot exceed 100 characters")
    end = STACK_NAME.match(name)
    failure = 0 if end is None else end.end()
    if failure != len(name):
        raise BackendRefError(
            "a stack name may only contain alphanumeric, hyphens, underscores, or periods: "
            f"invalid character {name[failure]!r} at position {failure}"
        )
    return name


def diy_legacy(reference: str) -> tuple[None, None, str]:
    """A DIY backend in the old non-project layout (``pkg/backend/diy/store.go`` L362-368,
    ``legacyReferenceStore.ParseReference``): the whole reference is the stack name."""
    return None, None, parse_stack_name(reference)


def diy_project(reference: str, current_project: str | None) -> tuple[str, str, str]:
    """A DIY backend in the project layout (``store.go`` L138-199,
    ``projectReferenceStore.ParseReference``): ``stack``, ``org/stack`` or
    ``org/project/stack``; the organization must be ``organization``; a missing project is the
    current project's (the program's, under ``pulumi up``)."""
    if reference == "":
        raise BackendRefError("stack name must not be empty")
    parts = reference.split("/")
    org, project, name = "", "", parts[-1]
    if len(parts) == 2:
        org = parts[0]
    elif len(parts) == 3:
        org, project = parts[0], parts[1]
    elif len(parts) > 3:  # Go's switch has no case for it: name stays "" (L153-164)
        name = ""
    org = org or "organization"
    if org != "organization":
        raise BackendRefError("organization name must be 'organization'")
    if not project:
        if current_project is None:
            raise BackendRefError("no Pulumi.yaml project file found")
        project = current_project
    return org, project, parse_stack_name(name)


def cloud(reference: str, default_org: str, current_project: str | None) -> tuple[str, str, str]:
    """Pulumi Cloud (``pkg/backend/httpstate/backend.go`` L1086-1150, ``parseStackName`` and
    ``ParseStackReference``): ``stack``, ``owner/stack`` or ``owner/project/stack``; a missing
    owner is the user's default organization, a missing project the current project."""
    parts = reference.split("/")
    if len(parts) > 3:
        raise BackendRefError(f"could not parse stack name '{reference}'")
    owner = parts[0] if len(parts) >= 2 else ""
    project = parts[1] if len(parts) == 3 else ""
    if not project:
        if current_project is None:
            raise BackendRefError("no Pulumi.yaml project file found")
        project = current_project
    return owner or default_org, project, parse_stack_name(parts[-1])
