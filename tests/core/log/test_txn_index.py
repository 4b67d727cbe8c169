"""TransactionIndex: Kafka's ``.txnindex`` bytes, the aborted-transaction search, recovery."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import CorruptIndexError, InvalidOffsetError
from core.log.txn_index import AbortedTxn, TransactionIndex

START = 100


def kafka_bytes(txns: list[AbortedTxn]) -> bytes:
    """Kafka's 34-byte entries: int16 version 0, then four int64."""
    return b"".join(
        struct.pack(">hqqqq", 0, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
        for t in txns
    )


def kafka_collect(
    txns: list[AbortedTxn], fetch_offset: int, upper_bound: int
) -> tuple[list[AbortedTxn], bool]:
    """Kafka's collectAbortedTxns, written as the plain loop over the file."""
    found = []
    for t in txns:
        if t.last_offset >= fetch_offset and t.first_offset < upper_bound:
            found.append(t)
        if t.last_stable_offset >= upper_bound:
            return found, True
    return found, False


TXNS = [
    AbortedTxn(producer_id=7, first_offset=90, last_offset=105, last_stable_offset=91),
    AbortedTxn(producer_id=8, first_offset=101, last_offset=110, last_stable_offset=106),
    AbortedTxn(producer_id=7, first_offset=120, last_offset=130, last_stable_offset=131),
]


def test_file_is_created_lazily_and_holds_kafkas_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, START)
    assert index.is_empty()
    assert index.collect_aborted_txns(0, 1_000) == ([], False)
    index.flush()
    index.close()
    assert not path.exists()

    for txn in TXNS:
        index.append(txn)
    index.flush()
    index.close()
    assert path.read_bytes() == kafka_bytes(TXNS)
    assert path.read_bytes()[:18].hex() == "0000" + "0000000000000007" + "000000000000005a"
    assert TransactionIndex(path, START).all_aborted_txns() == TXNS


def test_last_offset_must_increase(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", START)
    index.append(TXNS[1])
    for last in (110, 109):
        with pytest.raises(InvalidOffsetError, match="after one ending at 110"):
            index.append(AbortedTxn(9, 100, last, 100))
    index.close()
    # The rule also holds across a reopen (Kafka forgets the last offset there).
    reopened = TransactionIndex(tmp_path / "a.txnindex", START)
    with pytest.raises(InvalidOffsetError):
        reopened.append(TXNS[0])
    assert reopened.all_aborted_txns() == [TXNS[1]]


def test_aborted_txn_rejects_inverted_offsets() -> None:
    with pytest.raises(ValueError, match="above its last offset"):
        AbortedTxn(1, first_offset=10, last_offset=9, last_stable_offset=9)


txn_lists = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(1, 30), st.integers(-5, 40)),
    max_size=25,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=txn_lists,
    fetch_offset=st.integers(0, 600),
    length=st.integers(0, 200),
)
def test_collect_matches_kafkas_scan(
    tmp_path: Path, shape: list[tuple[int, int, int, int]], fetch_offset: int, length: int
) -> None:
    txns, last = [], 0
    for producer, span, gap, lso_delta in shape:
        last += gap
        first = max(0, last - span)
        txns.append(AbortedTxn(producer, first, last, max(0, last + 1 - lso_delta)))
    path = tmp_path / "h.txnindex"
    path.unlink(missing_ok=True)
    index = TransactionIndex(path, 0)
    for txn in txns:
        index.append(txn)
    upper_bound = fetch_offset + length
    assert index.collect_aborted_txns(fetch_offset, upper_bound) == kafka_collect(
        txns, fetch_offset, upper_bound
    )
    # A fresh instance reads the file and answers the same.
    index.close()
    assert TransactionIndex(path, 0).collect_aborted_txns(
        fetch_offset, upper_bound
    ) == kafka_collect(txns, fetch_offset, upper_bound)


def test_collect_stops_at_the_first_entry_past_the_range(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", START)
    for txn in TXNS:
        index.append(txn)
    assert index.collect_aborted_txns(100, 106) == ([TXNS[0], TXNS[1]], True)
    assert index.collect_aborted_txns(106, 125) == ([TXNS[1], TXNS[2]], True)
    assert index.collect_aborted_txns(111, 200) == ([TXNS[2]], False)


def test_truncate_and_reset(tmp_path: Path) -> None:
    path = tmp_path / "a.txnindex"
    index = TransactionIndex(path, START)
    for txn in TXNS:
        index.append(txn)
    index.truncate_to(200)  # nothing ends at or after 200
    assert index.all_aborted_txns() == TXNS
    index.truncate_to(110)  # drops the entry ending at 110 and everything after
    assert index.all_aborted_txns() == [TXNS[0]]
    assert path.read_bytes() == kafka_bytes([TXNS[0]])
    index.append(TXNS[2])  # appends continue after the truncated end
    assert path.read_bytes() == kafka_bytes([TXNS[0], TXNS[2]])
    index.reset()
    assert index.is_empty()
    assert path.read_bytes() == b""
    index.append(TXNS[0])
    assert TransactionIndex(path, START).all_aborted_txns() == [TXNS[0]]


def test_torn_trailing_entry_is_ignored_then_cut_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "a.txnindex"
    path.write_bytes(kafka_bytes([TXNS[0]]) + kafka_bytes([TXNS[1]])[:20])
    index = TransactionIndex(path, START)
    assert index.all_aborted_txns() == [TXNS[0]]
    with pytest.raises(CorruptIndexError, match="not a multiple of 34"):
        index.sanity_check()
    index.append(TXNS[1])
    index.close()
    assert path.read_bytes() == kafka_bytes([TXNS[0], TXNS[1]])
    TransactionIndex(path, START).sanity_check()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x00\x01\x02", "not a multiple of 34"),
        (struct.pack(">hqqqq", 1, 7, 90, 105, 91), "version 1"),
        (struct.pack(">hqqqq", 0, 7, 90, 99, 91), "ends before the start offset 100"),
        (struct.pack(">hqqqq", 0, 7, 120, 110, 91), "above its last offset"),
        (kafka_bytes([TXNS[1], TXNS[0]]), "do not strictly increase"),
    ],
)
def test_sanity_check_names_a_garbage_file(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError, match=reason) as error:
        TransactionIndex(path, START).sanity_check()
    assert str(path) in str(error.value)


def test_unreadable_entries_are_never_served(tmp_path: Path) -> None:
    path = tmp_path / "a.txnindex"
    path.write_bytes(kafka_bytes([TXNS[0]]) + struct.pack(">hqqqq", 3, 7, 106, 107, 108))
    index = TransactionIndex(path, START)
    with pytest.raises(CorruptIndexError, match="version 3"):
        index.collect_aborted_txns(0, 1_000)
    index.reset()  # what segment recovery does before rebuilding
    assert index.collect_aborted_txns(0, 1_000) == ([], False)


def test_rename_before_and_after_the_file_exists(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", START)
    index.rename_to(tmp_path / "a.txnindex.cleaned")  # no file yet: only the name changes
    index.append(TXNS[0])
    assert (tmp_path / "a.txnindex.cleaned").read_bytes() == kafka_bytes([TXNS[0]])
    index.rename_to(tmp_path / "a.txnindex.deleted")
    index.append(TXNS[1])  # the open descriptor follows the renamed file
    index.close()
    assert not (tmp_path / "a.txnindex.cleaned").exists()
    assert index.path == tmp_path / "a.txnindex.deleted"
    assert index.path.read_bytes() == kafka_bytes(TXNS[:2])
    assert index.delete_if_exists() is True
    assert index.delete_if_exists() is False
    assert index.is_empty()
