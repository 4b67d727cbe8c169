"""The broker's configuration: Kafka's key names, defaults and validation rules.

Every key is declared once in ``BROKER_CONFIG`` (name, type, default, validator, doc). The
keys fall in four groups:

- broker keys tierlog uses (``listeners``, ``log.dirs``, ``num.partitions``, ...);
- the broker-wide defaults of topic configs, generated from ``TOPIC_CONFIG``'s
  ``server_default_property`` (``log.segment.bytes`` for ``segment.bytes``, ...), plus
  Kafka's unit aliases with Kafka's precedence::

      segment.ms         log.roll.ms        > log.roll.hours (168)
      segment.jitter.ms  log.roll.jitter.ms > log.roll.jitter.hours (0)
      retention.ms       log.retention.ms   > log.retention.minutes > log.retention.hours (168)
                         (a negative result means unlimited, -1)
      flush.ms           log.flush.interval.ms > log.flush.scheduler.interval.ms

- keys tierlog accepts and validates but does not act on, declared ``inert=True``: those of
  the parts to come (replica fetching, KRaft's controller keys) and those a
  single asyncio broker has no use for (``num.io.threads``). Each one's doc says what Kafka
  does with it; the generated docs mark it "accepted, no effect", and ``broker start``
  names the inert keys a config sets (``BrokerConfig.inert_keys_given``);
- ``COMPATIBILITY_KEYS``: keys found in Kafka's sample ``server.properties`` files that
  tierlog has no use for (ZooKeeper, share groups, ...), inert too, accepted with any value
  so that a copied file starts; any other unknown key fails start-up with
  ``Unknown configuration <key>``.

``BrokerConfig.from_props`` parses, resolves the aliases (``broker.id`` for ``node.id``,
``log.dir`` for ``log.dirs``) and checks the cross-key rules (listeners, inter-broker
listener, the derived log config). Every failure is an ``InvalidConfigError`` whose message
names the key. tierlog runs no KRaft quorum: ``process.roles``, ``controller.*`` are
validated in form but do not require a controller to exist.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from core.config import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigKey,
    ConfigType,
    at_least,
    between,
    format_value,
    one_of,
)
from core.errors import InvalidConfigError
from core.log.cleaner import CleanerConfig
from core.log.config import TOPIC_CONFIG, LogConfig
from core.log.log_manager import LogManagerConfig
from core.properties import read_properties

log = logging.getLogger(__name__)

HOUR_MS = 60 * 60 * 1000
MINUTE_MS = 60 * 1000
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"

I = ConfigType.INT  # noqa: E741 - one-letter aliases keep the tables readable
L = ConfigType.LONG
B = ConfigType.BOOLEAN
S = ConfigType.STRING
LS = ConfigType.LIST
P = ConfigType.PASSWORD
SHORT_MAX = (1 << 15) - 1


def _unsupported_if_true(name: str, value: Any) -> None:
    """A Kafka feature tierlog does not implement: accepted off, refused on."""
    if value:
        raise InvalidConfigError(f"{name}=true is not supported by tierlog")


# The table is laid out by hand, one key per entry (ruff format would spread each key over
# seven lines).
# fmt: off
_BROKER_KEYS = [
    # -- identity and roles ---------------------------------------------------------------
    ConfigKey("node.id", I, 1, "This node's id. Kafka requires it; tierlog defaults to 1.",
              between(0, INT32_MAX)),
    ConfigKey("broker.id", I, None, "Old name of node.id; if both are set they must be equal.",
              between(0, INT32_MAX)),
    ConfigKey("process.roles", LS, ["broker"],
              "broker and/or controller; must contain broker (tierlog runs no KRaft quorum).",
              one_of("broker", "controller")),
    ConfigKey("broker.rack", S, None, "The rack of this broker, reported in Metadata."),
    # -- ZooKeeper (cluster mode: core/server/cluster_mode.py) ------------------------------
    ConfigKey("zookeeper.connect", S, None,
              "host:port[,host:port...][/chroot] of the ZooKeeper ensemble. Set, the broker "
              "joins the cluster of the brokers sharing it (the chroot is created if "
              "missing); unset, it runs alone, keeping its metadata in its first log dir."),
    ConfigKey("zookeeper.session.timeout.ms", I, 18000,
              "The ZooKeeper session timeout: a broker silent for this long loses its "
              "registration (it stops leading, and the controller elects other leaders).",
              at_least(1)),
    ConfigKey("zookeeper.connection.timeout.ms", I, None,
              "How long start-up waits for a ZooKeeper session (default "
              "zookeeper.session.timeout.ms).", at_least(1)),
    ConfigKey("zookeeper.max.in.flight.requests", I, 10,
              "ZooKeeper requests a broker has in flight at once.", at_least(1)),
    # Only false is accepted, which changes nothing: hence inert.
    ConfigKey("zookeeper.set.acl", B, False,
              "Kafka: put ZooKeeper ACLs on the znodes a broker creates (with a SASL "
              "ZooKeeper login). Not supported: true stops start-up naming the key.",
              _unsupported_if_true, inert=True),
    ConfigKey("zookeeper.ssl.client.enable", B, False,
              "Kafka: TLS to ZooKeeper. Not supported: true stops start-up naming the key.",
              _unsupported_if_true, inert=True),
    # -- listeners --------------------------------------------------------------------------
    ConfigKey("listeners", LS, [DEFAULT_LISTENERS],
              "NAME://host:port to bind; empty host binds all interfaces, port 0 an ephemeral "
              "port. Security protocols PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL."),
    ConfigKey("advertised.listeners", LS, None,
              "NAME://host:port given to clients; defaults to listeners. Port 0 advertises "
              "the port actually bound."),
    ConfigKey("listener.security.protocol.map", LS, None,
              "LISTENER_NAME:SECURITY_PROTOCOL pairs; default " + DEFAULT_SECURITY_PROTOCOL_MAP),
    ConfigKey("inter.broker.listener.name", S, None,
              "The listener other brokers connect to (default from "
              "security.inter.broker.protocol): it must be an advertised listener. In a "
              "cluster it carries the controller's requests, replica fetches and the remote "
              "tier's metadata traffic."),
    ConfigKey("security.inter.broker.protocol", S, None,
              "The protocol between brokers when inter.broker.listener.name is not set "
              "(default PLAINTEXT; the listener of that name is used; exclusive with "
              "inter.broker.listener.name).",
              one_of(*SECURITY_PROTOCOLS)),
    ConfigKey("controller.listener.names", LS, [],
              "Listeners reserved for KRaft controllers; not served as broker listeners."),
    ConfigKey("controller.quorum.voters", LS, [],
              "Kafka: the KRaft voters, id@host:port. tierlog runs no quorum: the entries are "
              "checked for form only.", inert=True),
    ConfigKey("controller.quorum.bootstrap.servers", LS, [],
              "Kafka: host:port of the KRaft controllers. tierlog runs no quorum: the entries "
              "are checked for form only.", inert=True),
    # -- TLS and SASL (PEM only; see core/server/security.py) -------------------------------
    # Each may also be given per listener as listener.name.<listener lower-case>.<key>.
    ConfigKey("ssl.keystore.type", S, "PEM",
              "Kafka: the key store's format (JKS, PKCS12 or PEM). tierlog reads PEM only: PEM "
              "is the one value accepted, and it changes nothing.", one_of("PEM"), inert=True),
    ConfigKey("ssl.keystore.location", S, None,
              "PEM file with the listener's private key and certificate chain."),
    ConfigKey("ssl.keystore.certificate.chain", P, None,
              "The certificate chain in PEM, inline (instead of ssl.keystore.location)."),
    ConfigKey("ssl.keystore.key", P, None,
              "The private key in PEM, inline (with ssl.keystore.certificate.chain)."),
    ConfigKey("ssl.key.password", P, None, "Password of an encrypted private key."),
    ConfigKey("ssl.keystore.password", P, None,
              "Kafka: the password of a JKS or PKCS12 key store. PEM key stores have none (an "
              "encrypted private key takes ssl.key.password).", inert=True),
    ConfigKey("ssl.truststore.type", S, "PEM",
              "Kafka: the trust store's format (JKS, PKCS12 or PEM). tierlog reads PEM only: "
              "PEM is the one value accepted, and it changes nothing.", one_of("PEM"),
              inert=True),
    ConfigKey("ssl.truststore.location", S, None,
              "PEM file of the CAs trusted for client certificates."),
    ConfigKey("ssl.truststore.certificates", P, None,
              "Trusted CA certificates in PEM, inline."),
    ConfigKey("ssl.truststore.password", P, None,
              "Kafka: the password of a JKS or PKCS12 trust store. PEM trust stores have none.",
              inert=True),
    ConfigKey("ssl.client.auth", S, "none",
              "Client certificates: required, requested or none.",
              one_of("required", "requested", "none")),
    ConfigKey("ssl.enabled.protocols", LS, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.",
              one_of("TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.protocol", S, "TLSv1.3",
              "Kafka: the protocol its SSLContext is created for. tierlog takes the TLS "
              "versions from ssl.enabled.protocols alone.", inert=True),
    ConfigKey("ssl.cipher.suites", LS, [], "OpenSSL cipher names for TLSv1.2; empty keeps "
              "the defaults."),
    ConfigKey("ssl.endpoint.identification.algorithm", S, "https",
              "https: a broker connecting to another over TLS checks the peer's host name "
              "against its certificate; empty: it does not."),
    ConfigKey("ssl.principal.mapping.rules", S, "DEFAULT",
              "Kafka: rules turning a client certificate's distinguished name into a principal. "
              "tierlog applies DEFAULT (the whole distinguished name), the one value accepted.",
              one_of("DEFAULT"), inert=True),
    ConfigKey("sasl.enabled.mechanisms", LS, ["GSSAPI"],
              "SASL mechanisms served on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
              "(Kafka's default GSSAPI is not available)."),
    ConfigKey("sasl.mechanism.inter.broker.protocol", S, "GSSAPI",
              "SASL mechanism brokers use with each other on a SASL inter-broker listener: "
              "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, one of its sasl.enabled.mechanisms."),
    ConfigKey("sasl.jaas.config", P, None,
              "JAAS login module entry with the accounts (user_<name>=\"<password>\"), for "
              "every SASL listener and mechanism without a listener.name.* one."),
    ConfigKey("sasl.server.max.receive.size", I, 524288,
              "Largest frame a SASL listener reads before authentication completes "
              "(ApiVersions, SaslHandshake, SaslAuthenticate); a larger size prefix closes the "
              "connection at once, as in Kafka.", at_least(1)),
    # -- authorization (core/server/authorizer.py) -------------------------------------------
    ConfigKey("authorizer.class.name", S, "",
              "Enables ACLs: org.apache.kafka.metadata.authorizer.StandardAuthorizer (or "
              "core.server.authorizer.AclAuthorizer); empty allows every request. A broker "
              "running alone keeps the ACLs in its first log dir, the brokers of a cluster in "
              "ZooKeeper (/kafka-acl, as Kafka's ZooKeeper mode).",
              one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "kafka.security.authorizer.AclAuthorizer",
                     "core.server.authorizer.AclAuthorizer")),
    ConfigKey("super.users", S, "", "Principals allowed everything, ';'-separated "
              "(User:admin;User:ops); with or without an authorizer, the only clients that may "
              "write the internal topics."),
    ConfigKey("allow.everyone.if.no.acl.found", B, False,
              "Allow a request on a resource that has no ACL at all."),
    # -- metrics (tierlog's; Kafka exports JMX) ----------------------------------------------
    ConfigKey("metrics.prometheus.port", I, -1,
              "Port of the Prometheus /metrics endpoint; -1 disables it, 0 picks a free port.",
              between(-1, 65535)),
    ConfigKey("metrics.prometheus.host", S, "127.0.0.1",
              "Address the Prometheus endpoint binds."),
    # -- socket server ----------------------------------------------------------------------
    ConfigKey("num.network.threads", I, 3,
              "Kafka: threads reading requests from and writing responses to the sockets. "
              "tierlog serves every connection on one asyncio event loop: there are no network "
              "threads to size.", at_least(1), inert=True),
    ConfigKey("num.io.threads", I, 8,
              "Kafka: threads running the request handlers. tierlog runs its handlers on the "
              "event loop (blocking disk work goes to thread pools of their own): there are no "
              "request threads to size.", at_least(1), inert=True),
    ConfigKey("socket.send.buffer.bytes", I, 102400,
              "SO_SNDBUF of each client connection; -1 keeps the OS default (and its "
              "autotuning).", at_least(-1)),
    ConfigKey("socket.receive.buffer.bytes", I, 102400,
              "SO_RCVBUF of each listening socket, which its connections inherit (so TCP "
              "window scaling can use it); -1 keeps the OS default.", at_least(-1)),
    ConfigKey("socket.request.max.bytes", I, 104857600, "Largest request accepted.",
              at_least(1)),
    ConfigKey("socket.listen.backlog.size", I, 50,
              "Connections each listener queues before they are accepted (the listen backlog; "
              "the OS caps it at net.core.somaxconn).", at_least(1)),
    ConfigKey("connections.max.idle.ms", L, 600000,
              "Close connections idle this long (negative: never). A request body must also "
              "arrive in full within this time of its size prefix (tierlog's rule, against "
              "clients that trickle a large frame)."),
    ConfigKey("max.connections", I, INT32_MAX, "Connections accepted at once.", at_least(0)),
    ConfigKey("queued.max.requests", I, 500,
              "Kafka: requests read and waiting for a request handler thread before the "
              "network threads stop reading. tierlog has no such queue (a handler starts on "
              "the event loop as soon as its request is read); each connection has one "
              "request in progress at a time, as in Kafka, and large frames wait unread "
              "while queued.max.request.bytes is reached.",
              at_least(1), inert=True),
    ConfigKey("queued.max.request.bytes", L, 104857600,
              "Bytes of request frames being read or served, all connections together. "
              "While it is reached, frames over 256 KiB wait unread (smaller ones are still "
              "read, and counted); a frame admitted below it may go past it. At least "
              "socket.request.max.bytes; 0 or less: unbounded (Kafka's default is -1; "
              "tierlog bounds it by default)."),
    # -- client quotas (core/server/quotas.py) -----------------------------------------------
    ConfigKey("quota.window.num", I, 11,
              "Samples of a client quota's rate (producer_byte_rate, consumer_byte_rate, "
              "request_percentage): the rate is measured over this many windows, and an idle "
              "client may send quota x (num - 1) x window in a burst before it is throttled.",
              at_least(1)),
    ConfigKey("quota.window.size.seconds", I, 1,
              "Length of each sample of a client quota's rate; also the longest throttle for "
              "request_percentage.", at_least(1)),
    ConfigKey("controller.quota.window.num", I, 11,
              "Kafka: samples of the controller_mutation_rate quota (KIP-599). tierlog stores "
              "and describes controller_mutation_rate but does not enforce it.",
              at_least(1), inert=True),
    ConfigKey("controller.quota.window.size.seconds", I, 1,
              "Kafka: length of each sample of the controller_mutation_rate quota. Not "
              "enforced by tierlog.", at_least(1), inert=True),
    # -- connections to other brokers (core/server/node_client.py) ---------------------------
    ConfigKey("request.timeout.ms", I, 30000,
              "How long a broker waits for another broker's response before it closes the "
              "connection; also how long the transaction coordinator waits for the in-sync "
              "replicas of a __transaction_state write and of a marker (as Kafka's does).",
              at_least(0)),
    ConfigKey("socket.connection.setup.timeout.ms", L, 10000,
              "How long a broker waits for a connection (TCP and TLS) to another broker.",
              at_least(0)),
    ConfigKey("reconnect.backoff.ms", L, 50,
              "First wait before reconnecting to a broker after a failed or lost connection; "
              "doubled per failure, +-20% jitter (Kafka's client key; Kafka's brokers fix it).",
              at_least(0)),
    ConfigKey("reconnect.backoff.max.ms", L, 1000,
              "Largest wait before reconnecting to a broker.", at_least(0)),
    # -- log layer --------------------------------------------------------------------------
    ConfigKey("log.dirs", LS, None, "Directories holding the logs; overrides log.dir."),
    ConfigKey("log.dir", S, "/tmp/kafka-logs", "The log directory when log.dirs is not set."),
    ConfigKey("num.recovery.threads.per.data.dir", I, 2, "Threads per log dir for recovery.",
              at_least(1)),
    ConfigKey("log.retention.check.interval.ms", L, 300000, "How often retention runs.",
              at_least(1)),
    ConfigKey("log.flush.scheduler.interval.ms", L, INT64_MAX,
              "How often logs are checked for flush.ms; also the default of flush.ms."),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", I, 60000,
              "How often recovery points are checkpointed.", at_least(0)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", I, 60000,
              "How often log start offsets are checkpointed.", at_least(0)),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", L, 5000,
              "How often high watermarks are checkpointed."),
    ConfigKey("producer.id.expiration.ms", I, 86400000,
              "Forget an idle producer id after this long.", at_least(1)),
    ConfigKey("producer.id.expiration.check.interval.ms", I, 600000,
              "How often expired producer ids are removed.", at_least(1)),
    # unit aliases of the topic defaults (see the module docstring)
    ConfigKey("log.roll.hours", I, 168, "segment.ms default in hours, below log.roll.ms.",
              at_least(1)),
    ConfigKey("log.roll.jitter.hours", I, 0, "segment.jitter.ms default in hours.",
              at_least(0)),
    ConfigKey("log.retention.minutes", I, None,
              "retention.ms default in minutes, below log.retention.ms."),
    ConfigKey("log.retention.hours", I, 168,
              "retention.ms default in hours, below log.retention.minutes."),
    # -- topics -----------------------------------------------------------------------------
    ConfigKey("num.partitions", I, 1, "Partitions of an auto-created topic.", at_least(1)),
    ConfigKey("default.replication.factor", I, 1,
              "Replicas of a topic created without a replication factor (auto-creation, "
              "CreateTopics with -1). A broker running alone refuses more than 1.",
              between(1, SHORT_MAX)),
    ConfigKey("auto.create.topics.enable", B, True,
              "Create a topic on a Metadata request for it."),
    ConfigKey("delete.topic.enable", B, True, "Allow DeleteTopics."),
    ConfigKey("max.partitions.per.request", I, 10000,
              "Most partitions one CreateTopics request may create, summed over its topics "
              "(num.partitions for those asking for the default); a larger request is "
              "refused whole with POLICY_VIOLATION before anything is created. tierlog's own "
              "key: Kafka's KRaft controller has this limit fixed at 10000 "
              "(MAX_PARTITIONS_PER_BATCH).", at_least(1)),
    # -- controller and controlled shutdown (ZooKeeper mode) --------------------------------
    # Read by the ZooKeeper-mode controller (core/server/controller) and, for the
    # controlled.shutdown.* keys, by a broker stopping in a cluster (core/server/cluster_mode.py).
    # A broker running alone has no controller: there they change nothing.
    ConfigKey("auto.leader.rebalance.enable", B, True,
              "The controller moves leadership back to the preferred replicas (the first of "
              "each assignment) when a broker leads too few of its preferred partitions."),
    ConfigKey("leader.imbalance.check.interval.seconds", L, 300,
              "How often the controller checks the preferred leader imbalance (the first "
              "check 5 s after it is elected).", at_least(1)),
    ConfigKey("leader.imbalance.per.broker.percentage", I, 10,
              "The share (percent) of a broker's preferred partitions led by others above "
              "which the controller moves them back to it.", at_least(0)),
    ConfigKey("controller.socket.timeout.ms", I, 30000,
              "How long the controller waits for a broker's answer before it sends the "
              "request again on a new connection.", at_least(1)),
    ConfigKey("controlled.shutdown.enable", B, True,
              "A broker stopping on SIGTERM first asks the controller to move its "
              "leaderships to other brokers (ControlledShutdown), then stops."),
    ConfigKey("controlled.shutdown.max.retries", I, 3,
              "How many times a stopping broker asks the controller (while it still leads "
              "partitions, or the controller cannot be reached) before it stops all the same.",
              at_least(0)),
    ConfigKey("controlled.shutdown.retry.backoff.ms", L, 5000,
              "The wait between those attempts.", at_least(0)),
    # -- fetching ---------------------------------------------------------------------------
    ConfigKey("fetch.max.bytes", I, 57671680, "Broker-side cap of a fetch response.",
              at_least(1024)),
    # Read by the replica fetchers and the leaders' ISR checks (core/server/replica_fetcher.py,
    # core/server/partition.py); a broker running alone has no followers, so there they change
    # nothing. Validated as Kafka does (replica.fetch.wait.max.ms <= the two timeouts).
    ConfigKey("replica.fetch.wait.max.ms", I, 500,
              "How long a follower's fetch waits at the leader for data (its max_wait).",
              at_least(0)),
    ConfigKey("replica.fetch.min.bytes", I, 1,
              "The bytes a follower's fetch waits for at the leader (its min_bytes).",
              at_least(1)),
    ConfigKey("replica.fetch.max.bytes", I, 1048576,
              "The bytes per partition a follower asks for in one fetch (a larger first "
              "batch is still returned whole, as in Kafka).", at_least(0)),
    ConfigKey("replica.fetch.response.max.bytes", I, 10485760,
              "The size cap of a follower's whole fetch response.", at_least(0)),
    ConfigKey("replica.fetch.backoff.ms", I, 1000,
              "A follower's pause after a failed fetch or a lost connection to the leader.",
              at_least(0)),
    ConfigKey("replica.lag.time.max.ms", L, 30000,
              "A follower that has not caught up with the leader's log end for this long "
              "leaves the ISR (the leader checks every half of it and records the change in "
              "ZooKeeper)."),
    ConfigKey("replica.socket.timeout.ms", I, 30000,
              "How long a follower waits for the leader's answer to a fetch."),
    ConfigKey("num.replica.fetchers", I, 1,
              "Fetchers (each one connection and one task) per source broker; a partition "
              "goes to fetcher abs(31 * hash(topic) + partition) % num.replica.fetchers.",
              at_least(1)),
    # -- replication throttles (core/server/replication_quota.py) ----------------------------
    ConfigKey("leader.replication.throttled.rate", L, 2**63 - 1,
              "Bytes/s this broker sends to followers for the replicas listed in its topics' "
              "leader.replication.throttled.replicas (followers outside the ISR only). Static "
              "(server.properties) in tierlog; Kafka also sets it dynamically per broker.",
              at_least(0)),
    ConfigKey("follower.replication.throttled.rate", L, 2**63 - 1,
              "Bytes/s this broker fetches as a follower for the replicas listed in its "
              "topics' follower.replication.throttled.replicas (while not caught up). Static "
              "(server.properties) in tierlog; Kafka also sets it dynamically per broker.",
              at_least(0)),
    ConfigKey("replication.quota.window.num", I, 11,
              "Samples of the replication throttle rates.", at_least(1)),
    ConfigKey("replication.quota.window.size.seconds", I, 1,
              "Length of each sample of the replication throttle rates.", at_least(1)),
    # -- log cleaner (compaction) ------------------------------------------------------------
    ConfigKey("log.cleaner.enable", B, True,
              "Run the log cleaner, which compacts topics with cleanup.policy=compact "
              "(__consumer_offsets among them)."),
    ConfigKey("log.cleaner.threads", I, 1, "Threads compacting logs.", at_least(0)),
    ConfigKey("log.cleaner.dedupe.buffer.size", L, 134217728,
              "Memory for the key -> latest offset maps of the cleaner threads together "
              "(about 120 bytes per key in tierlog).", at_least(1024)),
    ConfigKey("log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, 1.7976931348623157e308,
              "Cap on the bytes the cleaner reads plus writes per second.", at_least(1)),
    ConfigKey("log.cleaner.backoff.ms", L, 15000,
              "How long the cleaner sleeps when no log needs cleaning.", at_least(0)),
    # -- coordinators -----------------------------------------------------------------------
    ConfigKey("offsets.topic.num.partitions", I, 50, "Partitions of __consumer_offsets.",
              at_least(1)),
    ConfigKey("offsets.topic.replication.factor", I, 3,
              "Replicas of __consumer_offsets, created when a group first asks for its "
              "coordinator; with fewer live brokers it is created with one replica per live "
              "broker and a warning. A broker running alone creates it with one replica.",
              between(1, SHORT_MAX)),
    ConfigKey("offsets.topic.segment.bytes", I, 104857600,
              "segment.bytes of __consumer_offsets.", at_least(1)),
    ConfigKey("offsets.retention.minutes", I, 10080, "Keep committed offsets this long.",
              at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", L, 600000,
              "How often stale offsets are removed.", at_least(1)),
    ConfigKey("offsets.commit.timeout.ms", I, 5000,
              "How long an offset commit waits for the in-sync replicas of its "
              "__consumer_offsets partition before it is answered with an error (the client "
              "retries).", at_least(1)),
    ConfigKey("group.initial.rebalance.delay.ms", I, 3000,
              "Wait for more members before the first rebalance of a group."),
    ConfigKey("group.min.session.timeout.ms", I, 6000, "Smallest session timeout allowed."),
    ConfigKey("group.max.session.timeout.ms", I, 1800000, "Largest session timeout allowed."),
    ConfigKey("group.max.size", I, INT32_MAX,
              "Members a classic group admits: a JoinGroup beyond it gets GROUP_MAX_SIZE_REACHED; "
              "a group found over it at start-up rebalances and keeps the first members to "
              "rejoin (Kafka's rules).", at_least(1)),
    # -- transactions (core.server.transaction_coordinator) --------------------------------
    ConfigKey("transaction.state.log.num.partitions", I, 50,
              "The partitions of __transaction_state (fixed once the topic exists: a "
              "transactional id's partition depends on it).", at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", I, 3,
              "The replicas of __transaction_state, capped to the live brokers when it is "
              "created (one broker alone: 1).", between(1, SHORT_MAX)),
    ConfigKey("transaction.state.log.min.isr", I, 2,
              "min.insync.replicas of __transaction_state, capped to its replication factor.",
              at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", I, 104857600,
              "segment.bytes of __transaction_state.", at_least(1)),
    ConfigKey("transaction.max.timeout.ms", I, 900000,
              "The largest transaction.timeout.ms a producer may ask for "
              "(INVALID_TRANSACTION_TIMEOUT beyond); also how long a transaction the "
              "coordinator does not know may stay open in a partition before the leader "
              "aborts it.", at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", I, 10000,
              "How often the coordinator aborts transactions open longer than their "
              "timeout.", at_least(1)),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", I, 3600000,
              "How often the coordinator forgets transactional ids idle for "
              "transactional.id.expiration.ms.", at_least(1)),
    ConfigKey("transactional.id.expiration.ms", I, 604800000,
              "Forget a transactional id with no transaction for this long (a tombstone in "
              "__transaction_state).", at_least(1)),
    # -- tiered storage (KIP-405); used by the remote tier ----------------------------------
    ConfigKey("remote.log.storage.system.enable", B, False,
              "Enable tiered storage on this broker (KIP-405)."),
    ConfigKey("remote.log.metadata.manager.class.name", S,
              "rlmm.manager.TopicBasedRemoteLogMetadataManager",
              "The RemoteLogMetadataManager plugin (dotted path)."),
    ConfigKey("remote.log.storage.manager.class.name", S,
              "rsm_plugins.local.LocalDirRemoteStorageManager",
              "The RemoteStorageManager plugin (dotted path)."),
    ConfigKey("remote.log.metadata.manager.listener.name", S, "",
              "In a cluster, the listener whose endpoint the default RLMM's Kafka client "
              "connects to: its bootstrap.servers and security.protocol, as Kafka sets "
              "them (empty: the inter-broker listener, unless "
              "rlmm.config.remote.log.metadata.common.client.bootstrap.servers names "
              "other brokers). Credentials (sasl.*, ssl.*) go in "
              "rlmm.config.remote.log.metadata.common.client.*, which also override these. "
              "Alone, the default RLMM reaches the broker in-process."),
]
# Plugin settings travel under these prefixes and reach the plugin with the prefix
# stripped, as in Kafka (remote.log.storage.manager.impl.prefix and its RLMM twin).
PLUGIN_CONFIG_PREFIXES = ("rsm.config.", "rlmm.config.")
# The RemoteLogManager's own keys (remote.log.manager.task.interval.ms, ...) are declared
# with it in tiered/rlm_config.py; core lets them through and the remote tier rejects an
# unknown one by name at start-up.
REMOTE_TIER_PREFIXES = (
    "remote.log.manager.",
    "remote.log.reader.",
    "remote.fetch.",
    "remote.log.index.file.cache.",
    "remote.partition.remover.",
)
# Per-listener overrides of ssl.* and sasl.* keys (Kafka's listener prefix), checked by
# core.server.security when the listeners start.
LISTENER_PREFIX = "listener.name."
# fmt: on

# Keys of Kafka's sample server.properties files (3.x KRaft, 4.x, ZooKeeper era) and other
# common keys that tierlog has no use for: accepted (any value) so that a copied file
# starts, ignored. Each says what Kafka does with it.
_COMPATIBILITY_DOCS = {
    "metadata.log.dir": "Kafka (KRaft): where the cluster metadata log lives. tierlog has no "
    "metadata log (its topic registry is in the first log dir).",
    "share.coordinator.state.topic.replication.factor": "Kafka 4 (KIP-932): the replicas of "
    "__share_group_state. tierlog has no share groups.",
    "share.coordinator.state.topic.min.isr": "Kafka 4 (KIP-932): min.insync.replicas of "
    "__share_group_state. tierlog has no share groups.",
    "max.connections.per.ip": "Kafka: a connection limit per client address. tierlog bounds "
    "only the total (max.connections).",
    "background.threads": "Kafka: threads for background tasks. tierlog's background tasks run "
    "on its scheduler's threads, not sized by this key.",
    "num.replica.alter.log.dirs.threads": "Kafka: threads moving replicas between log dirs "
    "(AlterReplicaLogDirs). tierlog does not move replicas between log dirs.",
}
COMPATIBILITY_KEYS = tuple(_COMPATIBILITY_DOCS)

# Broker keys whose absence means "use the next key of the alias chain" (Kafka's null default).
_NULLABLE_TOPIC_DEFAULTS = {
    "log.roll.ms",
    "log.roll.jitter.ms",
    "log.retention.ms",
    "log.flush.interval.ms",
}


def _topic_default_keys() -> list[ConfigKey]:
    """The broker keys that hold topic configs' defaults, declared from ``TOPIC_CONFIG``."""
    keys = []
    for topic_key in TOPIC_CONFIG:
        name = topic_key.server_default_property
        if name is None:
            continue
        nullable = name in _NULLABLE_TOPIC_DEFAULTS
        validator = None if name == "log.retention.ms" else topic_key.validator
        keys.append(
            ConfigKey(
                name,
                topic_key.type,
                None if nullable else topic_key.default,
                f"Default of the topic config {topic_key.name}: {topic_key.doc}",
                validator,
                inert=topic_key.inert,
            )
        )
    return keys


