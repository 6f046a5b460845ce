"""One scenario of the real C++ RocketMQ client (PyPI ``rocketmq`` 0.4.4), run as its own process.

Run by :func:`tests.compat.cluster.run_client`: reads a JSON spec on stdin, prints one line
``SCENARIO-RESULT <json>`` on stdout and exits with ``os._exit`` (the native client's threads are
not joined at interpreter exit). A watchdog prints what was collected so far and exits with code 3
if the scenario overruns its ``deadline`` (a hung native call), so the caller still gets a report.

Actions (``spec["action"]``):

- ``produce``: send ``messages`` (each: ``topic``, ``body`` text or ``body_random`` byte count,
  optional ``keys``, ``tags``, ``props``, ``mode`` = ``sync`` | ``async`` | ``oneway`` | ``orderly`` | ``oneway_orderly`` with ``arg``,
  or ``batch`` with the batch's messages in ``items``) with one producer (``max_message_size``: the
  client's own body limit, 128 KiB unless given); report one result per message or batch (``ok``,
  ``status``, ``msg_id``, ``offset`` or ``error`` / ``error_type``).
- ``push``: a push consumer (``orderly`` or concurrent, clustering or ``broadcasting``) subscribed to ``topic`` with
  ``expression``; records every delivery (body, keys, tags, the ``props`` asked for, queue id and
  offset, reconsume count, message id, arrival time and thread), then sleeps up to ``sleep_ms``
  (random) and appends the body to ``completed`` (the order in which handlers finished). Raises (→ RECONSUME_LATER) on the
  first delivery of each body in ``fail_first``. Stops ``settle`` seconds after every body in
  ``expect`` was seen (and every body in ``expect_redelivered`` was seen again with a reconsume count
  > 0), or at ``deadline``; then shuts the consumer down (which commits offsets).
- ``pull``: a pull consumer reads every queue of ``topic`` from offset 0 until the broker reports no
  new message; records each message with its broker name, queue id and the ``props`` asked for.
- ``produce_stream``: one producer sends ``<prefix>-<n>`` bodies (also the keys) to ``topic`` with
  ``send_sync`` for ``duration`` seconds, ``interval_ms`` apart; reports one result per send (``body``,
  ``ok``, ``status`` or ``error``, ``t`` = wall-clock start, ``dt`` = seconds taken) and keeps
  ``progress_file`` (if given) at ``{"sent": n, "acked": n}`` (SEND_OK count) while it runs.
- ``push_until``: a concurrent push consumer of ``topic`` that records every delivery (``body``,
  ``queue_id``, ``queue_offset``, ``reconsume_times``, ``t`` = wall clock); it learns what to wait for
  from ``expect_file`` (a JSON list of bodies, written by the caller when it knows them) and stops
  ``settle`` seconds after it has seen all of them, or after ``wait`` seconds. With
  ``deliveries_file``, each delivery is also appended to it as a JSON line when it arrives (what a
  consumer that gets SIGKILLed received).

``produce`` and ``pull`` make their first request only after the client's heartbeat timer has made
its first pass (``quiet_start``, on unless the spec sets it false): a request racing that timer's
thread while it opens a broker connection fails inside the client; see
:func:`wait_first_heartbeat_pass`.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sys
import threading
import time
import traceback
from functools import partial
from typing import Any

from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.ffi import _CMessageQueue, _CPullStatus, dll

RESULT_PREFIX = "SCENARIO-RESULT "

_report_lock = threading.Lock()
_reported = False


def report(result: dict[str, Any], code: int = 0) -> None:
    """Print the report once and leave the process at once."""
    global _reported
    with _report_lock:
        if not _reported:
            _reported = True
            sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
            sys.stdout.flush()
            sys.stderr.flush()
    os._exit(code)


def start_watchdog(deadline: float, partial: dict[str, Any]) -> None:
    def fire() -> None:
        partial["watchdog"] = f"scenario overran its deadline of {deadline} s"
        report(partial, 3)

    timer = threading.Timer(deadline, fire)
    timer.daemon = True
    timer.start()


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _error(e: BaseException) -> dict[str, Any]:
    return {"ok": False, "error_type": type(e).__name__, "error": str(e)}


# --- produce --------------------------------------------------------------------------------------


def _message(m: dict[str, Any]) -> Message:
    """A C++ client message from a scenario entry (``topic``, ``body`` or ``body_random``, ``keys``,
    ``tags``, ``props``)."""
    msg = Message(m["topic"])
    if "body_random" in m:
        data = os.urandom(m["body_random"])
        if dll.SetByteMessageBody(msg._handle, data, len(data)) != 0:
            raise RuntimeError("SetByteMessageBody failed")
    else:
        msg.set_body(m["body"].encode())
    if m.get("keys"):
        msg.set_keys(m["keys"])
    if m.get("tags"):
        msg.set_tags(m["tags"])
    for k, v in m.get("props", {}).items():
        msg.set_property(k, v)
    return msg


def produce(spec: dict[str, Any], result: dict[str, Any]) -> None:
    producer = Producer(
        spec.get("group", "PG_COMPAT"),
        timeout=spec.get("timeout_ms", 5000),
        max_message_size=spec.get("max_message_size"),
    )
    producer.set_namesrv_addr(spec["namesrv"])
    producer.start()
    results: list[dict[str, Any]] = result.setdefault("results", [])
    pending: list[dict[str, Any]] = []
    keep: list[Message] = []
    try:
        if spec.get("quiet_start", True):
            result["quiet_after"] = wait_first_heartbeat_pass(passes_logged=2)
        for m in spec["messages"]:
            mode = m.get("mode", "sync")
            if mode == "batch":
                items = [_message(item) for item in m["items"]]
                keep.extend(items)
                try:
                    r = producer.send_batch(items)
                    results.append(
                        {"ok": True, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset}
                    )
                except Exception as e:
                    results.append(_error(e))
                continue
            msg = _message(m)
            keep.append(msg)
            try:
                if mode == "async":
                    slot: dict[str, Any] = {"ok": False, "error": "no callback yet"}
                    results.append(slot)
                    pending.append(slot)
                    producer.send_async(msg, partial(_async_ok, slot), partial(_async_failed, slot))
                    continue
                if mode == "sync":
                    r = producer.send_sync(msg)
                elif mode == "orderly":
                    r = producer.send_orderly(msg, int(m["arg"]))
                elif mode == "oneway":
                    producer.send_oneway(msg)
                    results.append({"ok": True})
                    continue
                elif mode == "oneway_orderly":
                    producer.send_oneway_orderly(msg, int(m["arg"]))
                    results.append({"ok": True})
                    continue
                else:
                    raise ValueError(f"unknown mode {mode}")
                results.append({"ok": True, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
            except Exception as e:
                results.append(_error(e))
        # async sends: their callbacks (on the client's threads) fill their slots
        deadline = time.monotonic() + spec.get("timeout_ms", 5000) / 1000 + 5
        while any(not slot.get("done") for slot in pending) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        producer.shutdown()


def _async_ok(slot: dict[str, Any], r: Any) -> None:
    slot.update(ok=True, status=int(r.status), msg_id=r.msg_id, offset=r.offset, done=True)
    slot.pop("error", None)


def _async_failed(slot: dict[str, Any], e: BaseException) -> None:
    slot.update(_error(e), done=True)


#: What the client logs when a heartbeat pass finds no broker to send to.
_EMPTY_HEARTBEAT = "sendheartbeat brokeradd is empty"


def wait_first_heartbeat_pass(*, passes_logged: int, deadline: float = 10.0) -> float:
    """Wait until the client's heartbeat timer has run once; returns the seconds waited.

    Why: the client opens a broker connection from whichever thread needs it first. Its heartbeat
    timer fires 10 ms after ``start()`` and then every 30 s, and connects to every broker of the
    routes known by then. A request racing that thread fails at once inside the client: no transport
    while the other thread's connect to the same broker is pending, and none for *any* broker while
    that thread holds the transport table's lock to open a connection (the client's 3 s try-lock gave
    up immediately in these runs). Then ``send_orderly`` retries on a queue of *another* broker (one
    message of a key leaves its queue) or fails, ``send_sync`` may fail all its attempts, and a pull
    returns no result (rocketmq-client-cpp 1.2.4: ``TcpRemotingClient::CreateTransport``,
    ``DefaultMQProducer::sendAutoRetrySelectImpl``, ``TopicPublishInfo::selectOneMessageQueue``).
    Before the first request no route is known, so that first pass finds no broker and logs
    :data:`_EMPTY_HEARTBEAT`; after it, the requesting thread opens every broker connection itself.
    ``passes_logged``: how many such lines mark it (a producer's ``start()`` makes one pass of its
    own first, a pull consumer's does not).
    """
    path = os.path.expanduser(f"~/logs/rocketmq-cpp/{os.getpid()}_rocketmq-cpp.log.0")
    t0 = time.monotonic()
    while True:
        try:
            with open(path, errors="replace") as f:
                if f.read().count(_EMPTY_HEARTBEAT) >= passes_logged:
                    return round(time.monotonic() - t0, 3)
        except FileNotFoundError:
            pass
        if time.monotonic() - t0 > deadline:
            raise RuntimeError(
                f"the client logged {_EMPTY_HEARTBEAT!r} fewer than {passes_logged} times in {path} within {deadline} s"
            )
        time.sleep(0.005)


# --- push consumer --------------------------------------------------------------------------------


def push(spec: dict[str, Any], result: dict[str, Any]) -> None:
    received: list[dict[str, Any]] = result.setdefault("received", [])
    completed: list[str] = result.setdefault("completed", [])
    lock = threading.Lock()
    done = threading.Event()
    expect = set(spec.get("expect", []))
    expect_redelivered = set(spec.get("expect_redelivered", []))
    fail_first = set(spec.get("fail_first", []))
    failed_once: set[str] = set()
    prop_names: list[str] = spec.get("props", [])
    sleep_s = float(spec.get("sleep_ms", 0)) / 1000
    t0 = time.monotonic()

    def check_done() -> None:
        if not expect and not expect_redelivered:
            return  # nothing to wait for: listen for ``wait`` seconds
        seen = {r["body"] for r in received}
        again = {r["body"] for r in received if r["reconsume_times"] > 0}
        if expect <= seen and expect_redelivered <= again:
            done.set()

    def on_message(msg: RecvMessage) -> None:
        body = _text(msg.body) or ""
        record = {
            "body": body,
            "keys": _text(msg.keys),
            "tags": _text(msg.tags),
            "topic": msg.topic,
            "id": msg.id,
            "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset,
            "reconsume_times": msg.reconsume_times,
            "props": {name: _text(msg.get_property(name)) for name in prop_names},
            "t": round(time.monotonic() - t0, 3),
            "thread": threading.get_ident(),
        }
        with lock:
            received.append(record)
            raise_now = body in fail_first and body not in failed_once
            if raise_now:
                failed_once.add(body)
                record["failed"] = True
            check_done()
        if raise_now:
            raise RuntimeError(f"reconsume later: {body}")
        if sleep_s:
            time.sleep(random.uniform(0, sleep_s))
        with lock:
            completed.append(body)

    model = MessageModel.BROADCASTING if spec.get("broadcasting") else MessageModel.CLUSTERING
    consumer = PushConsumer(spec["group"], orderly=bool(spec.get("orderly", False)), message_model=model)
    consumer.set_namesrv_addr(spec["namesrv"])
    if spec.get("instance_name"):
        consumer.set_instance_name(spec["instance_name"])
    if spec.get("thread_count"):
        consumer.set_thread_count(int(spec["thread_count"]))
    consumer.subscribe(spec["topic"], on_message, spec.get("expression", "*"))
    consumer.start()
    result["started"] = round(time.monotonic() - t0, 3)
    wait = float(spec.get("wait", 30.0))
    if not expect and not expect_redelivered:
        done.wait(wait)  # nothing to wait for: just listen for ``wait`` seconds
    elif done.wait(wait):
        result["complete_after"] = round(time.monotonic() - t0, 3)
        time.sleep(float(spec.get("settle", 0.0)))
    else:
        result["timed_out"] = True
    t_stop = time.monotonic()
    consumer.shutdown()
    result["shutdown_seconds"] = round(time.monotonic() - t_stop, 3)
    with lock:
        result["received"] = list(received)
        result["completed"] = list(completed)


# --- pull consumer --------------------------------------------------------------------------------


def pull(spec: dict[str, Any], result: dict[str, Any]) -> None:
    """Like ``PullConsumer.pull`` (same native calls), but records the broker of each queue and
    reports a broker timeout instead of re-pulling the same offset forever."""
    consumer = PullConsumer(spec["group"])
    consumer.set_namesrv_addr(spec["namesrv"])
    consumer.start()
    if spec.get("quiet_start", True):
        result["quiet_after"] = wait_first_heartbeat_pass(passes_logged=1)
    messages: list[dict[str, Any]] = result.setdefault("messages", [])
    queues: list[dict[str, Any]] = result.setdefault("queues", [])
    expression = spec.get("expression", "*").encode()
    prop_names: list[str] = spec.get("props", [])
    mqs = ctypes.POINTER(_CMessageQueue)()
    size = ctypes.c_int()
    status = dll.FetchSubscriptionMessageQueues(
        consumer._handle, spec["topic"].encode(), ctypes.pointer(mqs), ctypes.pointer(size)
    )
    if status != 0:
        result["error"] = f"FetchSubscriptionMessageQueues returned {status}: {dll.GetLatestErrorMessage()!r}"
        consumer.shutdown()
        return
    try:
        for i in range(size.value):
            mq = mqs[i]
            broker = mq.brokerName.decode()
            q: dict[str, Any] = {"broker": broker, "queue_id": mq.queueId, "statuses": []}
            queues.append(q)
            offset = 0
            for _ in range(10_000):
                res = dll.Pull(consumer._handle, ctypes.pointer(mq), expression, offset, 32)
                st = _CPullStatus(res.pullStatus).name
                q["statuses"].append(st)
                try:
                    if res.pullStatus == _CPullStatus.FOUND:
                        for j in range(res.size):
                            m = RecvMessage(res.msgFoundList[j])
                            messages.append(
                                {
                                    "broker": broker,
                                    "queue_id": mq.queueId,
                                    "msg_queue_id": m.queue_id,
                                    "queue_offset": m.queue_offset,
                                    "body": _text(m.body),
                                    "keys": _text(m.keys),
                                    "tags": _text(m.tags),
                                    "topic": m.topic,
                                    "reconsume_times": m.reconsume_times,
                                    "props": {n: _text(m.get_property(n)) for n in prop_names},
                                }
                            )
                    if res.pullStatus == _CPullStatus.BROKER_TIMEOUT:
                        q["error"] = "BROKER_TIMEOUT"
                        break
                    offset = res.nextBeginOffset
                    if res.pullStatus == _CPullStatus.NO_NEW_MSG:
                        break
                finally:
                    dll.ReleasePullResult(res)
            q["next_offset"] = offset
    finally:
        dll.ReleaseSubscriptionMessageQueue(mqs)
    consumer.shutdown()


# --- streams (failover tests) -----------------------------------------------------------------------


def _write_json(path: str, data: object) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def produce_stream(spec: dict[str, Any], result: dict[str, Any]) -> None:
    producer = Producer(spec.get("group", "PG_COMPAT_STREAM"), timeout=spec.get("timeout_ms", 3000))
    producer.set_namesrv_addr(spec["namesrv"])
    producer.start()
    results: list[dict[str, Any]] = result.setdefault("results", [])
    progress = spec.get("progress_file")
    prefix = spec.get("prefix", "s")
    interval = float(spec.get("interval_ms", 50)) / 1000
    end = time.monotonic() + float(spec["duration"])
    acked = 0
    try:
        n = 0
        while time.monotonic() < end:
            body = f"{prefix}-{n:06d}"
            msg = Message(spec["topic"])
            msg.set_body(body.encode())
            msg.set_keys(body)
            t = time.time()
            try:
                r = producer.send_sync(msg)
                record = {"body": body, "ok": True, "status": int(r.status)}
                acked += int(r.status) == 0
            except Exception as e:
                record = {"body": body, **_error(e)}
            record.update(t=round(t, 3), dt=round(time.time() - t, 3))
            results.append(record)
            n += 1
            if progress:
                _write_json(progress, {"sent": n, "acked": acked})
            time.sleep(interval)
    finally:
        producer.shutdown()


def push_until(spec: dict[str, Any], result: dict[str, Any]) -> None:
    received: list[dict[str, Any]] = result.setdefault("received", [])
    lock = threading.Lock()
    path = spec.get("deliveries_file")
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None

    def on_message(msg: RecvMessage) -> None:
        record = {
            "body": _text(msg.body) or "",
            "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset,
            "reconsume_times": msg.reconsume_times,
            "t": round(time.time(), 3),
        }
        with lock:
            received.append(record)
            if out is not None:
                os.write(out, (json.dumps(record) + "\n").encode())

    consumer = PushConsumer(spec["group"], orderly=bool(spec.get("orderly", False)))
    consumer.set_namesrv_addr(spec["namesrv"])
    consumer.subscribe(spec["topic"], on_message, spec.get("expression", "*"))
    consumer.start()
    end = time.monotonic() + float(spec.get("wait", 60.0))
    expect: set[str] | None = None
    while time.monotonic() < end:
        if expect is None and os.path.exists(spec["expect_file"]):
            with open(spec["expect_file"]) as f:
                expect = set(json.load(f))
        if expect is not None:
            with lock:
                seen = {r["body"] for r in received}
            if expect <= seen:
                result["complete_at"] = round(time.time(), 3)
                time.sleep(float(spec.get("settle", 0.0)))
                break
        time.sleep(0.1)
    else:
        result["timed_out"] = True
    consumer.shutdown()
    with lock:
        result["received"] = list(received)


ACTIONS = {
    "produce": produce,
    "push": push,
    "pull": pull,
    "produce_stream": produce_stream,
    "push_until": push_until,
}


def main() -> None:
    spec = json.loads(sys.stdin.read())
    result: dict[str, Any] = {"action": spec["action"], "pid": os.getpid()}
    start_watchdog(float(spec.get("deadline", 50.0)), result)
    try:
        ACTIONS[spec["action"]](spec, result)
    except Exception as e:
        result["exception"] = _error(e)
        result["traceback"] = traceback.format_exc()
    report(result)


if __name__ == "__main__":
    main()
