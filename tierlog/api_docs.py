"""The table of served APIs in README.md, generated from what ApiVersions advertises.

The table sits between ``<!-- BEGIN api-versions -->`` and ``<!-- END api-versions -->``;
``python -m tierlog.api_docs`` rewrites it, and a test fails when it is stale, so the README
cannot drift from ``core.server.handlers.ADVERTISED_VERSIONS``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "api-versions"


def api_name(enum_name: str) -> str:
    """Kafka's name of an api from its ``ApiKey`` member: LIST_OFFSETS -> ListOffsets."""
    return "".join(word.capitalize() for word in enum_name.split("_"))


def table() -> str:
    from core.server.handlers import ADVERTISED_VERSIONS

    rows = ["| API | key | versions |", "| --- | --- | --- |"]
    for api, (low, high) in ADVERTISED_VERSIONS.items():
        versions = f"{low}" if low == high else f"{low}-{high}"
        rows.append(f"| {api_name(api.name)} | {int(api)} | {versions} |")
    return "\n".join(rows)


def render(text: str) -> str:
    """``text`` with its api-versions section replaced by the current table.

    Raises:
        ValueError: ``text`` has no such section.
    """
    pattern = re.compile(rf"(<!-- BEGIN {SECTION} -->\n).*?(<!-- END {SECTION} -->)", re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{README.name} has no <!-- BEGIN {SECTION} --> section")
    body = table()
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> int:
    current = README.read_text()
    updated = render(current)
    if updated != current:
        README.write_text(updated)
        print(f"updated {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