BROKER_CONFIG = ConfigDef(
    _BROKER_KEYS
    + _topic_default_keys()
    + [ConfigKey(name, S, None, doc, inert=True) for name, doc in _COMPATIBILITY_DOCS.items()]
)
del I, L, B, S, LS, P

# topic key -> broker key, for the defaults and for naming broker keys in errors
_TOPIC_TO_BROKER = {
    k.name: k.server_default_property for k in TOPIC_CONFIG if k.server_default_property
}


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint.

    Attributes:
        name: the listener name, upper-cased as Kafka normalises it.
        security_protocol: from ``listener.security.protocol.map``.
        host: a hostname or IP literal; ``""`` binds every interface.
        port: 0-65535; 0 binds an ephemeral port.
    """

    name: str
    security_protocol: str
    host: str
    port: int

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is not in 0-65535")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The parsed, validated broker configuration. Build it with ``from_props``.

    Field names mirror Kafka's keys (``num.io.threads`` -> ``num_io_threads``). ``values``
    holds every declared key's parsed value (``None`` for unset nullable keys);
    ``originals`` the keys that were given, as given.
    """

    node_id: int
    process_roles: tuple[str, ...]
    broker_rack: str | None
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    listener_security_protocol_map: Mapping[str, str]
    inter_broker_listener_name: str
    controller_listener_names: tuple[str, ...]
    num_network_threads: int
    num_io_threads: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    socket_request_max_bytes: int
    socket_listen_backlog_size: int
    connections_max_idle_ms: int
    max_connections: int
    queued_max_requests: int
    queued_max_request_bytes: int
    log_dirs: tuple[Path, ...]
    num_recovery_threads_per_data_dir: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    producer_id_expiration_ms: int
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    fetch_max_bytes: int
    replica_fetch_wait_max_ms: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    group_initial_rebalance_delay_ms: int
    remote_log_storage_system_enable: bool
    values: Mapping[str, Any] = field(repr=False)
    originals: Mapping[str, str] = field(repr=False)

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Parse and validate broker properties (strings, as read from a file).

        Raises:
            InvalidConfigError: an unknown key, an invalid value or an inconsistent
                combination; the message names the key.
        """
        props = {k.strip(): v for k, v in props.items()}
        _reject_unknown(props)
        plugin_props = {
            k: v
            for k, v in props.items()
            if k.startswith(PLUGIN_CONFIG_PREFIXES + REMOTE_TIER_PREFIXES + (LISTENER_PREFIX,))
        }
        values = BROKER_CONFIG.parse({k: v for k, v in props.items() if k not in plugin_props})
        node_id = _node_id(props, values)
        values["node.id"] = values["broker.id"] = node_id
        roles = _process_roles(values["process.roles"])
        controller_names = tuple(n.upper() for n in values["controller.listener.names"])
        _validate_quorum(values)
        protocol_map = _security_protocol_map(values, controller_names)
        listeners = _parse_listeners("listeners", values["listeners"], protocol_map)
        _check_distinct(listeners, ports=True)
        broker_listeners = tuple(lst for lst in listeners if lst.name not in controller_names)
        if not broker_listeners:
            raise InvalidConfigError(
                f"Invalid value {','.join(values['listeners'])} for configuration listeners: "
                "there must be at least one broker listener (one not in "
                "controller.listener.names)"
            )
        advertised = _advertised_listeners(values, listeners, protocol_map, controller_names)
        inter_broker = _inter_broker_listener(values, props, advertised)
        _check_replica_timeouts(values)
        _check_request_memory(values)
        config = cls(
            node_id=node_id,
            process_roles=roles,
            broker_rack=values["broker.rack"],
            listeners=listeners,
            advertised_listeners=advertised,
            listener_security_protocol_map=MappingProxyType(protocol_map),
            inter_broker_listener_name=inter_broker,
            controller_listener_names=controller_names,
            num_network_threads=values["num.network.threads"],
            num_io_threads=values["num.io.threads"],
            socket_send_buffer_bytes=values["socket.send.buffer.bytes"],
            socket_receive_buffer_bytes=values["socket.receive.buffer.bytes"],
            socket_request_max_bytes=values["socket.request.max.bytes"],
            socket_listen_backlog_size=values["socket.listen.backlog.size"],
            connections_max_idle_ms=values["connections.max.idle.ms"],
            max_connections=values["max.connections"],
            queued_max_requests=values["queued.max.requests"],
            queued_max_request_bytes=values["queued.max.request.bytes"],
            log_dirs=_log_dirs(values),
            num_recovery_threads_per_data_dir=values["num.recovery.threads.per.data.dir"],
            log_retention_check_interval_ms=values["log.retention.check.interval.ms"],
            log_flush_scheduler_interval_ms=values["log.flush.scheduler.interval.ms"],
            log_flush_offset_checkpoint_interval_ms=values[
                "log.flush.offset.checkpoint.interval.ms"
            ],
            log_flush_start_offset_checkpoint_interval_ms=values[
                "log.flush.start.offset.checkpoint.interval.ms"
            ],
            replica_high_watermark_checkpoint_interval_ms=values[
                "replica.high.watermark.checkpoint.interval.ms"
            ],
            producer_id_expiration_ms=values["producer.id.expiration.ms"],
            num_partitions=values["num.partitions"],
            default_replication_factor=values["default.replication.factor"],
            auto_create_topics_enable=values["auto.create.topics.enable"],
            delete_topic_enable=values["delete.topic.enable"],
            fetch_max_bytes=values["fetch.max.bytes"],
            replica_fetch_wait_max_ms=values["replica.fetch.wait.max.ms"],
            offsets_topic_num_partitions=values["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=values["offsets.topic.replication.factor"],
            transaction_state_log_replication_factor=values[
                "transaction.state.log.replication.factor"
            ],
            transaction_state_log_min_isr=values["transaction.state.log.min.isr"],
            group_initial_rebalance_delay_ms=values["group.initial.rebalance.delay.ms"],
            remote_log_storage_system_enable=values["remote.log.storage.system.enable"],
            values=MappingProxyType(values),
            originals=MappingProxyType(dict(props)),
        )
        config.default_log_config()  # validates the derived topic defaults
        return config

    # -- accessors ----------------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The parsed value of any declared key (``None`` when a nullable key is unset).

        Raises:
            InvalidConfigError: ``name`` is not a declared key.
        """
        if name not in BROKER_CONFIG:
            raise InvalidConfigError(f"Unknown configuration {name}")
        return self.values[name]

    def is_default(self, name: str) -> bool:
        """True if ``name`` was not given (DescribeConfigs' DEFAULT_CONFIG source)."""
        return name not in self.originals

    def inert_keys_given(self) -> list[str]:
        """The keys given (file or overrides) that tierlog accepts but does not act on:
        those declared ``inert``, the compatibility keys among them."""
        return sorted(k for k in self.originals if k in BROKER_CONFIG and BROKER_CONFIG[k].inert)

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        """The listeners that serve clients: ``listeners`` minus the controller listeners."""
        return tuple(
            lst for lst in self.listeners if lst.name not in self.controller_listener_names
        )

    # -- derived configs ----------------------------------------------------------------
    def log_retention_ms(self) -> int:
        """Kafka's precedence: ms > minutes > hours; a negative result is -1 (unlimited)."""
        v = self.values
        if v["log.retention.ms"] is not None:
            millis = v["log.retention.ms"]
        elif v["log.retention.minutes"] is not None:
            millis = v["log.retention.minutes"] * MINUTE_MS
        else:
            millis = v["log.retention.hours"] * HOUR_MS
        return -1 if millis < 0 else millis

    def log_config_defaults(self) -> dict[str, str]:
        """Topic key -> the broker's default for it, as strings.

        For ``LogConfig.from_props(topic_overrides, defaults=...)``.
        """
        v = self.values
        resolved: dict[str, Any] = {
            "segment.ms": v["log.roll.ms"]
            if v["log.roll.ms"] is not None
            else v["log.roll.hours"] * HOUR_MS,
            "segment.jitter.ms": v["log.roll.jitter.ms"]
            if v["log.roll.jitter.ms"] is not None
            else v["log.roll.jitter.hours"] * HOUR_MS,
            "retention.ms": self.log_retention_ms(),
            "flush.ms": v["log.flush.interval.ms"]
            if v["log.flush.interval.ms"] is not None
            else v["log.flush.scheduler.interval.ms"],
        }
        out = {}
        for topic_key in TOPIC_CONFIG:
            broker_key = topic_key.server_default_property
            if broker_key is None:
                continue
            value = resolved[topic_key.name] if topic_key.name in resolved else v[broker_key]
            out[topic_key.name] = format_value(topic_key, value)
        return out

    def default_log_config(self) -> LogConfig:
        """The LogConfig of a topic without overrides.

        Raises:
            InvalidConfigError: the broker's log.* defaults are inconsistent (for example
                log.local.retention.ms above the retention); the message names broker keys.
        """
        try:
            return LogConfig.from_props({}, defaults=self.log_config_defaults())
        except InvalidConfigError as e:
            raise InvalidConfigError(_topic_keys_to_broker_keys(str(e))) from e

    def log_manager_config(self, *, cluster_id: str = "") -> LogManagerConfig:
        """The log layer's settings; ``cluster_id`` empty lets the LogManager find or make one."""
        return LogManagerConfig(
            log_dirs=self.log_dirs,
            node_id=self.node_id,
            cluster_id=cluster_id,
            num_recovery_threads_per_data_dir=self.num_recovery_threads_per_data_dir,
            retention_check_interval_ms=self.log_retention_check_interval_ms,
            flush_scheduler_interval_ms=self.log_flush_scheduler_interval_ms,
            flush_offset_checkpoint_interval_ms=self.log_flush_offset_checkpoint_interval_ms,
            flush_start_offset_checkpoint_interval_ms=(
                self.log_flush_start_offset_checkpoint_interval_ms
            ),
            high_watermark_checkpoint_interval_ms=(
                self.replica_high_watermark_checkpoint_interval_ms
            ),
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            producer_id_expiration_check_interval_ms=self.get(
                "producer.id.expiration.check.interval.ms"
            ),
            default_log_config=self.default_log_config(),
            cleaner=CleanerConfig(
                enable=self.get("log.cleaner.enable"),
                threads=self.get("log.cleaner.threads"),
                dedupe_buffer_size=self.get("log.cleaner.dedupe.buffer.size"),
                io_max_bytes_per_second=self.get("log.cleaner.io.max.bytes.per.second"),
                backoff_ms=self.get("log.cleaner.backoff.ms"),
            ),
        )

    def to_props(self) -> dict[str, str | None]:
        """Every declared key as Kafka's DescribeConfigs shows it; ``None`` for unset keys."""
        out: dict[str, str | None] = {}
        for key in BROKER_CONFIG:
            value = self.values[key.name]
            out[key.name] = None if value is None else format_value(key, value)
        return out


