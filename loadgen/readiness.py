"""Is the server ready to be measured? `/v1/models` listing the model, then a readiness gate.

Listing is not readiness: right after a DynamoGraphDeployment turns Ready, a Dynamo frontend can
list the model while answering 500 and then 404 for several seconds (docs/loadgen.md,
"Readiness gate"). The gate (`wait_until_serving`) therefore sends streamed completions, exactly
as the load does, until `ReadyCheck.successes` in a row succeed.

Every request here goes through `loadgen.loops.make_client`, the one HTTP client configuration
of the load itself (aiohttp, which ignores `HTTP(S)_PROXY`; same connect/read timeouts), so the
gate never waits for a server the load would reach differently, nor the other way round.
"""

import asyncio
import json
import ssl
import time
import urllib.parse
from collections import Counter
from types import SimpleNamespace

import aiohttp

from loadgen.api import API_PATHS, request_body, short_message
from loadgen.loops import make_client
from loadgen.request import failure_kind, stream_request
from measurement.errors import ErrorKind, unknown_field
from measurement.record import RequestRecord
from measurement.results import Readiness
from workload.config import LoadConfig, ReadyCheck

MODELS_PATH = "v1/models"  # relative to `loadgen.api.base_url`
POLL_INTERVAL_S = 0.5  # between two /v1/models polls, and after a failed gate request
GATE_PROMPT = "Reply with one word: ready?"
GATE_MAX_TOKENS = 2  # the gate checks the path end to end; two tokens give a first token and ITL


class ModelNotListedError(TimeoutError):
    """`/v1/models` did not list the model in time (the message has the last answer seen)."""


class NotServingError(TimeoutError):
    """The readiness gate's deadline passed before enough completions in a row succeeded."""


class RefusedAtOnceError(NotServingError):
    """A failure no wait can mend, which stops the gate at its first occurrence: the server's
    TLS certificate refused, or a request body refused for a field the server does not accept
    (`nvext`); the message names the option that fixes it."""


PLAIN_OPENAI_FIX = "add --plain-openai (load setting plainOpenai: true) to send it without nvext"
TLS_FIX = (
    "add --ca-file PATH with the CA that signed the server's certificate (or set SSL_CERT_FILE "
    "before starting testbed), or --insecure to skip the check"
)
NOT_TLS_SAID = ("WRONG_VERSION_NUMBER", "record layer failure", "packet length too long")
"""What OpenSSL says when the server's first bytes are no TLS record (a plain-HTTP server on the
port): 3.0's `ssl/record/ssl3_record.c` raises SSL_R_WRONG_VERSION_NUMBER, 3.2 and later
report the same as SSL_R_RECORD_LAYER_FAILURE; a large plain answer reads as a record too long.
No certificate option mends it."""


def refused_at_once(url: str, record: RequestRecord) -> str | None:
    """Why `record`'s failure stops the gate at once (`RefusedAtOnceError`), or None: a TLS
    failure (`ErrorKind.TLS`: a server that answered in plain HTTP (`NOT_TLS_SAID`) is named
    with the `http://` URL, any other with the certificate options), or an answer saying a
    request field is not accepted (`measurement.errors.unknown_field`)."""
    said = short_message(record.error or "")
    if record.error_kind is ErrorKind.TLS:
        if any(marker in (record.error or "") for marker in NOT_TLS_SAID):
            plain = url.replace("https://", "http://", 1)
            fix = f"the server does not speak TLS on that port: give --url {plain}"
        else:
            fix = TLS_FIX
        return f"{url}: the TLS handshake failed ({said}); {fix}"
    if record.error_kind is ErrorKind.HTTP_STATUS and unknown_field(record.status, said):
        return f"{url} refused the request body for a field it does not accept ({said}); " + (
            PLAIN_OPENAI_FIX
        )
    return None


def tls_on_plain_url(url: str, record: RequestRecord) -> str:
    """Why an `http://` URL whose port speaks TLS (`speaks_tls`) stops the gate, with the
    `https://` URL to give instead."""
    secure = "https://" + url.split("://", 1)[1]
    said = short_message(record.error or "")
    return (
        f"{url}: the server speaks TLS on that port (the plain HTTP request got no HTTP "
        f"answer: {said}); give --url {secure}"
    )


