"""`testbed load` (run a grid against an endpoint) and `testbed compare` (two results as A / B)."""

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

from loadgen.config import LoadConfig
from loadgen.report import comparison_table, load_points, seed_table
from loadgen.runner import run_grid


def _int_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}") from exc


def _validation_message(exc: ValidationError) -> str:
    lines = [f"invalid load config ({exc.error_count()} error(s)):"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(config)"
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)


def build_config(config_file: Path | None, overrides: dict[str, Any]) -> LoadConfig:
    """A `LoadConfig` from an optional YAML file (the stack's `load:` section, camelCase keys,
    or a whole stack config holding a `load:` key) with `overrides` (field names; None = unset)
    on top. Raises typer.BadParameter listing each invalid field path and its allowed values."""
    data: dict[str, Any] = {}
    if config_file is not None:
        loaded = yaml.safe_load(config_file.read_text()) or {}
        if not isinstance(loaded, dict):
            raise typer.BadParameter(f"{config_file} does not hold a mapping of load settings")
        data = dict(loaded.get("load", loaded))
    data |= {key: value for key, value in overrides.items() if value is not None}
    try:
        return LoadConfig.model_validate(data)
    except ValidationError as exc:
        raise typer.BadParameter(_validation_message(exc)) from exc


def load_command(
    url: Annotated[str, typer.Option(help="Base URL of the OpenAI-compatible server.")],
    model: Annotated[str, typer.Option(help="Model name sent in each request.")],
    out: Annotated[Path, typer.Option(help="Result folder (summary.json, requests.parquet, ...).")],
    config: Annotated[Path | None, typer.Option(help="YAML with the load settings.")] = None,
    prefix_kinds: Annotated[str | None, typer.Option(help="e.g. 2,7,12,24")] = None,
    concurrency: Annotated[str | None, typer.Option(help="e.g. 4,8")] = None,
    repetitions: Annotated[int | None, typer.Option()] = None,
    requests_per_run: Annotated[int | None, typer.Option()] = None,
    duration_s: Annotated[float | None, typer.Option(help="Optional run length (s).")] = None,
    warmup_requests: Annotated[int | None, typer.Option()] = None,
    prompt_tokens: Annotated[int | None, typer.Option()] = None,
    prefix_share: Annotated[float | None, typer.Option(help="Shared fraction, 0..1.")] = None,
    max_tokens: Annotated[int | None, typer.Option()] = None,
    api: Annotated[str | None, typer.Option(help="chat or completions.")] = None,
    arrival: Annotated[str | None, typer.Option(help="closed or poisson.")] = None,
    request_rate: Annotated[float | None, typer.Option(help="Requests/s (poisson).")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    read_timeout_s: Annotated[float | None, typer.Option()] = None,
    request_timeout_s: Annotated[float | None, typer.Option()] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="tokenizer.json, its folder, or a cached hub id.")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run the prefix-kinds x concurrency x repetitions grid and print the seed-style table."""
    load_config = build_config(
        config,
        {
            "prefix_kinds": _int_list(prefix_kinds),
            "concurrency": _int_list(concurrency),
            "repetitions": repetitions,
            "requests_per_run": requests_per_run,
            "duration_s": duration_s,
            "warmup_requests": warmup_requests,
            "prompt_tokens": prompt_tokens,
            "prefix_share": prefix_share,
            "max_tokens": max_tokens,
            "api": api,
            "arrival": arrival,
            "request_rate": request_rate,
            "seed": seed,
            "read_timeout_s": read_timeout_s,
            "request_timeout_s": request_timeout_s,
        },
    )
    result = run_grid(url, model, load_config, out, tokenizer=tokenizer, progress=progress)
    console = Console()
    console.print(seed_table(result.points, title=f"{model} at {url}"))
    console.print(f"prompt sizes: {result.token_count_source}; results in {out}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    for sample in result.first_errors[:3]:
        console.print(f"[red]error[/] {sample.kind}: {sample.message}")


def compare_command(
    a: Annotated[Path, typer.Argument(help="Result folder A.")],
    b: Annotated[Path, typer.Argument(help="Result folder B.")],
) -> None:
    """Print two `testbed load` results side by side, each cell "A / B" as in the seed."""
    Console().print(comparison_table(load_points(a), load_points(b), title=f"{a} / {b}"))
