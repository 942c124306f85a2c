"""How much of a load pod's log its records take, and whether a grid fits (checked at preview,
so light: pydantic only).

A client writes one ``record`` line per request (:mod:`incluster.wire`); the API serves only
the latest file of a container's log, rotated at the kubelet's ``containerLogMaxSize``
(Kubernetes docs, "Logging Architecture", "Log rotation": "Only the contents of the latest log
file are available through kubectl logs").
"""

from workload.config import LoadConfig

LOG_FILE_BYTES = 10 * 1024 * 1024
"""The kubelet's ``containerLogMaxSize`` default, 10 MiB (Kubernetes 1.34
``pkg/kubelet/apis/config/v1beta1/defaults.go``, ``SetDefaults_KubeletConfiguration``): the
most of a pod's log the API serves."""

RECORD_SHARE = 0.8
"""Of :data:`LOG_FILE_BYTES`, what a client's request records may take; the rest is for the
other lines, mostly the loop-lag samples (one per 5 ms of measured loop, ~6 B each: about
1.2 kB a second, so ~29 minutes of runs per client)."""

RECORD_LINE_BYTES = 779
FIRST_TOKEN_BYTES = 18
"""A ``record`` line (:func:`incluster.wire.record_line`) without tokens is at most
``RECORD_LINE_BYTES``: every time a 17-digit nanosecond count (``CLOCK_MONOTONIC`` counts from
boot: a node up for less than three years), counts and indexes at 6 digits, a successful request
(its error fields, like every field that is None or False, are left out of the line), not
redirected (a redirected request adds the length of the URL it went to), and the Dynamo
frontend's per-request fields at their longest (a chat completion id, two 20-digit worker ids,
times to 3 decimals of a millisecond). The first token adds its 17-digit time and its
``chunk_tokens`` entry; each further one a gap of at most ``readTimeoutS`` in ns, a comma and a
``chunk_tokens`` entry with its comma. Measured by serializing such a record
(tests/incluster/test_incluster_manifests.py)."""


def record_line_bytes(tokens: int, read_timeout_s: float) -> int:
    """Log bytes of one request's ``record`` line with ``tokens`` output tokens, at most, when
    no gap between two chunks exceeds ``read_timeout_s`` (aiohttp's read timeout ends the
    request before that: :func:`loadgen.loops.make_client`)."""
    if tokens == 0:
        return RECORD_LINE_BYTES
    gap = len(str(int(read_timeout_s * 1e9))) + 3
    return RECORD_LINE_BYTES + FIRST_TOKEN_BYTES + (tokens - 1) * gap


_RECORD_BYTES = int(LOG_FILE_BYTES * RECORD_SHARE)
"""What of a load client's log its request records may take (bytes)."""


def _runs(config: LoadConfig) -> int:
    """The runs of ``config``'s grid (each client takes part in every one)."""
    return len(config.prefix_kinds) * len(config.concurrency) * config.repetitions


def _per_request(config: LoadConfig) -> int:
    """Bytes of one request's record line at most, under ``config``."""
    return record_line_bytes(config.max_tokens, config.read_timeout_s)


def _per_run(config: LoadConfig) -> int:
    """Requests of one run a client's log holds, at most, over ``config``'s grid."""
    return _RECORD_BYTES // (_runs(config) * _per_request(config))


def log_budget_problem(config: LoadConfig, clients: int) -> str | None:
    """Why a client's log would outgrow :data:`LOG_FILE_BYTES` (its records' worst case, at
    :data:`RECORD_SHARE`), naming the fix; None when it fits."""
    per_request, budget = _per_request(config), _RECORD_BYTES
    per_client = _runs(config) * -(-config.requests_per_run // clients)
    if per_client * per_request <= budget:
        return None
    per_run = _per_run(config)
    # A client needs a stream of every run: at most the smallest concurrency
    # (LoadSettings' clients check), so more clients than that is no fix to offer.
    most_clients = min(config.concurrency)
    needed = -(-config.requests_per_run // per_run) if per_run else None
    fixes = []
    if needed is not None and needed <= most_clients:
        fixes.append(f"set load.clients to {needed} or more (at most {most_clients})")
    if per_run:
        fixes.append(f"lower load.requestsPerRun to {per_run * min(clients, most_clients)} or less")
    fixes.append("lower load.repetitions or load.maxTokens")
    return (
        f"the grid's request records take up to {per_client * per_request / 2**20:.1f} MiB in "
        f"each load client's log ({per_client} requests of up to {config.max_tokens} tokens), "
        f"more than the {budget / 2**20:.0f} MiB of its log the cluster keeps: "
        + ", or ".join(fixes)
    )


def logged_load(config: LoadConfig, clients: int) -> tuple[LoadConfig, dict[str, int | str]]:
    """(the grid, the stack ``load`` keys beside it) whose in-cluster clients' logs hold its
    records (:func:`log_budget_problem`), from ``clients`` clients up: ``config`` and {} when
    ``clients`` hold it; else ``config`` and the fewest clients that do (``{"clients": n}``);
    where even the most cannot (the grid's smallest concurrency: a client needs a stream of
    every run), those clients and ``config`` with ``requestsPerRun`` lowered to the most their
    logs hold; where not one request of a stream a run fits, ``config`` run on the machine
    running Pulumi (``{"runner": "local"}``: its records go to a file, no pod log)."""
    most = min(config.concurrency)
    for n in range(clients, most + 1):
        if log_budget_problem(config, n) is None:
            return config, ({} if n == clients else {"clients": n})
    per_run = _per_run(config)
    if per_run == 0:
        return config, {"runner": "local"} | ({} if clients == 1 else {"clients": 1})
    fewer = config.model_copy(update={"requests_per_run": per_run * most})
    return fewer, ({} if most == clients else {"clients": most})
