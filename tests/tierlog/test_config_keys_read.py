"""Every declared config key is read somewhere in the product, or declared inert.

A key that nothing reads but that the docs describe as working is a lie to the operator:
this test fails for any key of the broker, topic or RemoteLogManager tables that is neither
read by the product code nor declared ``inert=True`` (rendered "accepted, no effect" in
docs/CONFIGURATION.md). The compatibility keys (ZooKeeper's and the like) are inert.

How "read" is decided, statically, over the Python source of the product packages (core,
tiered, rlmm, rsm_plugins, spark_jobs, tierlog; not tests, not bench), with ``ast`` so that
comments and docstrings never count. A key is read when the source has:

1. its name as a string literal, as in ``config.get("group.max.size")``,
   ``values["log.retention.hours"]`` or ``props.get(...)``, except where the literal
   declares or writes a key rather than reading it:
   - any argument of a ``ConfigKey(...)`` call (the declaration tables themselves,
     including a topic key's broker-default name);
   - a key of a dict literal or an assignment target (``{"compression.type": "producer"}``
     sets a topic config, it does not act on one);
   - ``num_io_threads=values["num.io.threads"]``: a keyword argument copying the value into
     a field of the same name (``BrokerConfig.from_props`` filling its typed fields), which
     reads nothing by itself; the field's own uses count, by rule 2;
2. its field name (dots as underscores) as an attribute, ``config.socket_send_buffer_bytes``
   or ``log_config.segment_ms``, or as a ``getattr`` string: ``LogConfig`` and
   ``RemoteLogManagerConfig`` are built from their tables field by field, so their keys are
   read through these attributes;
3. for a broker key holding a topic key's default (``log.segment.bytes`` for
   ``segment.bytes``): its topic key is read (``BrokerConfig.log_config_defaults`` carries
   every such key into the topics' ``LogConfig``).

Rule 2 can be fooled by an unrelated attribute of the same name (``TopicInfo.num_partitions``
would vouch for ``num.partitions``); it errs towards passing, never towards a false failure,
and the scanner's own test below shows it does find unread keys.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.config import ConfigKey
from core.log.config import TOPIC_CONFIG
from core.server.config import BROKER_CONFIG, COMPATIBILITY_KEYS
from tiered.rlm_config import RLM_CONFIG

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("core", "tiered", "rlmm", "rsm_plugins", "spark_jobs", "tierlog")


def _declarations(tree: ast.AST) -> set[int]:
    """ids of the string literals that declare or write keys (see rule 1)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigKey":
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                skip.update(id(n) for n in ast.walk(arg))
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                value = keyword.value
                if (
                    isinstance(value, ast.Subscript)
                    and isinstance(value.slice, ast.Constant)
                    and isinstance(value.slice.value, str)
                    and keyword.arg == value.slice.value.replace(".", "_")
                ):
                    skip.add(id(value.slice))
        elif isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            skip.add(id(node.slice))
    return skip


def read_names(sources: Iterable[str], names: set[str]) -> set[str]:
    """The names among ``names`` that ``sources`` read, by rules 1 and 2."""
    fields = {name.replace(".", "_"): name for name in names}
    found: set[str] = set()
    for source in sources:
        tree = ast.parse(source)
        skip = _declarations(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in names and id(node) not in skip:
                    found.add(node.value)
                elif node.value in fields:
                    found.add(fields[node.value])
            elif isinstance(node, ast.Attribute) and node.attr in fields:
                found.add(fields[node.attr])
    return found


def product_sources() -> Iterator[str]:
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            yield path.read_text()


def declared() -> list[ConfigKey]:
    return [*BROKER_CONFIG, *TOPIC_CONFIG, *RLM_CONFIG]


def test_every_declared_key_is_read_or_declared_inert():
    keys = declared()
    read = read_names(product_sources(), {k.name for k in keys})
    # Rule 3: a topic key that is read reads its broker-wide default key too.
    read |= {k.server_default_property for k in TOPIC_CONFIG if k.name in read}
    unread = sorted(k.name for k in keys if not k.inert and k.name not in read)
    assert not unread, (
        "declared keys nothing reads: make them work, or declare them inert=True with a doc "
        f"saying what Kafka does with them: {unread}"
    )


def test_compatibility_keys_are_inert():
    assert all(BROKER_CONFIG[name].inert for name in COMPATIBILITY_KEYS)


def test_the_scanner_tells_reads_from_declarations_and_writes():
    names = {"a.read.key", "a.field.key", "a.declared.key", "a.written.key", "a.copied.key"}
    source = """
ConfigKey("a.declared.key", I, 1, "doc")
topic_configs = {"a.written.key": "x"}
props["a.written.key"] = "y"
config = Config(a_copied_key=values["a.copied.key"])
limit = config.get("a.read.key") + config.a_field_key
"""
    assert read_names([source], names) == {"a.read.key", "a.field.key"}
    assert read_names([source + "use(config.a_copied_key)\n"], names) >= {"a.copied.key"}
