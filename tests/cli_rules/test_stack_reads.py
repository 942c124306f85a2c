"""Reading another stack's outputs: what fails a deployment and what does not.

The engine's rules (pulumi/pulumi at ``pulumi_cli.PULUMI_COMMIT``):

- the backend answers a stack that does not exist with ``unknown stack "<name>"``
  (``pkg/backend/backend.go`` L408-418, ``backendClient.GetStackOutputs``), for a
  StackReference's read and for the ``pulumi:pulumi:readStackOutputs`` invoke alike
  (``pkg/resource/deploy/builtins.go`` L278-297 and L338-355, both through
  ``readStackReference``, L371-420);
- a StackReference is read by a ``ReadStep`` whose error fails the step
  (``pkg/resource/deploy/step.go`` L1338-1356), and a failed step cancels the deployment
  (``pkg/resource/deploy/step_executor.go`` L413-429): the preview or update fails whatever the
  program does with the error;
- an invoke's error is returned to the program only (``pkg/resource/deploy/source_eval.go``
  L1158-1165, ``resmon.Invoke``).

The last step happens in the installed Python SDK, so it is checked here against it: a failed
invoke raises in the caller and is not recorded as an unhandled RPC exception (which would fail
the program at its end). :class:`testbed.render.EchoMocks` answers the invoke the way the
resource monitor does (a gRPC error).
"""

from __future__ import annotations

import asyncio

import pulumi
from pulumi.runtime.settings import _get_rpc_manager

from components.program import READ_STACK_OUTPUTS, read_stack_outputs
from testbed.render import EchoMocks


def read(name: str, stacks: dict[str, dict[str, object]]) -> tuple[object, object, object]:
    """``read_stack_outputs(name)`` under mocks knowing ``stacks``; also returns the RPC
    manager's unhandled exception afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pulumi.runtime.set_mocks(EchoMocks(stacks), project="dynamo-testbed", stack="t", preview=True)
    _get_rpc_manager().clear()
    outputs, error = loop.run_until_complete(read_stack_outputs(name))
    unhandled = _get_rpc_manager().unhandled_exception
    loop.close()
    return outputs, error, unhandled


def test_an_unknown_stack_is_an_error_returned_to_the_program() -> None:
    outputs, error, unhandled = read("kv-routing", {})
    assert outputs is None
    assert error == (
        f"invoke of {READ_STACK_OUTPUTS} failed: invocation of {READ_STACK_OUTPUTS} returned an "
        'error: unknown stack "kv-routing"'
    )
    assert unhandled is None  # nothing left to fail the program


def test_an_existing_stack_answers_its_outputs() -> None:
    assert read("kv-routing", {"kv-routing": {"results": [1]}}) == ({"results": [1]}, None, None)
    assert read("kv-routing", {"kv-routing": {}}) == ({}, None, None)  # never brought up
