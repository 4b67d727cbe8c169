"""The configuration tables of docs/CONFIGURATION.md, generated from the key declarations.

Every key is declared once (core's broker and topic ``ConfigDef``, the RemoteLogManager's,
each RSM plugin's ``CONFIG_KEYS``); the documentation is rendered from those declarations
between ``<!-- BEGIN name -->`` / ``<!-- END name -->`` markers, so it cannot drift from the
code: ``python -m tierlog.config_docs`` rewrites the file, and a test fails when it is stale.
A key declared ``inert`` (accepted, validated, not acted on) is shown "accepted, no effect".
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

from core.config import ConfigKey, format_value

DOC = Path(__file__).resolve().parents[1] / "docs" / "CONFIGURATION.md"
INERT = "**accepted, no effect**"


def meaning(key: ConfigKey) -> str:
    return f"{INERT}: {key.doc}" if key.inert else key.doc


def table(keys: Iterable[ConfigKey]) -> str:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key in keys:
        default = "" if key.default is None else format_value(key, key.default)
        shown = f"`{default}`" if default else ""
        rows.append(f"| `{key.name}` | {key.type.value} | {shown} | {meaning(key)} |")
    return "\n".join(rows)


def alias_table() -> str:
    from tiered.rlm_config import DEPRECATED_ALIASES

    rows = ["| deprecated key | read as | why |", "| --- | --- | --- |"]
    for alias in DEPRECATED_ALIASES:
        rows.append(f"| `{alias.old}` | `{alias.new}` | {alias.why} |")
    return "\n".join(rows)


def topic_table() -> str:
    from core.log.config import TOPIC_CONFIG

    rows = [
        "| key | type | default | broker default key | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in TOPIC_CONFIG:
        default = "" if key.default is None else f"`{format_value(key, key.default)}`"
        broker = f"`{key.server_default_property}`" if key.server_default_property else ""
        rows.append(f"| `{key.name}` | {key.type.value} | {default} | {broker} | {meaning(key)} |")
    return "\n".join(rows)


def sections() -> dict[str, str]:
    """Rendered tables by marker name."""
    from core.server.config import BROKER_CONFIG
    from rsm_plugins.base import COMMON_KEYS
    from rsm_plugins.fsspec import FsspecRemoteStorageManager
    from rsm_plugins.local import LocalDirRemoteStorageManager
    from rsm_plugins.s3 import S3RemoteStorageManager
    from tiered.rlm_config import RLM_CONFIG

    return {
        "topic": topic_table(),
        "broker": table(BROKER_CONFIG),
        "remote-log-manager": table(RLM_CONFIG),
        "remote-log-manager-deprecated": alias_table(),
        "rsm-common": table(COMMON_KEYS),
        "rsm-local": table(LocalDirRemoteStorageManager.CONFIG_KEYS),
        "rsm-s3": table(S3RemoteStorageManager.CONFIG_KEYS),
        "rsm-fsspec": table(FsspecRemoteStorageManager.CONFIG_KEYS),
    }


def render(text: str) -> str:
    """``text`` with every marked section replaced by its current table.

    Raises:
        ValueError: a section has no markers in ``text``.
    """
    for name, body in sections().items():
        pattern = re.compile(
            rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)",
            re.DOTALL,
        )
        if not pattern.search(text):
            raise ValueError(f"{DOC.name} has no <!-- BEGIN {name} --> section")
        text = pattern.sub(lambda m, b=body: m.group(1) + b + "\n" + m.group(2), text)
    return text


def main() -> int:
    current = DOC.read_text()
    updated = render(current)
    if updated != current:
        DOC.write_text(updated)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
