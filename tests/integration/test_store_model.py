"""Property test: random sequences of append / batch append (decoded, hinted, or encoded for the
store's next slot: ``placed``, sometimes with a slot gone stale) / read / truncate / restart / crash /
key query against a plain in-memory model of the log; every read must equal the model.

Small files (4 KiB commit-log files, 8-unit consume-queue files) so that sequences roll often.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoting.protocol.message import decode_message, tags_hash_code
from store.message_store import DefaultMessageStore
from tests.integration.storekit import STORE_HOST, encode, place_batch, put, small_config

QUEUES = 3


@dataclass
class Msg:
    phys: int
    queue: int
    qo: int
    body: bytes
    key: str


@dataclass
class Model:
    msgs: list[Msg] = field(default_factory=list)

    def queue(self, q: int) -> list[Msg]:
        return [m for m in self.msgs if m.queue == q]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, QUEUES - 1), st.integers(1, 1500)),
        st.tuples(st.just("batch"), st.integers(0, QUEUES - 1), st.integers(1, 4), st.integers(1, 600)),
        st.tuples(
            st.just("placed"),
            st.integers(0, QUEUES - 1),
            st.integers(1, 4),
            st.integers(1, 600),
            st.booleans(),
        ),
        st.tuples(st.just("read"), st.integers(0, QUEUES - 1), st.floats(0, 1.2), st.integers(1, 40)),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("query"), st.floats(0, 1)),
        st.just(("restart",)),
        st.just(("crash",)),
    ),
    min_size=1,
    max_size=40,
)


async def _open(root: str) -> DefaultMessageStore:
    cfg = small_config(
        root, mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=8 * 20, maxMessageSize=2048
    )
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    return store


def _check_read(store: DefaultMessageStore, model: Model, q: int, offset: int, count: int) -> None:
    expected = model.queue(q)
    res = store.get_message("g", "T", q, offset, count)
    assert res is not None
    got = [decode_message(v) for v in res.message_views]
    if offset >= len(expected):
        assert got == []
        assert res.max_offset == len(expected)
    else:
        assert 1 <= len(got) <= count
        want = expected[offset : offset + len(got)]
        assert [m.body for m in got] == [m.body for m in want]
        assert [m.physical_offset for m in got] == [m.phys for m in want]
        assert [m.queue_offset for m in got] == [m.qo for m in want]
        assert res.message_queue_offsets == [m.qo for m in want]
    res.release()


def _check_unit_places(store: DefaultMessageStore) -> None:
    """What the plain send path relies on instead of reading each queue's file: ``stage_limit``
    is the queue offset where ``cur``'s reserved blocks end, and the next unit (of ``max_offset``)
    goes right after the written and staged ones."""
    for cq in store.queues:
        cur = cq.cur
        if cur is None:
            assert cq.stage_limit == 0
            continue
        assert cq.stage_limit * 20 == cur.file_from_offset + cur.reserved
        assert cq.max_offset * 20 == cur.file_from_offset + cur.wrote_position + cq.staged


async def _run(root: str, sequence: list[tuple]) -> None:  # type: ignore[type-arg]
    model = Model()
    store = await _open(root)
    uid = 0
    try:
        for op in sequence:
            kind = op[0]
            if kind == "put":
                _, q, size = op
                body = bytes([uid % 251]) * size
                res = await put(store, "T", q, body, keys=f"K{uid}")
                assert res.is_ok
                assert res.logics_offset == len(model.queue(q))
                model.msgs.append(Msg(res.wrote_offset, q, res.logics_offset, body, f"K{uid}"))
                uid += 1
            elif kind == "batch":
                _, q, n, size = op
                block = bytearray()
                batch = []
                # batches of 4 carry a UNIQ_KEY per record too (the batch path's all-UNIQ_KEY index queueing)
                uniqs = [f"U{uid + j}" if n == 4 else None for j in range(n)]
                for uniq in uniqs:
                    body = bytes([uid % 251]) * size
                    block += encode("T", q, body, keys=f"K{uid}", uniq=uniq)
                    batch.append((body, f"K{uid}"))
                    uid += 1
                # odd-sized batches go without dispatch hints (general path), even ones with them
                # (the send path's plain one-pass path)
                hints = (
                    [(0, key, uniq) for (_, key), uniq in zip(batch, uniqs, strict=True)]
                    if n % 2 == 0
                    else None
                )
                res = await store.put_messages(block, "T", q, sys_flag=0, hints=hints)
                assert res.is_ok
                assert res.offsets is not None
                base_qo = len(model.queue(q))
                for j, ((body, key), phys) in enumerate(zip(batch, res.offsets, strict=True)):
                    model.msgs.append(Msg(phys, q, base_qo + j, body, key))
            elif kind == "placed":
                # the broker's batch encoder: records encoded for the slot the store announced; a
                # stale slot (a message put in between) must be ignored, the records patched anew
                _, q, n, size, stale = op
                slot = store.plain_batch_slot("T", q)
                if stale:
                    body = bytes([uid % 251]) * 10
                    res = await put(store, "T", (q + 1) % QUEUES, body, keys=f"K{uid}")
                    assert res.is_ok
                    model.msgs.append(
                        Msg(res.wrote_offset, (q + 1) % QUEUES, res.logics_offset, body, f"K{uid}")
                    )
                    uid += 1
                block = bytearray()
                batch = []
                hints = []
                for _j in range(n):
                    body = bytes([uid % 251]) * size
                    tags = f"t{uid % 3}"
                    block += encode("T", q, body, tags=tags, keys=f"K{uid}", uniq=f"U{uid}")
                    hints.append((tags_hash_code(tags), f"K{uid}", f"U{uid}"))
                    batch.append((body, f"K{uid}"))
                    uid += 1
                placed = place_batch(block, hints, slot) if slot is not None else None
                res = await store.put_messages(block, "T", q, sys_flag=0, hints=hints, placed=placed)
                assert res.is_ok
                assert res.offsets is not None
                base_qo = len(model.queue(q))
                assert res.logics_offset == base_qo
                for j, ((body, key), phys) in enumerate(zip(batch, res.offsets, strict=True)):
                    model.msgs.append(Msg(phys, q, base_qo + j, body, key))
            elif kind == "read":
                _, q, frac, count = op
                _check_read(store, model, q, int(frac * len(model.queue(q))), count)
            elif kind == "truncate":
                k = int(op[1] * len(model.msgs))
                cut = model.msgs[k].phys if k < len(model.msgs) else store.max_phy_offset
                if cut >= store.min_phy_offset:
                    await store.truncate_to(cut)
                    model.msgs = model.msgs[:k]
                    assert store.max_phy_offset == cut
            elif kind == "query" and model.msgs:
                m = model.msgs[min(int(op[1] * len(model.msgs)), len(model.msgs) - 1)]
                found = store.query_message("T", m.key, 4, 0, 2**62)
                assert found.phy_offsets == [m.phys]
                found.release()
            elif kind == "restart":
                await store.shutdown()
                store = await _open(root)
            elif kind == "crash":
                store.abandon()
                store = await _open(root)
            _check_unit_places(store)
        for q in range(QUEUES):
            assert store.get_max_offset_in_queue("T", q) == len(model.queue(q))
            for off in range(0, len(model.queue(q)), 7):
                _check_read(store, model, q, off, 7)
    finally:
        await store.shutdown()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=ops)
def test_store_matches_an_in_memory_model(sequence: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory(prefix="store-model-") as root:
        trio.run(_run, root, sequence)
