"""`testbed load` behind a gateway, against a strict server, over TLS and with a server that
closes idle kept-alive connections: each emulated by `fake_openai_server` on loopback."""

import datetime
import ipaddress
import json
import socketserver
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fake_openai_server import (
    Close,
    FakeServer,
    Sleep,
    Status,
    Step,
    normal_stream,
    serve_in_thread,
)
from typer.testing import CliRunner

from loadgen.loops import make_client
from loadgen.readiness import ModelNotListedError, speaks_tls, wait_for_model
from loadgen.request import stream_request
from measurement.errors import AFTER_A_WAIT_S, ErrorKind, after_a_wait
from measurement.record import RequestRecord
from testbed.cli import app
from testbed.console import EXIT_NO_SUCCESS
from workload.config import LoadConfig

GRID = [
    *("--model", "m", "--prefix-kinds", "1", "--concurrency", "2", "--repetitions", "1"),
    *("--prompt-tokens", "30", "--max-tokens", "4", "--no-progress"),
]
PATH = "v1/chat/completions"
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


def load(url: str, out: Path, *extra: str) -> Any:
    """`testbed load` as a user runs it (its CliRunner result)."""
    return CliRunner().invoke(app, ["load", "--url", url, *GRID, "--out", str(out), *extra])


def only_run(out: Path) -> dict[str, Any]:
    grid = json.loads((out / "result.json").read_text())
    assert len(grid["runs"]) == 1
    run: dict[str, Any] = grid["runs"][0]
    return run


def test_a_gateway_timeout_after_a_wait_is_a_lower_bound_in_the_tails(tmp_path: Path) -> None:
    """4 of 20 requests wait 0.6 s and get a gateway's 504, the others answer at once: the 504s
    enter the TTFT and E2E p99 as lower bounds (at least the wait), the table counts them as
    censored and the SLO on TTFT p99 is missed."""
    waited = 0.6
    assert waited >= AFTER_A_WAIT_S
    measured = 0

    def gateway(body: dict[str, Any], number: int) -> list[Step]:
        nonlocal measured
        if body.get("max_tokens") != 4:  # the prompt calibration's requests
            return normal_stream(["a"])
        measured += 1
        if measured % 5 == 0:
            return [Sleep(waited), Status(504, b"upstream request timeout")]
        return normal_stream(["a", "b", "c", "d"])

    with serve_in_thread(gateway) as server:
        result = load(
            server.url,
            tmp_path,
            *("--requests-per-run", "20", "--warmup-requests", "0", "--no-ready-check"),
            *("--slo", "ttft_p99_ms=500"),
        )
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path)
    assert run["errors_by_kind"] == {"http_status": 4}
    assert run["censored"] == 4
    assert run["ttft_p99_ms"] >= waited * 1000
    assert run["e2e_p99_ms"] >= waited * 1000
    assert "ttft_p99_ms" in run["lower_bounds"]
    assert any(
        w.startswith("4 of 20 requests failed after a wait (a gateway's 502 / 503 / 504")
        for w in run["warnings"]
    ), run["warnings"]
    assert "censored" in result.output
    assert "4 censored requests" in " ".join(result.output.split())
    assert "MISSED" in result.output


@pytest.mark.asyncio
async def test_a_connection_dropped_after_a_wait_is_censored() -> None:
    """A request the server drops unanswered after working on it 0.6 s is a lower bound."""
    async with (
        FakeServer(lambda body, n: [Sleep(0.6), Close()]) as server,
        make_client(server.url, LoadConfig(), 1) as client,
    ):
        record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
        await stream_request(client, PATH, BODY, record, 5.0)
    assert (record.error_kind, record.censored) == (ErrorKind.DROPPED, True)
    assert record.error_ns is not None and record.sent_ns is not None
    assert record.error_ns - record.sent_ns >= 0.6e9


