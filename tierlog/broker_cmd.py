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
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.cli import EXIT_OK, CommandError, Subparsers

if TYPE_CHECKING:
    from core.server.config import BrokerConfig

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
    from tierlog.allocator import pad_heap_top
    from tierlog.assembly import build_broker

    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    pad_heap_top()
    overrides = parse_overrides(args.set)
    try:
        config = load_broker_config(args.config, overrides)
    except (CoreError, OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    if args.config is not None:
        warn_if_secrets_are_world_readable(args.config)
    log_inert_keys(config)
    from tierlog.remote_tier import RemoteTierStartError

    try:
        return asyncio.run(_serve(config, build_broker))
    except (CoreError, RemoteTierStartError) as e:
        raise CommandError(str(e)) from e


def log_inert_keys(config: BrokerConfig) -> None:
    """One line naming the keys the config sets that tierlog accepts but does not act on
    (declared inert: Kafka's replication, transaction, thread and ZooKeeper keys...)."""
    inert = config.inert_keys_given()
    if inert:
        log.info("accepted with no effect in tierlog: %s", ", ".join(inert))


# Keys whose values are secrets: the broker's password keys, and plugin settings that
# carry credentials (the RSM's S3 keys, for one).
_SECRET_WORDS = ("password", "secret", "jaas.config", "ssl.keystore.key", "credentials")


def secret_keys(keys: Iterable[str]) -> list[str]:
    """The keys among ``keys`` that hold secrets (by declaration or by name)."""
    from core.config import ConfigType
    from core.server.config import BROKER_CONFIG

    out = []
    for key in keys:
        declared = BROKER_CONFIG[key] if key in BROKER_CONFIG else None  # noqa: SIM401
        if (declared is not None and declared.type is ConfigType.PASSWORD) or any(
            word in key.lower() for word in _SECRET_WORDS
        ):
            out.append(key)
    return sorted(out)


def warn_if_secrets_are_world_readable(path: Path) -> bool:
    """Log a warning (naming the keys, never their values) when ``path`` holds secrets and
    any user may read it. Returns True when it warned."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if not mode & stat.S_IROTH:
        return False
    from core.properties import read_properties

    in_file = secret_keys(read_properties(path))
    if not in_file:
        return False
    log.warning(
        "%s is readable by every user (mode %o) and holds secrets: %s; restrict it, e.g. chmod 600",
        path,
        stat.S_IMODE(mode),
        ", ".join(in_file),
    )
    return True


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
