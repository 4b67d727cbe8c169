"""The topics only brokers may write or trim, and who counts as a broker.

``__consumer_offsets``, ``__transaction_state`` and ``__remote_log_metadata`` are the broker's
own records: committed offsets, transaction states, and the only record of where remote
data is. The broker writes them in process (the group coordinator, the remote tier's
metadata manager), never through a Produce request. A client that could produce to them
could forge a group's offsets or make the broker delete remote segments; a client that
could trim them (DeleteRecords, a short ``retention.ms``) could erase them. So, whatever
``authorizer.class.name`` says, only a request that acts as a broker may:

- produce to them (others get TOPIC_AUTHORIZATION_FAILED),
- delete their records (DeleteRecords; others get POLICY_VIOLATION),
- create them or alter their configs (CreateTopics, IncrementalAlterConfigs; others get
  POLICY_VIOLATION).

Nobody deletes them (DeleteTopics answers INVALID_TOPIC_EXCEPTION) or adds partitions to
them (CreatePartitions answers POLICY_VIOLATION: each one's count is a broker key). Reading
them stays open, as in Kafka (``tierlog metadata`` and ``tierlog groups`` read them). Apache Kafka
lets ACLs alone decide this for ``__remote_log_metadata`` (its metadata manager writes it
with an ordinary producer), and refuses client produce to the other two with
INVALID_TOPIC_EXCEPTION; tierlog refuses more, on purpose.

Who acts as a broker (``BrokerTrust``):

1. a principal listed in ``super.users`` (Kafka's way to give brokers and operators every
   right), with or without an authorizer;
2. a connection on the inter-broker listener, only when that listener is *dedicated* and
   *authenticates its peers*: ``inter.broker.listener.name`` (or
   ``security.inter.broker.protocol``) was set explicitly, another broker listener exists
   for clients, and the listener is SASL_PLAINTEXT, SASL_SSL, or SSL with
   ``ssl.client.auth=required``.

In a cluster (``zookeeper.connect``) other brokers do send such requests: the controller's
LeaderAndIsr, UpdateMetadata and StopReplica, replica fetches, and other brokers' remote
tiers appending to ``__remote_log_metadata``. They come over the inter-broker listener, so
there rule 2 becomes: any connection on the inter-broker listener when it is dedicated
(another broker listener exists for clients), authenticated or not; and, when it is the
listener clients use too and it does not authenticate (the simplest cluster: one PLAINTEXT
listener), any connection on it, since brokers cannot be told from clients there, as in
Apache Kafka without an authorizer. Both unauthenticated cases are logged as a WARNING at
start-up (``cluster_warning``): protect that listener at the network level, or use SASL or
TLS client certificates. A shared listener that authenticates admits only ``super.users``,
where the brokers' principal must then be listed.

Why not simply "whatever comes over the inter-broker listener" for a broker running alone,
as Kafka's inter-broker principal is: by default the only listener (PLAINTEXT) is also the
inter-broker listener, so every client would count as a broker; a PLAINTEXT listener proves
nothing about who is calling; and the default inter-broker listener (named after
``security.inter.broker.protocol``, PLAINTEXT) is the one clients use in most setups. Rule 2
holds the operator to one promise, stated in docs/CONFIGURATION.md: the accounts or
certificates that listener accepts are the brokers' own (``listener.name.<l>.*`` settings);
where that cannot be promised, list the brokers' principal in ``super.users`` instead.
SCRAM users created at run time (AlterUserScramCredentials) are therefore not accepted on
that listener (``core.server.broker.listeners_security``). This is the seam replication
uses to let other brokers' produce requests and replica fetchers in.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import CoreError
from core.server.offsets_topic import OFFSETS_TOPIC
from core.server.protocol import RequestContext
from core.server.security import ANONYMOUS, ListenerSecurity

if TYPE_CHECKING:
    from core.server.config import BrokerConfig

TRANSACTION_STATE_TOPIC = "__transaction_state"
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
PROTECTED_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, REMOTE_LOG_METADATA_TOPIC})
_INTER_BROKER_KEYS = ("inter.broker.listener.name", "security.inter.broker.protocol")


class PolicyViolationError(CoreError):
    """POLICY_VIOLATION: a change to a protected topic by a request that is not a broker's."""

    error_code = 44


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: ``;``-separated principals (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


@dataclass(frozen=True, slots=True)
class BrokerTrust:
    """Decides whether a request acts as a broker (see the module docstring).

    Attributes:
        super_users: the principals of ``super.users``.
        broker_listener: the inter-broker listener when rule 2 admits its connections,
            else None.
    """

    super_users: frozenset[str] = frozenset()
    broker_listener: str | None = None
    # In a cluster: connections on broker_listener count even without authentication.
    anonymous_brokers: bool = False
    cluster_warning: str | None = None

    @classmethod
    def from_config(
        cls,
        config: BrokerConfig,
        security: Mapping[str, ListenerSecurity] | None = None,
        *,
        cluster: bool = False,
    ) -> BrokerTrust:
        """The trust a broker with ``config`` gives; ``security`` is what each listener
        requires (without it, only ``super.users`` count); ``cluster``: the broker runs in
        a cluster (the rules of the module docstring)."""
        super_users = parse_super_users(config.get("super.users"))
        name = config.inter_broker_listener_name
        others = [lst for lst in config.broker_listeners if lst.name != name]
        listener = security.get(name) if security is not None else None
        if cluster and listener is not None:
            authenticates = _authenticates(listener)
            if others:
                warning = None if authenticates else (
                    f"the dedicated inter-broker listener {name} does not authenticate its "
                    "peers: anyone who can reach it can act as a broker (protect it at the "
                    "network level, or use SASL or TLS client certificates)"
                )  # fmt: skip
                return cls(super_users, name, not authenticates, warning)
            if not authenticates:
                warning = (
                    f"the inter-broker listener {name} is also the clients' listener and does "
                    "not authenticate: inter-broker requests cannot be told from clients' and "
                    "are accepted from anyone who can reach it, as in Apache Kafka without an "
                    "authorizer (use a dedicated, authenticating inter-broker listener)"
                )
                return cls(super_users, name, True, warning)
            return cls(super_users, None)
        explicit = any(k in config.originals for k in _INTER_BROKER_KEYS)
        trusted = explicit and bool(others) and listener is not None and _authenticates(listener)
        return cls(super_users, name if trusted else None)

    @property
    def super_user_warning(self) -> str | None:
        """What start-up warns about ``super.users``: ``User:ANONYMOUS`` there makes every
        unauthenticated client a super user (allowed everything, the internal topics
        included). Kafka accepts it silently; it is almost always a test set-up left on."""
        if ANONYMOUS not in self.super_users:
            return None
        return (
            f"super.users names {ANONYMOUS}: every client of a listener that does "
            "not authenticate (PLAINTEXT, SSL without client certificates) is a super user, "
            "allowed everything, including writes to the internal topics"
        )

    def admits(self, ctx: RequestContext) -> bool:
        """Whether the request's principal or connection acts as a broker."""
        if ctx.principal in self.super_users:
            return True
        return (
            self.broker_listener is not None
            and ctx.listener == self.broker_listener
            and (self.anonymous_brokers or ctx.principal != ANONYMOUS)
        )


def _authenticates(listener: ListenerSecurity) -> bool:
    """SASL, or TLS that demands a client certificate: the peer proved who it is."""
    if listener.sasl is not None:
        return True
    context = listener.ssl_context
    return context is not None and context.verify_mode == ssl.CERT_REQUIRED


def refused_for(trust: BrokerTrust, ctx: RequestContext, topic: str) -> bool:
    """True when ``topic`` is protected and the request does not act as a broker."""
    return topic in PROTECTED_TOPICS and not trust.admits(ctx)


def protected_message(topic: str, what: str) -> str:
    return (
        f"only brokers and super.users may {what} the internal topic {topic} "
        "(see docs/CONFIGURATION.md, Internal topics)"
    )


__all__ = [
    "PROTECTED_TOPICS",
    "REMOTE_LOG_METADATA_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "BrokerTrust",
    "PolicyViolationError",
    "parse_super_users",
    "protected_message",
    "refused_for",
]
