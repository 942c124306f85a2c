"""``python -m kvpath.probe``: the probe's roles (arguments in :mod:`kvpath.probe`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvpath.probe.gpu_part import run_copies
from kvpath.probe.nixl_part import run_initiator, run_target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kvpath.probe", description=__doc__)
    parser.add_argument("--role", choices=["target", "initiator", "copies"], required=True)
    parser.add_argument("--port", type=int, default=0, help="target: TCP port (0: any free)")
    parser.add_argument("--bind", default="0.0.0.0", help="target: address to listen on")
    parser.add_argument("--peer", help="initiator: the target's HOST:PORT")
    parser.add_argument("--blocks", type=int, required=True, help="KV blocks per transfer")
    parser.add_argument("--layers", type=int, required=True, help="layers per block")
    parser.add_argument("--block-bytes", type=int, required=True, help="bytes per block, layer")
    parser.add_argument("--max-in-flight", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-workers", type=int, default=4, help="copies: processes at most")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--out", type=Path, help="initiator, copies: the JSON file to write")
    args = parser.parse_args(argv)
    shape = {"blocks": args.blocks, "layers": args.layers, "block_bytes": args.block_bytes}
    try:
        if args.role == "target":
            run_target(
                port=args.port,
                **shape,
                max_in_flight=args.max_in_flight,
                bind=args.bind,
                timeout_s=args.timeout_s,
            )
            return
        if args.out is None:
            parser.error(f"--role {args.role} needs --out")
        if args.role == "initiator":
            if not args.peer:
                parser.error("--role initiator needs --peer HOST:PORT")
            figures = run_initiator(
                peer=args.peer,
                **shape,
                max_in_flight=args.max_in_flight,
                repeats=args.repeats,
            )
        else:
            figures = run_copies(
                **shape,
                max_workers=args.max_workers,
            )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    except (OSError, RuntimeError, ImportError, ConnectionError) as exc:
        print(f"kvpath.probe --role {args.role}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
