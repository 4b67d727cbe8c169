"""``tierlog broker start``: run a broker in the foreground.

Logs go to stderr. Once every listener is bound, one line goes to stdout::

    tierlog broker 1 listening on PLAINTEXT://127.0.0.1:9092

(with the real port when the config says port 0), which scripts and tests wait for.
SIGTERM and SIGINT stop it cleanly: listeners close, logs are flushed, producer state is
snapshotted and the clean-shutdown marker is written, so the next start skips recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from tierlog.cli import EXIT_OK, CommandError, Subparsers

log = logging.getLogger("tierlog.broker")


def register(subparsers: Subparsers) -> None:
    broker = subparsers.add_parser("broker", help="run a tierlog broker")
    actions = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser(
        "start",
        help="start a broker in the foreground",
        description="Start a broker in the foreground; SIGTERM or SIGINT stops it cleanly.",
    )
    start.add_argument("--config", type=Path, help="a Java-properties file (server.properties)")
    start.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key (repeatable)",
    )
    start.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    start.set_defaults(handler=run_start)


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--set expects KEY=VALUE, got {pair!r}", exit_code=2)
        out[key.strip()] = value.strip()
    return out


def run_start(args: argparse.Namespace) -> int:
    from core.errors import CoreError
    from core.server.config import load_broker_config
    from tierlog.assembly import build_broker

    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    overrides = parse_overrides(args.set)
    try:
        config = load_broker_config(args.config, overrides)
    except (CoreError, OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    from tierlog.remote_tier import RemoteTierStartError

    try:
        return asyncio.run(_serve(config, build_broker))
    except (CoreError, RemoteTierStartError) as e:
        raise CommandError(str(e)) from e


async def _serve(config, build_broker) -> int:
    broker = build_broker(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        bound = await broker.start()
    except BaseException:
        await broker.stop()
        raise
    endpoints = ",".join(f"{b.name}://{b.host}:{b.port}" for b in bound)
    print(f"tierlog broker {config.node_id} listening on {endpoints}", flush=True)
    await stop.wait()
    log.info("stopping")
    await broker.stop()
    log.info("stopped cleanly")
    return EXIT_OK