@pytest.mark.parametrize(
    ("kind", "status", "waited_s", "retry_after", "censored"),
    [
        (ErrorKind.HTTP_STATUS, 504, 1.0, False, True),  # a gateway's timeout
        (ErrorKind.HTTP_STATUS, 502, 0.5, False, True),
        (ErrorKind.HTTP_STATUS, 504, 0.49, False, False),  # at once: a refusal
        (ErrorKind.HTTP_STATUS, 503, 2.0, True, False),  # asked to come back later
        (ErrorKind.HTTP_STATUS, 500, 2.0, False, False),  # the server's own error
        (ErrorKind.HTTP_STATUS, 400, 2.0, False, False),
        (ErrorKind.DROPPED, None, 0.6, False, True),
        (ErrorKind.TRUNCATED, 200, 3.0, False, True),
        (ErrorKind.DROPPED, None, 0.01, False, False),
        (ErrorKind.CONNECTION, None, 5.0, False, False),  # never reached the server
        (ErrorKind.TLS, None, 5.0, False, False),
        (ErrorKind.HTTP_STATUS, 504, None, False, False),  # never sent
    ],
)
def test_which_failures_came_after_a_wait(
    kind: ErrorKind, status: int | None, waited_s: float | None, retry_after: bool, censored: bool
) -> None:
    assert after_a_wait(kind, status, waited_s, retry_after) is censored


EXTRA_FORBIDDEN = json.dumps(
    {
        "object": "error",
        "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'nvext'), 'msg': "
        "'Extra inputs are not permitted', 'input': {'extra_fields': ['timing']}}]",
        "type": "BadRequestError",
        "code": 400,
    }
).encode()


def strict(body: dict[str, Any], number: int) -> list[Step]:
    """A server whose request models forbid unknown fields (pydantic `extra="forbid"`)."""
    if "nvext" in body:
        return [Status(400, EXTRA_FORBIDDEN)]
    return normal_stream(["a", "b", "c", "d"])


def test_a_strict_server_stops_the_gate_at_once_naming_plain_openai(tmp_path: Path) -> None:
    with serve_in_thread(strict) as server:
        result = load(server.url, tmp_path / "out", "--requests-per-run", "4")
        sent = len(server.requests)
    assert result.exit_code == EXIT_NO_SUCCESS, result.output
    said = " ".join(result.output.split())
    assert "refused the request body for a field it does not accept" in said
    assert "add --plain-openai (load setting plainOpenai: true)" in said
    assert sent == 1  # the first refusal ended the gate


def test_plain_openai_sends_no_nvext(tmp_path: Path) -> None:
    with serve_in_thread(strict) as server:
        result = load(server.url, tmp_path, "--requests-per-run", "4", "--plain-openai")
        bodies = list(server.requests)
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path)
    assert (run["samples"], run["errors"]) == (4, 0)
    assert bodies and not any("nvext" in b for b in bodies)
    stored = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert stored["settings"]["plainOpenai"] is True


def test_plain_openai_is_a_load_setting(tmp_path: Path) -> None:
    settings = tmp_path / "load.yaml"
    settings.write_text("plainOpenai: true\n")
    with serve_in_thread(strict) as server:
        result = load(
            server.url, tmp_path / "out", "--requests-per-run", "2", "--config", str(settings)
        )
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (an ingress's default fake certificate is one)
    and its key, as PEM files: (certificate, key)."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake ingress certificate")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


def answer(body: dict[str, Any], number: int) -> list[Step]:
    return normal_stream(["a", "b", "c", "d"])


