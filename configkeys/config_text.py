"""Text config fields that take the scalars the Pulumi CLI stores typed.

``pulumi config set --path KEY VALUE`` does not store what the user typed as text when KEY is a
path below a top-level key (``load.runId``, ``topology.workers[0].cpu``): ``true``/``false``
become booleans and integers (without a leading zero) become numbers; everything else stays a
string. Source: pulumi/pulumi at 1b5949891b3cefcb9974752b24a5ecef0acc86c8
(``tests/cli_rules/pulumi_cli.PULUMI_COMMIT``), ``sdk/go/common/resource/config/object.go``
L566-591, ``coerce`` (``"true"``/``"false"`` -> bool, ``strconv.ParseInt``/``ParseUint`` ->
int, a leading ``0`` keeps the string), which ``Map.Set`` (``map.go`` L225-245) applies to a key
path of more than one segment.

Stack files are YAML, where an unquoted ``2``, ``true`` or ``0.5`` is a number or boolean too.
So ``pulumi config set --path -s disagg-same-node load.runId 2`` hands the program
``{"runId": 2}``. Every text field of the stack config is a :data:`ConfigText`, which takes such a
scalar as the text the user wrote and then applies the field's own checks (pattern, length).
Numbers and booleans arriving in number and boolean fields need nothing: pydantic's lax mode
already reads ``"0.85"`` as a float and ``"true"`` as a bool.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator


def cli_scalar_text(value: object) -> object:
    """A scalar the CLI (or YAML) stored typed -> the text the user wrote; anything else as is.

    ``2`` -> ``"2"``, ``True`` -> ``"true"`` (the CLI's and YAML's spelling, not Python's
    ``"True"``), ``0.5`` -> ``"0.5"``; strings, lists, dicts and None pass through unchanged, so
    the field's own validation reports them.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


ConfigText = Annotated[str, BeforeValidator(cli_scalar_text)]
"""A ``str`` config field that also takes the typed scalars ``pulumi config set --path`` and YAML
store (see the module docstring). Use it for every text field a user can set in a stack file."""
