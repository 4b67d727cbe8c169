"""``tierlog metadata verify`` and ``tierlog restore`` after a real unclean election (issue 18).

The bucket's diverged branch is made by the cluster itself, as KIP-405's scenario 5 makes it
(``test_tiered_cluster_scenarios``, reused: real broker processes, ZooKeeper, S3 over moto's
HTTP server, SIGSTOP/SIGKILL and ``tierlog cluster elect-leaders --unclean``), up to its
step 2: A (LE-0) copied seg-0-3 holding msgs 0..3; B, out of sync with 0..1, was elected
uncleanly (LE-2), wrote msgs 4, 5, 6 at 2..4 and copied its own seg-0-3 (LE-0@0, LE-2@2).
A's copy holds offsets 2..3 of the branch the election truncated (msgs 2, 3); the canonical
log (``spark_jobs.lineage``, the lineage of B's checkpoint) is msgs 0, 1, 4, 5 at 0..3.

1. ``tierlog metadata verify`` (the CLI, in a child process) against the live cluster: exit 0,
   no finding, A's copy named in a note as off the lineage. That is right: its epoch (0) is
   on B's lineage, so B's expiration keeps it as Apache Kafka does (a later unclean election
   may need it: scenario 5's step 3), and the canonical lineage has no gap or overlap.
2. The cluster is lost: every broker SIGKILLed, every disk wiped. A new cluster (a ZooKeeper
   chroot of its own) on the same bucket, ``tierlog restore``, and a real consumer reads from
   offset 0 exactly the canonical log, none of the truncated branch (msg 6, never tiered, is
   lost with the disks); new records are appended right after, in a later leader epoch.
   A's copy, left out by restore, is then an orphan: verify names its objects, ``--repair
   --yes`` deletes them, and the tier verifies clean.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.integration.test_remote_tools import tierlog, verify, write_config
from tests.integration.test_tiered_cluster_scenarios import (  # noqa: F401 - fixture
    FAST_LAG,
    FINISHED,
    PAUSABLE,
    TOPIC,
    A,
    B,
    Scenario,
    diverge_in_remote_storage,
    history,
    scenario_factory,
    segment_bytes,
    value,
)
from tests.support.cluster import DEADLINE_S, cluster_factory  # noqa: F401 - fixture
from tests.support.s3_harness import Bucket, metadata_segments, tiering_settings


def diverged_bucket(s: Scenario) -> tuple[str, str]:
    """Scenario 5 up to its step 2 (see the module doc): (A's copy's segment id, B's)."""
    diverge_in_remote_storage(s)
    copies = {
        row["broker_id"]: row["segment_id"] for row in metadata_segments(s.cluster.bootstrap, TOPIC)
    }
    return copies[A], copies[B]


def test_verify_and_restore_after_an_unclean_election_take_the_canonical_lineage(
    tmp_path: Path,
    s3_endpoint: Any,
    bucket: Bucket,
    scenario_factory,  # noqa: F811
    cluster_factory,  # noqa: F811
) -> None:
    s = scenario_factory([A, B], {"segment.bytes": segment_bytes(4)}, FAST_LAG, PAUSABLE)
    branch, canonical = diverged_bucket(s)
    canonical_log = history(([0, 1], 0), ([4, 5], 2))  # offsets 0..3 in the bucket

    # 1. verify: consistent; the truncated branch's copy is noted, the canonical one is not.
    config = write_config(tmp_path / "server.properties", s.cluster.brokers[B].settings)
    done = tierlog("metadata", "verify", "--bootstrap-server", s.cluster.bootstrap,
                   "--rsm-config", str(config), "--json")  # fmt: skip
    doc = json.loads(done.stdout)
    assert done.returncode == 0, (doc["findings"], done.stderr[-2000:])
    assert doc["findings"] == []
    (partition,) = [p for p in doc["partitions"] if p["topic"] == TOPIC]
    assert partition["segments"] == {FINISHED: 2}
    notes = [(n["kind"], n["topic"], n["partition"], n["message"].split()[1]) for n in doc["notes"]]
    assert notes == [("off_lineage", TOPIC, 0, branch)], doc["notes"]
    assert doc["notes"][0]["message"].endswith(
        "the leader's expiration keeps it (a later unclean election may need it) until the "
        "log start offset passes it; tierlog restore leaves it out"
    )

    # 2. The cluster is lost: brokers and disks (ZooKeeper's data stays in the old chroot).
    for broker in s.cluster.alive():
        s.kill(broker)
    for process in s.cluster.brokers.values():
        assert process.proc.poll() is not None
        shutil.rmtree(process.settings["log.dirs"])
    settings = tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    new = cluster_factory(3, settings)
    new.wait_topic("__remote_log_metadata", 3, 3, timeout=2 * DEADLINE_S)
    config = write_config(tmp_path / "restore.properties", new.brokers[1].settings)
    done = tierlog("restore", "--config", str(config), "--topic", TOPIC, "--json",
                   "--replication-factor", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (summary,) = json.loads(done.stdout)["topics"]
    (detail,) = summary["partition_details"]
    assert (summary["segments"], detail["left_out"], detail["next_offset"]) == (1, 1, 4), detail
    new.wait_topic(TOPIC, 1, 2, timeout=2 * DEADLINE_S)

    restored = Scenario(new, bucket)
    assert restored.read() == canonical_log
    assert [row["segment_id"] for row in metadata_segments(new.bootstrap, TOPIC)] == [canonical]
    # New records go right after the canonical log, in the epoch after its latest (LE-2).
    _, epoch, _ = restored.state()
    assert epoch > 2
    restored.produce([11, 12], 4)
    assert restored.read() == [*canonical_log, (4, epoch, value(11)), (5, epoch, value(12))]

    # A's copy, which restore did not register, is now an orphan: named, then repaired away.
    code, doc = verify(new.bootstrap, config, "--grace-period", "0")
    assert code == 1
    assert doc["findings"] and {f["kind"] for f in doc["findings"]} == {"orphan"}
    assert all(branch in f["key"] for f in doc["findings"]), doc["findings"]
    code, doc = verify(new.bootstrap, config, "--grace-period", "0", "--repair", "--yes")
    assert code == 0, doc
    code, doc = verify(new.bootstrap, config, "--grace-period", "0")
    assert (code, doc["findings"], doc["notes"]) == (0, [], [])
    assert restored.read() == [*canonical_log, (4, epoch, value(11)), (5, epoch, value(12))]