def load_broker_config(
    path: str | os.PathLike[str] | None, overrides: Mapping[str, str] | None = None
) -> BrokerConfig:
    """The broker config from a properties file (optional) with ``--set`` overrides on top.

    Raises:
        PropertiesFileError: the file is missing, unreadable or malformed (names the file).
        InvalidConfigError: an unknown key or invalid value (names the key).
    """
    props = read_properties(path) if path is not None else {}
    props.update(overrides or {})
    return BrokerConfig.from_props(props)


# -- helpers: each raises InvalidConfigError naming the key ---------------------------------


def _invalid(key: str, value: object, reason: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value} for configuration {key}: {reason}")


def _reject_unknown(props: Mapping[str, str]) -> None:
    for name in props:
        if name.startswith(PLUGIN_CONFIG_PREFIXES + REMOTE_TIER_PREFIXES + (LISTENER_PREFIX,)):
            continue
        if name not in BROKER_CONFIG:
            names = [k.name for k in BROKER_CONFIG]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InvalidConfigError(f"Unknown configuration {name}{hint}")


def _node_id(props: Mapping[str, str], values: Mapping[str, Any]) -> int:
    if "broker.id" in props and "node.id" not in props:
        return values["broker.id"]
    if "broker.id" in props and values["broker.id"] != values["node.id"]:
        raise _invalid(
            "broker.id",
            values["broker.id"],
            f"You must set node.id to the same value as broker.id (node.id={values['node.id']})",
        )
    return values["node.id"]


