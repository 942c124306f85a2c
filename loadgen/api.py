"""The OpenAI-compatible API as the load calls it: base URLs, endpoint paths, request bodies,
error messages cut to one line. Shared by the runner and the readiness gate."""

import json
import urllib.parse

from workload.config import Api

# Relative to `base_url(url)`, so a path prefix in the URL (e.g. behind a proxy) is kept.
API_PATHS = {Api.CHAT: "v1/chat/completions", Api.COMPLETIONS: "v1/completions"}
ERROR_MESSAGE_CHARS = 300  # error samples are cut here: an HTML error page is not a message
SERVER_FIELDS = {"extra_fields": ["timing", "worker_id"]}
"""`nvext` of every request: a Dynamo frontend then returns, per request, its own timing and
the ids of the workers that served it (`measurement.record.RequestRecord`; Dynamo 1.6
`lib/llm/src/protocols/openai/nvext.rs`, `extra_fields`). vLLM's request models allow extra
fields and log them at debug level (`vllm/entrypoints/openai/engine/protocol.py`,
`OpenAIBaseModel`); a server whose models forbid them answers every request 400
(`measurement.errors.unknown_field`); `LoadConfig.plain_openai` leaves the field out."""


def base_url(url: str) -> str:
    """The base the `API_PATHS` are joined to: `url` ("http[s]://HOST[:PORT][/PREFIX]") with a
    trailing "/", and one trailing "/v1" removed, since OpenAI-style base URLs include it:
    "http://h:8000", "http://h:8000/" and "http://h:8000/v1" all give "http://h:8000/".

    Raises ValueError with a one-line message when the scheme is not http or https, the host
    is missing, the port is not a number, or there is a query or fragment.
    """
    shape = "expected http://HOST:PORT or https://HOST:PORT, optionally ending in /v1"
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        hint = f"; did you mean http://{url.strip()}?" if url.strip() and "://" not in url else ""
        raise ValueError(f"invalid server URL {url!r}: {shape}{hint}")
    try:
        parts.port  # noqa: B018 - parsing the port raises ValueError when it is not a number
    except ValueError as exc:
        raise ValueError(f"invalid server URL {url!r}: {exc}") from None
    if parts.query or parts.fragment:
        raise ValueError(f"invalid server URL {url!r}: {shape} (no query or fragment)")
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}/"


def server_of(request_url: str) -> str:
    """The server URL, as `--url` takes it, of a request URL ending in one of `API_PATHS`
    (e.g. where a redirect took it): "http://h/gw/v1/chat/completions" -> "http://h/gw/v1";
    other URLs as they are."""
    for path in API_PATHS.values():
        if request_url.endswith("/" + path):
            return request_url.removesuffix(path.removeprefix("v1/")).rstrip("/")
    return request_url


def short_message(message: str) -> str:
    """`message` on one line (whitespace runs collapsed) and at most `ERROR_MESSAGE_CHARS`
    characters, ending in "..." when cut."""
    text = " ".join(message.split())
    if len(text) <= ERROR_MESSAGE_CHARS:
        return text
    return text[: ERROR_MESSAGE_CHARS - 3] + "..."


def request_body(
    api: Api, model: str, prompt: str, max_tokens: int, *, plain: bool = False
) -> bytes:
    """The JSON body of one streamed request (`stream_options.include_usage`, `max_tokens`,
    and unless `plain` (`LoadConfig.plain_openai`) `nvext`: `SERVER_FIELDS`)."""
    body: dict[str, object] = {"model": model}
    if api is Api.CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body |= {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens}
    if not plain:
        body["nvext"] = SERVER_FIELDS
    return json.dumps(body).encode()