async def speaks_tls(url: str, timeout_s: float) -> bool:
    """True when the server at `url`'s host and port answers a TLS ClientHello in TLS: the
    handshake completes (the certificate is not checked), or the server answers with a TLS
    alert record (OpenSSL names the alert it received: ``..._ALERT_...``). A plain-HTTP server
    answers the ClientHello in HTTP or closes: False, as is no connection within `timeout_s`
    seconds.

    This is how a TLS port is told from a plain-HTTP one when a plain request sent there got no
    HTTP answer: a TLS server reads the request's first bytes as a record header (RFC 8446
    section 5.1, `TLSPlaintext`: a content type 20-23, then the version 0x03 0x0N) and either
    closes without a word (OpenSSL's record layer fails a first record starting "GET " / "POST "
    with `SSL_R_HTTP_REQUEST` and `SSL_AD_NO_ALERT`) or answers with an alert record (0x15
    0x03 ...), which aiohttp's HTTP parser cannot read as a status line: aiohttp 3.14.5 reports
    either as a connection that ended before a response (`client_proto.py` L166,
    `ServerDisconnectedError`; the parser's "Bad status line")."""
    parts = urllib.parse.urlsplit(url)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(parts.hostname, parts.port or 80, ssl=context)
    except ssl.SSLError as exc:
        return "ALERT" in (exc.reason or "")
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def model_listed(
    client: aiohttp.ClientSession, model: str, record: RequestRecord | None = None
) -> str | None:
    """None when `GET /v1/models` (on `client`'s base URL) lists `model`; else why not, in one
    line ("HTTP 503, models []", "ClientConnectorError: ..."). A request that got no HTTP
    answer is also recorded in `record` (its times and `error_kind`, as the load records a
    failure: `loadgen.request.failure_kind`), which `StopCheck` judges."""
    # make_client's timing trace writes its times into the request context.
    context = record if record is not None else SimpleNamespace()
    try:
        async with client.get(
            MODELS_PATH, headers={"accept-encoding": "identity"}, trace_request_ctx=context
        ) as response:
            text = await response.text()
            status = response.status
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        said = f"{type(exc).__name__}: {exc}"
        if record is not None:
            timeout = isinstance(exc, TimeoutError)
            record.fail(ErrorKind.TIMEOUT if timeout else failure_kind(record, exc), said)
        return short_message(said)
    try:
        data = json.loads(text).get("data", [])
        ids = [entry.get("id") for entry in data]
    except (ValueError, AttributeError, TypeError):
        return short_message(f"HTTP {status}, not a model list: {text}")
    if status == 200 and model in ids:
        return None
    return short_message(f"HTTP {status}, models {ids}")


class StopCheck:
    """Why a failed request of one wait (the model listing's, the readiness gate's) stops it at
    once, or None: `refused_at_once`, or, for an `http://` URL, a request dropped with no
    answer by a server that speaks TLS on that port (`speaks_tls`, asked once, at the wait's
    first such drop)."""

    def __init__(self, url: str, config: LoadConfig) -> None:
        self.url = url
        self.timeout_s = config.connect_timeout_s
        self.probe_tls = url.lower().startswith("http://")

    async def why(self, record: RequestRecord) -> str | None:
        """Why `record`'s failure stops the wait at once, or None."""
        if (why := refused_at_once(self.url, record)) is not None:
            return why
        if self.probe_tls and record.error_kind is ErrorKind.DROPPED:
            self.probe_tls = False
            if await speaks_tls(self.url, self.timeout_s):
                return tls_on_plain_url(self.url, record)
        return None


async def wait_for_model(url: str, model: str, config: LoadConfig, timeout_s: float) -> float:
    """Poll `GET <url>/v1/models` (url: a `base_url`) every `POLL_INTERVAL_S` until it lists
    `model`; return the seconds waited.

    `/health` is not used: Dynamo's frontend reports healthy with zero workers; the model is
    listed once a worker serving it has registered.

    Raises:
        ModelNotListedError: not listed within `timeout_s` seconds (message: the last answer);
            or at once, at a failure no wait mends (`StopCheck`, as the readiness gate stops).
    """
    started = time.monotonic()
    stop = StopCheck(url, config)
    async with make_client(url, config, 1) as client:
        while True:
            record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
            why_not = await model_listed(client, model, record)
            if why_not is None:
                return time.monotonic() - started
            if record.error_kind is not None and (why := await stop.why(record)) is not None:
                raise ModelNotListedError(why)
            if time.monotonic() - started + POLL_INTERVAL_S > timeout_s:
                raise ModelNotListedError(
                    f"{url}v1/models did not list {model!r} within {timeout_s:g} s ({why_not})"
                )
            await asyncio.sleep(POLL_INTERVAL_S)


async def wait_until_serving(
    url: str, model: str, config: LoadConfig, check: ReadyCheck
) -> Readiness:
    """Send streamed completions (`config.api`, a short prompt, `GATE_MAX_TOKENS` tokens) to
    `url` (a `base_url`) one at a time until `check.successes` in a row succeed; a failure
    resets the count and is followed by a `POLL_INTERVAL_S` pause.

    Raises:
        RefusedAtOnceError: a failure no wait mends (`StopCheck`), at its first occurrence.
        NotServingError: `check.timeout_s` passed first; the message has the failures by kind
            and the last one.
    """
    started = time.monotonic()
    body = request_body(config.api, model, GATE_PROMPT, GATE_MAX_TOKENS, plain=config.plain_openai)
    path = API_PATHS[config.api]
    failures: Counter[str] = Counter()
    first: str | None = None
    last: str | None = None
    in_a_row = attempts = 0
    stop = StopCheck(url, config)
    async with make_client(url, config, 1) as client:
        while in_a_row < check.successes:
            remaining = check.timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(failures.items()))
                raise NotServingError(
                    f"{url} did not serve {model!r}: {check.successes} streamed completions in "
                    f"a row did not succeed within {check.timeout_s:g} s ({attempts} sent; "
                    f"failed: {kinds or 'none'}; last: {last or 'none'})"
                )
            record = RequestRecord(index=attempts, prefix_id=0, intended_ns=time.monotonic_ns())
            attempts += 1
            await stream_request(
                client, path, body, record, min(config.request_timeout_s, remaining)
            )
            if record.ok:
                in_a_row += 1
                continue
            if (why := await stop.why(record)) is not None:
                raise RefusedAtOnceError(why)
            in_a_row = 0
            failures[str(record.error_kind)] += 1
            last = short_message(f"{record.error_kind}: {record.error or ''}")
            first = first or last
            await asyncio.sleep(POLL_INTERVAL_S)
    return Readiness(
        waited_s=time.monotonic() - started,
        attempts=attempts,
        successes=check.successes,
        failures_by_kind=dict(failures),
        first_failure=first,
        last_failure=last,
    )