def _process_roles(roles: list[str]) -> tuple[str, ...]:
    text = ",".join(roles)
    if len(set(roles)) != len(roles):
        raise _invalid("process.roles", text, "duplicate role")
    if "broker" not in roles:
        raise _invalid(
            "process.roles", text, "must contain broker (tierlog runs no KRaft controller)"
        )
    return tuple(roles)


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
_LISTENER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_PORT = re.compile(r"[0-9]+")


def _valid_host(host: str) -> bool:
    if host == "":
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    if len(host) > 253 or ":" in host:
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in host.removesuffix(".").split("."))


def _split_host_port(key: str, entry: str, hostport: str) -> tuple[str, int]:
    if hostport.startswith("["):
        host, sep, rest = hostport[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise _invalid(key, entry, "expected NAME://[ipv6]:port")
        port_text = rest[1:]
        if ":" not in host:
            raise _invalid(key, entry, f"{host!r} is not a valid hostname or IP address")
    else:
        host, sep, port_text = hostport.rpartition(":")
        if not sep:
            raise _invalid(key, entry, "missing port (expected NAME://host:port)")
    if not port_text:
        raise _invalid(key, entry, "missing port (expected NAME://host:port)")
    # ASCII digits only, as Kafka's port pattern ([0-9]+): str.isdigit also accepts "²" and
    # non-ASCII digits.
    if _PORT.fullmatch(port_text) is None or int(port_text) > 65535:
        raise _invalid(key, entry, f"port {port_text} is not a number in 0-65535")
    if not _valid_host(host):
        raise _invalid(key, entry, f"{host!r} is not a valid hostname or IP address")
    return host, int(port_text)


def _parse_listeners(
    key: str, entries: list[str], protocol_map: Mapping[str, str]
) -> tuple[Listener, ...]:
    out = []
    for entry in entries:
        name, sep, hostport = entry.partition("://")
        if not sep:
            raise _invalid(key, entry, "expected NAME://host:port")
        if _LISTENER_NAME.fullmatch(name) is None:
            raise _invalid(key, entry, f"listener name {name!r} is not valid")
        name = name.upper()
        host, port = _split_host_port(key, entry, hostport)
        protocol = protocol_map.get(name)
        if protocol is None:
            raise _invalid(
                key,
                entry,
                f"no security protocol is defined for listener {name} in "
                "listener.security.protocol.map",
            )
        out.append(Listener(name, protocol, host, port))
    return tuple(out)


def _check_distinct(listeners: tuple[Listener, ...], *, ports: bool) -> None:
    key = "listeners" if ports else "advertised.listeners"
    text = ",".join(str(lst) for lst in listeners)
    names = [lst.name for lst in listeners]
    if len(set(names)) != len(names):
        raise _invalid(key, text, "each listener must have a different name")
    # Port 0 (ephemeral) may repeat, as in Kafka.
    used = [lst.port for lst in listeners if lst.port != 0]
    if ports and len(set(used)) != len(used):
        raise _invalid(key, text, "each listener must have a different port")


def _security_protocol_map(
    values: Mapping[str, Any], controller_names: tuple[str, ...]
) -> dict[str, str]:
    explicit = values["listener.security.protocol.map"]
    entries = explicit if explicit is not None else DEFAULT_SECURITY_PROTOCOL_MAP.split(",")
    out: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = (p.strip() for p in entry.partition(":"))
        key = "listener.security.protocol.map"
        if not sep or not name or _LISTENER_NAME.fullmatch(name) is None:
            raise _invalid(key, entry, "expected LISTENER_NAME:SECURITY_PROTOCOL pairs")
        if protocol.upper() not in SECURITY_PROTOCOLS:
            raise _invalid(
                key,
                entry,
                f"unknown security protocol {protocol} (one of {', '.join(SECURITY_PROTOCOLS)})",
            )
        if name.upper() in out:
            raise _invalid(key, entry, f"listener {name.upper()} is mapped twice")
        out[name.upper()] = protocol.upper()
    if explicit is None:
        # Kafka: with the default map, controller listeners not in it are PLAINTEXT.
        for name in controller_names:
            out.setdefault(name, "PLAINTEXT")
    return out


def _advertised_listeners(
    values: Mapping[str, Any],
    listeners: tuple[Listener, ...],
    protocol_map: Mapping[str, str],
    controller_names: tuple[str, ...],
) -> tuple[Listener, ...]:
    key = "advertised.listeners"
    if values[key] is not None:
        advertised = _parse_listeners(key, values[key], protocol_map)
        _check_distinct(advertised, ports=False)
        known = {lst.name for lst in listeners}
        for lst in advertised:
            if lst.name not in known:
                raise _invalid(
                    key,
                    lst,
                    f"listener name {lst.name} is not defined in listeners "
                    f"({', '.join(sorted(known))})",
                )
    else:
        advertised = listeners
    out = []
    for lst in advertised:
        if lst.name in controller_names:
            continue  # only broker listeners are given to clients
        if lst.host in ("0.0.0.0", "::"):
            raise _invalid(
                key,
                lst,
                f"cannot use the nonroutable meta-address {lst.host}; use a routable host "
                "(set advertised.listeners when listeners binds every interface)",
            )
        # Kafka advertises the canonical host name for an empty host.
        host = lst.host or socket.getfqdn()
        out.append(Listener(lst.name, lst.security_protocol, host, lst.port))
    return tuple(out)


def _inter_broker_listener(
    values: Mapping[str, Any], props: Mapping[str, str], advertised: tuple[Listener, ...]
) -> str:
    name = values["inter.broker.listener.name"]
    if name is not None and "security.inter.broker.protocol" in props:
        raise _invalid(
            "inter.broker.listener.name",
            name,
            "only one of inter.broker.listener.name and security.inter.broker.protocol may be set",
        )
    note = ""
    if name is None:
        name = values["security.inter.broker.protocol"] or "PLAINTEXT"
        note = " (the default is the name of security.inter.broker.protocol)"
    name = name.upper()
    names = [lst.name for lst in advertised]
    if name not in names:
        raise _invalid(
            "inter.broker.listener.name",
            name,
            f"must be a listener name defined in advertised.listeners{note}; "
            f"valid: {', '.join(names)}",
        )
    return name


_VOTER = re.compile(r"([0-9]+)@(\[[^\]]+\]|[^:@]+):([0-9]+)")
_BOOTSTRAP = re.compile(r"(\[[^\]]+\]|[^:@]+):([0-9]+)")


def _validate_quorum(values: Mapping[str, Any]) -> None:
    for entry in values["controller.quorum.voters"]:
        if _VOTER.fullmatch(entry) is None:
            raise _invalid("controller.quorum.voters", entry, "expected id@host:port entries")
    for entry in values["controller.quorum.bootstrap.servers"]:
        if _BOOTSTRAP.fullmatch(entry) is None:
            raise _invalid(
                "controller.quorum.bootstrap.servers", entry, "expected host:port entries"
            )


def _log_dirs(values: Mapping[str, Any]) -> tuple[Path, ...]:
    if values["log.dirs"] is not None:
        key, dirs = "log.dirs", values["log.dirs"]
    else:
        key, dirs = "log.dir", [values["log.dir"]] if values["log.dir"] else []
    if not dirs:
        raise _invalid(
            key, "", "At least one log directory must be defined via log.dirs or log.dir."
        )
    seen: set[str] = set()
    for d in dirs:
        normal = os.path.normpath(os.path.abspath(d))
        if normal in seen:
            raise _invalid(key, ",".join(dirs), f"duplicate log directory {d}")
        seen.add(normal)
    return tuple(Path(d) for d in dirs)


def _check_replica_timeouts(values: Mapping[str, Any]) -> None:
    wait = values["replica.fetch.wait.max.ms"]
    for other in ("replica.socket.timeout.ms", "replica.lag.time.max.ms"):
        if wait > values[other]:
            raise _invalid(
                "replica.fetch.wait.max.ms",
                wait,
                f"must not be more than {other} ({values[other]})",
            )
    key, value, millis = _retention_source(values)
    if millis == 0:
        raise _invalid(key, value, "retention must be unlimited (-1) or at least 1 ms")


def _check_request_memory(values: Mapping[str, Any]) -> None:
    """Kafka's rule: a bounded request memory pool holds at least one largest request."""
    pool = values["queued.max.request.bytes"]
    largest = values["socket.request.max.bytes"]
    if 0 < pool < largest:
        raise _invalid(
            "queued.max.request.bytes",
            pool,
            f"must be at least socket.request.max.bytes ({largest}), or -1 for no bound",
        )


def _retention_source(values: Mapping[str, Any]) -> tuple[str, int, int]:
    """The key that decides retention.ms, its value and the milliseconds it gives."""
    if values["log.retention.ms"] is not None:
        return "log.retention.ms", values["log.retention.ms"], values["log.retention.ms"]
    if values["log.retention.minutes"] is not None:
        m = values["log.retention.minutes"]
        return "log.retention.minutes", m, m * MINUTE_MS
    h = values["log.retention.hours"]
    return "log.retention.hours", h, h * HOUR_MS


_TOPIC_KEY_IN_TEXT = re.compile(
    r"(?<![\w.])("
    + "|".join(re.escape(k) for k in sorted(_TOPIC_TO_BROKER, key=len, reverse=True))
    + r")(?![\w.])"
)


def _topic_keys_to_broker_keys(message: str) -> str:
    """Name the broker keys (log.local.retention.ms) in an error about topic keys."""
    return _TOPIC_KEY_IN_TEXT.sub(lambda m: _TOPIC_TO_BROKER[m.group(1)], message)