def test_an_untrusted_certificate_stops_the_gate_at_once(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    with serve_in_thread(answer, tls=server_tls(certificate)) as server:
        started = time.monotonic()
        result = load(server.url, tmp_path, "--requests-per-run", "2")
        took = time.monotonic() - started
        served = len(server.requests)
    assert result.exit_code == EXIT_NO_SUCCESS, result.output
    said = " ".join(result.output.split())
    assert "the TLS handshake failed" in said and "certificate verify failed" in said
    assert "add --ca-file PATH" in said and "--insecure" in said
    error = said[said.index("error: ") :]
    assert error.endswith("no grid point was run") and "--no-ready-check" not in error
    assert served == 0
    assert took < 60  # stopped at the first failure, not after the gate's 600 s


class PlainHttpAnswer(socketserver.BaseRequestHandler):
    """A plain-HTTP server's answer to bytes that are no HTTP request (a TLS ClientHello)."""

    def handle(self) -> None:
        self.request.recv(4096)
        self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


@pytest.mark.parametrize("option", [[], ["--insecure"]])
def test_https_to_a_plain_http_server_names_the_http_url(tmp_path: Path, option: list[str]) -> None:
    """A plain-HTTP server behind an `https://` URL is no certificate problem: --insecure does
    not mend it, the `http://` URL does."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), PlainHttpAnswer) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        result = load(f"https://127.0.0.1:{port}", tmp_path, "--ready-timeout-s", "30", *option)
        server.shutdown()
    assert result.exit_code == EXIT_NO_SUCCESS, result.output
    said = " ".join(result.output.split())
    error = said[said.index("error: ") :]
    assert f"does not speak TLS on that port: give --url http://127.0.0.1:{port}/" in error
    assert "--ca-file" not in error and "--insecure to skip" not in error


def test_http_to_a_tls_server_names_the_https_url_at_once(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    """An `http://` URL aimed at a TLS port: the server closes on the plain request, which
    alone reads as "Server disconnected" for the whole wait; the gate stops at the first one,
    naming the `https://` URL."""
    with serve_in_thread(answer, tls=server_tls(certificate)) as server:
        secure = server.url
        plain = secure.replace("https://", "http://", 1)
        result = load(plain, tmp_path, "--ready-timeout-s", "120")
        served = len(server.requests)
    assert result.exit_code == EXIT_NO_SUCCESS, result.output
    said = " ".join(result.output.split())
    error = said[said.index("error: ") :]
    assert error.startswith(f"error: {plain}/: the server speaks TLS on that port (the plain HTTP")
    assert error.endswith(f"give --url {secure}/; no grid point was run"), error
    assert "did not serve" not in error  # stopped at once, not at the gate's deadline
    assert served == 0


@pytest.mark.asyncio
async def test_the_model_wait_stops_at_once_as_the_gate_does(
    certificate: tuple[Path, Path],
) -> None:
    """The load step's `/v1/models` wait judges a failure as the gate does: an `http://` URL
    aimed at a TLS port stops at the first poll, naming the `https://` URL, and an `https://`
    URL aimed at a plain-HTTP port names the `http://` one, neither waiting out its 120 s."""
    with serve_in_thread(answer, tls=server_tls(certificate)) as server:
        secure = server.url
        plain = secure.replace("https://", "http://", 1)
        with pytest.raises(ModelNotListedError) as caught:
            await wait_for_model(f"{plain}/", "m", LoadConfig(), 120)
    said = str(caught.value)
    assert said.startswith(f"{plain}/: the server speaks TLS on that port"), said
    assert said.endswith(f"give --url {secure}/")
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), PlainHttpAnswer) as plain_server:
        threading.Thread(target=plain_server.serve_forever, daemon=True).start()
        port = plain_server.server_address[1]
        with pytest.raises(ModelNotListedError) as caught:
            await wait_for_model(f"https://127.0.0.1:{port}/", "m", LoadConfig(), 120)
        plain_server.shutdown()
    said = str(caught.value)
    assert f"does not speak TLS on that port: give --url http://127.0.0.1:{port}/" in said
    assert "within" not in said


class TlsAlertAnswer(socketserver.BaseRequestHandler):
    """A TLS server's answer to bytes it cannot read as a record: a fatal protocol_version
    alert record (RFC 8446 section 6: content type 21, version 0x0303, length 2, level 2,
    description 70)."""

    def handle(self) -> None:
        self.request.recv(4096)
        self.request.sendall(bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 70]))


@pytest.mark.asyncio
@pytest.mark.parametrize(("handler", "tls"), [(TlsAlertAnswer, True), (PlainHttpAnswer, False)])
async def test_speaks_tls_tells_an_alert_from_an_http_answer(
    handler: type[socketserver.BaseRequestHandler], tls: bool
) -> None:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        said = await speaks_tls(f"http://127.0.0.1:{port}/", 10.0)
        server.shutdown()
    assert said is tls


@pytest.mark.parametrize("option", ["--ca-file", "--insecure"])
def test_ca_file_or_insecure_reach_a_self_signed_server(
    tmp_path: Path, certificate: tuple[Path, Path], option: str
) -> None:
    extra = [option, str(certificate[0])] if option == "--ca-file" else [option]
    with serve_in_thread(answer, tls=server_tls(certificate)) as server:
        assert server.url.startswith("https://")
        result = load(server.url, tmp_path, "--requests-per-run", "4", *extra)
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path)
    assert (run["samples"], run["errors"]) == (4, 0)
    settings = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())["settings"]
    said = " ".join(result.output.split())
    if option == "--insecure":
        assert settings["insecure"] is True
        assert "warning: --insecure: the server's TLS certificate is not checked" in said
    else:
        assert settings["caFile"] == str(certificate[0])
        assert "insecure" not in settings and "--insecure" not in said


@pytest.mark.parametrize("option", ["--ca-file", "--insecure"])
def test_a_tls_option_on_a_plain_http_url_is_warned(
    tmp_path: Path, certificate: tuple[Path, Path], option: str
) -> None:
    """`--ca-file` / `--insecure` beside an `http://` URL check nothing: said, not silent."""
    extra = [option, str(certificate[0])] if option == "--ca-file" else [option]
    with serve_in_thread(answer) as server:
        url = server.url
        result = load(url, tmp_path, "--requests-per-run", "2", *extra)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"warning: {url} is plain HTTP: --ca-file and --insecure (caFile, insecure) " in said
    assert "apply to https:// URLs only; no TLS is used" in said
    assert "the server's TLS certificate is not checked" not in said


def test_a_ca_file_that_is_no_certificate_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    result = load("https://127.0.0.1:9", tmp_path / "out", "--ca-file", str(bad))
    assert result.exit_code == 2
    assert f"--ca-file {bad}:" in result.output


@pytest.mark.parametrize(
    ("file_keys", "options", "said"),
    [
        ({}, ["--ca-file", "CA", "--insecure"], "--ca-file and --insecure both set: --ca-file "),
        ({"caFile": "CA", "insecure": True}, [], "caFile and insecure both set in FILE: caFile "),
        ({"caFile": "CA"}, ["--insecure"], "caFile and --insecure both set (caFile in FILE): "),
        ({"insecure": True}, ["--ca-file", "CA"], "--ca-file and insecure both set (insecure in"),
    ],
)
def test_ca_file_and_insecure_together_are_refused_in_one_line_as_given(
    tmp_path: Path, file_keys: dict[str, Any], options: list[str], said: str
) -> None:
    """The options as typed, the keys of a load file as written, in one line with the fix."""
    ca = tmp_path / "ca.pem"
    config = tmp_path / "load.yaml"
    config.write_text(json.dumps({k: str(ca) if v == "CA" else v for k, v in file_keys.items()}))
    extra = [str(ca) if item == "CA" else item for item in options]
    result = load("https://127.0.0.1:9", tmp_path / "out", "--config", str(config), *extra)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: " + said.replace("FILE", str(config))), line
    assert line.endswith("checks nothing; drop one of them"), line


@pytest.mark.asyncio
async def test_a_kept_alive_connection_closed_while_the_client_was_busy_is_not_used() -> None:
    """The server closes each kept-alive connection idle 50 ms (a FIN, no `Connection:
    close`). The client's event loop is blocked meanwhile (a busy machine: it has not read the
    FIN when the next request starts), so the pool still counts the connection as open: the
    request goes out on a new connection instead, and every request succeeds, each read once."""
    with serve_in_thread(lambda body, n: normal_stream(["a"]), idle_close_s=0.05) as server:
        async with make_client(server.url, LoadConfig(), 1) as client:
            records = []
            for i in range(4):
                record = RequestRecord(index=i, prefix_id=0, intended_ns=time.monotonic_ns())
                await stream_request(client, PATH, BODY, record, 5.0)
                records.append(record)
                server.idle_closes.clear()
                assert server.idle_closes.wait(5)  # blocks this loop while the server closes
        closed, served = server.idle_closed, len(server.requests)
    assert [(r.error_kind, r.retried) for r in records] == [(None, False)] * 4
    assert all(r.connect_ns is not None for r in records)  # each on a connection of its own
    assert (closed, served) == (4, 4)
