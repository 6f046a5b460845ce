"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

Upstream: ``SendMessageProcessor`` / ``AbstractSendMessageProcessor``. Checks run in upstream's
order (writability, topic name, forbidden topics, topic config or auto-create, queue id); the
message is encoded once into the stored format and appended; the store result maps to the
upstream response codes (:mod:`broker.send_response`). The C++ client sends batches as code 10
with ``batch:"1"``. Properties in the form clients send them, and batch bodies, take the
shortcuts of :mod:`broker.send_records`, which store the same bytes as the general path here.
"""

from __future__ import annotations

import logging
import random
from time import monotonic_ns
from typing import TYPE_CHECKING

import msgspec

from broker.send_records import (
    NO_SLOT,
    BatchHint,
    BatchRecordEncoder,
    ClientProperties,
    PlacedBatch,
    encode_single,
    host_port,
)
from broker.send_response import STATUS_CODES, placed_response, send_response
from broker.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    dlq_topic,
    retry_topic,
    validate_topic,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import decode_header
from remoting.protocol.broker import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageRequestHeaderV2AsV1,
)
from remoting.protocol.common import PermName, TopicConfig
from remoting.protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageFormatError,
    append_record,
    decode_message,
    encode_message,
    host_bytes,
    parse_host,
    parse_properties,
    properties_to_string,
    split_batch_body,
    tags_hash_code,
    topic_field,
    transaction_type,
)
from remoting.repeats import RepeatedLog
from store.config import BrokerRole
from store.results import PutMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController

#: Clients at or above this version may set maxReconsumeTimes in the request (V3_4_9).
V3_4_9 = 121

# Enum members bound once: attribute access on an enum class costs ~60 ns each on the hot path.
_SEND_MESSAGE = RequestCode.SEND_MESSAGE
_SEND_BATCH_MESSAGE = RequestCode.SEND_BATCH_MESSAGE
_PUT_OK = PutMessageStatus.PUT_OK
_SLAVE = BrokerRole.SLAVE
_PERM_WRITE = PermName.PERM_WRITE

#: A decoded send header: V1 names either way.
SendHeader = SendMessageRequestHeader | SendMessageRequestHeaderV2AsV1


def decode_send_header(cmd: RemotingCommand) -> SendHeader:
    """The send header of SEND_MESSAGE (V1 names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (V2).

    Straight ``msgspec.convert`` (what :func:`decode_header` does for these classes); when that
    fails -- an empty value for a non-string field, which :func:`decode_header` reads as absent,
    or a bad one -- the request goes through :func:`decode_header`, which raises its HeaderError
    with the field named as on the wire. An empty value of a string field is kept either way."""
    ext = cmd.ext_fields
    v1 = cmd.code == _SEND_MESSAGE
    if ext:
        try:
            return msgspec.convert(
                ext, SendMessageRequestHeader if v1 else SendMessageRequestHeaderV2AsV1, strict=False
            )
        except msgspec.ValidationError:
            pass
    if v1:
        return decode_header(cmd, SendMessageRequestHeader)
    return decode_header(cmd, SendMessageRequestHeaderV2).to_v1()


#: Cached per-connection / per-topic values stay below this many entries (cleared when full).
_CACHE_LIMIT = 4096

log = logging.getLogger("broker.send")


def _code_name(code: int) -> str:
    try:
        return f"{ResponseCode(code).name} ({code})"
    except ValueError:
        return str(code)


class SendProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.cfg = broker.broker_config
        self.store_cfg = broker.store_config
        self.delay_levels = broker.store_config.delay_levels_ms
        self._delay_names = broker.store_config.messageDelayLevel.split()
        #: "parked, not delivered" warnings for delayed messages (no schedule service yet)
        self._parked = RepeatedLog(log)
        self._rng = random.Random()
        self._ext_ok = {"MSG_REGION": self.cfg.regionId, "TRACE_ON": "true" if self.cfg.traceOn else "false"}
        #: topic names that passed validate_topic and are not forbidden for sends
        self._send_topics: set[str] = set()
        #: remote address -> (IP bytes, port) for the BORNHOST field
        self._born_hosts: dict[str, tuple[bytes, int]] = {}
        self._store_addr = ""
        self._store_host_bytes: tuple[bytes, int] = (b"", 0)
        #: remote address -> BORNHOST field (IP bytes + port), for client-form sends
        self._born_fields: dict[str, bytes] = {}
        self._store_field = b""
        self._client_props = ClientProperties()
        self._batch_encoder = BatchRecordEncoder(self._complete_properties, self._client_props)
        self._refusals = RepeatedLog(log)

    # --- helpers ---

    def _error(self, cmd: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        # logged: the official C++ client reports every refused send as "No route info of this
        # topic" and keeps the broker's reason in its own log file
        fields = cmd.ext_fields or {}
        topic = fields.get("topic") or fields.get("b")
        what = (
            f"send to {topic} refused, {_code_name(code)}: {remark}"
            if topic
            else f"send-back refused, {_code_name(code)}: {remark}"
        )
        # once per topic and code, whatever the remark's numbers: a client repeating a bad send
        # with other sizes does not flood the log
        self._refusals.log(f"{code} {topic}", logging.WARNING, what, whatever_text=True)
        resp = cmd.response(code, remark)
        resp.ext_fields = dict(self._ext_ok)
        return resp

    def _store_host(self) -> tuple[str, int]:
        return self.broker.store.store_host

    def _hosts(self, remote: str) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
        """(born host, store host) as :func:`encode_record` takes them, cached."""
        born = self._born_hosts.get(remote)
        if born is None:
            born = host_bytes(remote)
            if len(self._born_hosts) >= _CACHE_LIMIT:
                self._born_hosts.clear()
            self._born_hosts[remote] = born
        addr = self.broker.addr
        if addr != self._store_addr:
            self._store_host_bytes = host_bytes(self.broker.store.store_host)
            self._store_field = host_port(self._store_host_bytes)
            self._store_addr = addr
        return born, self._store_host_bytes

    def _host_fields(self, remote: str) -> tuple[bytes, bytes]:
        """(BORNHOST, STOREHOST) as :func:`encode_single` takes them, cached."""
        born = self._born_fields.get(remote)
        if born is None or self.broker.addr != self._store_addr:
            born_host, _ = self._hosts(remote)
            born = host_port(born_host)
            if len(self._born_fields) >= _CACHE_LIMIT:
                self._born_fields.clear()
            self._born_fields[remote] = born
        return born, self._store_field

    def _check(
        self, cmd: RemotingCommand, h: SendHeader, remote: str
    ) -> tuple[TopicConfig | None, RemotingCommand | None]:
        """Upstream ``msgCheck``: the topic config to write to, or an error response."""
        b = self.broker
        topic = h.topic
        if (
            topic in self._send_topics
            and self.cfg.brokerPermission & _PERM_WRITE
            and b.store_config.brokerRole != _SLAVE
        ):
            # the common case in upstream's order, minus the name checks this topic passed before
            config = b.topics.table.get(topic)
            if config is not None and config.perm & _PERM_WRITE and h.queueId < config.writeQueueNums:
                return config, None
        if not PermName.is_writeable(self.cfg.brokerPermission):
            return None, self._error(
                cmd,
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.cfg.brokerIP1}] sending message is forbidden",
            )
        if b.is_slave:
            return None, self._error(
                cmd,
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{b.name}] is a slave ({b.role.value}) and does not accept writes; send to the master of {self.cfg.brokerName}",
            )
        why = validate_topic(h.topic)
        if why is not None:
            return None, self._error(cmd, ResponseCode.INVALID_PARAMETER, why)
        if h.topic in NOT_ALLOWED_SEND_TOPICS:
            return None, self._error(
                cmd, ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden."
            )
        if len(self._send_topics) >= _CACHE_LIMIT:
            self._send_topics.clear()
        self._send_topics.add(h.topic)
        config = b.topics.get(h.topic)
        if config is None:
            if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                config = b.topics.create_system_like(h.topic, 1, PermName.PERM_READ | PermName.PERM_WRITE)
            else:
                config = b.topics.create_in_send(h.topic, h.defaultTopic or "TBW102", h.defaultTopicQueueNums)
            if config is None:
                return None, self._error(
                    cmd,
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{h.topic}] not exist, apply first please! (no template {h.defaultTopic} to auto-create it from, "
                    f"autoCreateTopicEnable={self.cfg.autoCreateTopicEnable}) from {remote}",
                )
        if not PermName.is_writeable(config.perm):
            return None, self._error(
                cmd, ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden"
            )
        queue_max = max(config.writeQueueNums, config.readQueueNums)
        if h.queueId >= queue_max:
            return None, self._error(
                cmd,
                ResponseCode.INVALID_PARAMETER,
                f"request queueId[{h.queueId}] is illegal, topic:[{h.topic}] topicConfig.writeQueueNums:"
                f"[{config.writeQueueNums}] readQueueNums:[{config.readQueueNums}] producer:[{remote}]",
            )
        return config, None

    def _complete_properties(self, props_s: str) -> tuple[dict[str, str], str | None, str]:
        """Parse a client's properties and add CLUSTER (and UNIQ_KEY when missing or empty).

        Returns the map, the pairs to append to ``props_s`` -- or None when the stored string must
        be rebuilt from the map -- and the unique key. Upstream parses, adds and writes the string
        out again; when every pair was well formed and no key repeats, that equals the client's
        string with the new pairs appended, which is cheaper.
        """
        props = parse_properties(props_s)
        tail: str | None = (
            "" if not props_s or (props_s[-1] == "\x02" and len(props) == props_s.count("\x02")) else None
        )
        cluster = self.cfg.brokerClusterName
        if tail is not None and PROPERTY_CLUSTER not in props:
            tail += f"{PROPERTY_CLUSTER}\x01{cluster}\x02"
        else:
            tail = None
        props[PROPERTY_CLUSTER] = cluster
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if not uniq:
            uniq = self.broker.uniq_ids.create()
            if tail is not None and PROPERTY_UNIQ_KEY not in props:
                tail += f"{PROPERTY_UNIQ_KEY}\x01{uniq}\x02"
            else:
                tail = None
            props[PROPERTY_UNIQ_KEY] = uniq
        return props, tail, uniq

    def _pick_queue(self, config: TopicConfig, queue_id: int) -> int:
        if queue_id < 0:
            return self._rng.randrange(max(1, config.writeQueueNums))
        return queue_id

    def _park_delay(self, topic: str, queue_id: int, props: dict[str, str], sys_flag: int) -> tuple[str, int]:
        """Upstream ``CommitLog.asyncPutMessage``: a message with DELAY > 0 is parked in SCHEDULE_TOPIC_XXXX."""
        level_s = props.get(PROPERTY_DELAY)
        if not level_s or transaction_type(sys_flag) not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return topic, queue_id
        try:
            level = int(level_s)
        except ValueError:
            return topic, queue_id
        if level <= 0:
            return topic, queue_id
        level = min(level, len(self.delay_levels))
        props[PROPERTY_DELAY] = str(level)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QID] = str(queue_id)
        self._warn_parked(topic, level)
        return SCHEDULE_TOPIC, level - 1

    def _warn_parked(self, topic: str, level: int) -> None:
        """Say, once per topic every 30 s, that a delayed message was stored but will not come out:
        the sender got SEND_OK (the message is kept, as upstream keeps it) and a consumer waiting
        for it would otherwise wait without a word."""
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            what = f"a message to consume again by group {topic[len(RETRY_GROUP_TOPIC_PREFIX) :]} (reconsume later)"
        else:
            what = f"a message to {topic}"
        self._parked.log(
            topic,
            logging.WARNING,
            f"{what} with delay level {level} ({self._delay_names[level - 1]}) is stored in "
            f"{SCHEDULE_TOPIC} queue {level - 1} and will not be delivered: delayed delivery (the "
            "schedule service) is not built yet -- see the README's feature table",
            whatever_text=True,
        )

    def _redirect_retry(
        self,
        h: SendHeader,
        cmd: RemotingCommand,
        topic: str,
        queue_id: int,
        props: dict[str, str],
    ) -> tuple[str, int] | RemotingCommand:
        """Upstream ``handleRetryAndDLQ``: a retry message past its max reconsume times goes to the DLQ."""
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return topic, queue_id
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group_config = self.broker.groups.find(group)
        if group_config is None:
            return self._error(
                cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        max_times = group_config.retryMaxTimes
        if cmd.version >= V3_4_9 and h.maxReconsumeTimes is not None:
            max_times = h.maxReconsumeTimes
        reconsume = h.reconsumeTimes or 0
        # a group holding queue locks consumes orderly: its retry goes to the DLQ at once (upstream)
        if reconsume > max_times or self.broker.locks.holds_any(group, self.broker.liveness_ms()):
            dlq = self.broker.topics.create_system_like(
                dlq_topic(group), 1, PermName.PERM_READ | PermName.PERM_WRITE
            )
            props[PROPERTY_DELAY] = "-1"
            return dlq.topicName, 0
        return topic, queue_id

    # --- handlers ---

    async def send(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_send_header(cmd)
        remote = ctx.connection.remote_address
        config, error = self._check(cmd, h, remote)
        if error is not None:
            return error
        assert config is not None
        b = self.broker
        if b.unrouted:
            # created by this send (or just before) -- the topic, or the dead-letter topic of a
            # retry topic's message past its reconsume times: durable and routed when the answer
            # comes, as upstream answers -- but stored first, so that sends pipelined behind it,
            # which all wait for the same routing, are stored in the order they came, not in the
            # order they wake up
            topic = config.topicName
            retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            if retry or topic in b.unrouted:
                response = await self._send(cmd, h, config, remote)
                dlq = (dlq_topic(topic[len(RETRY_GROUP_TOPIC_PREFIX) :]),) if retry else ()
                await self._created_topics_settled(topic, *dlq)
                return response
        return await self._send(cmd, h, config, remote)

    async def _created_topics_settled(self, *topics: str) -> None:
        """Of ``topics``, those just created (not yet routed): written to the topics file and
        routed by the name servers before the request is answered -- upstream's
        ``createTopicInSendMessageMethod`` / ``createTopicInSendMessageBackMethod`` persist and
        register inside the request. Without it, a crash right after the answer could lose the
        config of a topic whose messages it stored (readable again only once it is re-created)."""
        b = self.broker
        created = [t for t in topics if t in b.unrouted]
        if created:
            await b.topics_file.persist()
            await b.wait_routed(*created)

    async def _send(
        self, cmd: RemotingCommand, h: SendHeader, config: TopicConfig, remote: str
    ) -> RemotingCommand:
        """:meth:`send` of a checked request."""
        if h.batch or cmd.code == _SEND_BATCH_MESSAGE:
            return await self._send_batch(cmd, h, config, remote)
        body = cmd.body
        if type(body) is not bytes:
            body = cmd.body_bytes
        if len(body) > self.store_cfg.maxMessageSize:
            return self._error(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {len(body)} is over the limit {self.store_cfg.maxMessageSize}",
            )
        props_s = h.properties or ""
        topic = h.topic
        found = self._client_props.lookup(props_s)
        if found is not None and not found[1][3] and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # client-form properties without DELAY, not a retry topic: nothing to rewrite
            uniq, (tags_code, keys, wait, _delay) = found
            fast = self._encode_client_form(h, body, props_s, config, remote)
            if fast is not None:
                encoded, queue_id = fast
                repl = self.broker.replication
                began = monotonic_ns()
                result = repl.try_put_message(
                    encoded, topic, queue_id, h.sysFlag, tags_code, keys, uniq, wait
                )
                if type(result) is tuple:  # the store's plain path: stored, no result object
                    self.broker.stats.on_put_placed(topic, result[1], began)
                    return placed_response(
                        cmd, result, queue_id, uniq, self._ext_ok, self.broker.store.host_field
                    )
                if result is None:
                    result = await repl.put_message(
                        encoded,
                        topic,
                        queue_id,
                        sys_flag=h.sysFlag,
                        tags_code=tags_code,
                        keys=keys,
                        uniq_key=uniq,
                        wait_store_msg_ok=wait,
                    )
                self.broker.stats.on_put_result(topic, 1, result, began)
                return send_response(cmd, result, queue_id, uniq, self._ext_ok)
        props, tail, uniq = self._complete_properties(props_s)
        queue_id = self._pick_queue(config, h.queueId)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            redirected = self._redirect_retry(h, cmd, topic, queue_id, props)
            if isinstance(redirected, RemotingCommand):
                return redirected
            topic, queue_id = redirected
            tail = None
        sys_flag = h.sysFlag
        if (
            sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE
            and self.cfg.rejectTransactionMessage
        ):
            return self._error(
                cmd,
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.cfg.brokerIP1}] sending transaction message is forbidden",
            )
        if PROPERTY_DELAY in props:
            store_topic, store_queue = self._park_delay(topic, queue_id, props, sys_flag)
            tail = None
        else:
            store_topic, store_queue = topic, queue_id
        try:
            topic_b, magic = topic_field(store_topic)
            born, store = self._hosts(remote)
            encoded = bytearray()
            append_record(
                encoded,
                topic_b,
                magic,
                store_queue,
                h.flag,
                body,
                (props_s + tail if tail is not None else properties_to_string(props)).encode(),
                sys_flag,
                h.bornTimestamp,
                born[0],
                born[1],
                store[0],
                store[1],
                h.reconsumeTimes or 0,
            )
        except MessageFormatError as e:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, str(e))
        began = monotonic_ns()
        result = await self.broker.replication.put_message(
            encoded,
            store_topic,
            store_queue,
            sys_flag=sys_flag,
            tags_code=tags_hash_code(props.get(PROPERTY_TAGS)),
            keys=props.get(PROPERTY_KEYS),
            uniq_key=uniq,
            wait_store_msg_ok=props.get(PROPERTY_WAIT, "true") != "false",
        )
        # under the topic stored (a delayed message's SCHEDULE_TOPIC_XXXX), as upstream
        self.broker.stats.on_put_result(store_topic, 1, result, began)
        return send_response(cmd, result, store_queue, uniq, self._ext_ok)

    def _encode_client_form(
        self, h: SendHeader, body: bytes, props_s: str, config: TopicConfig, remote: str
    ) -> tuple[bytearray, int] | None:
        """The record and queue id of a send whose properties are in client form (see
        :mod:`broker.send_records`), with the checks the general path makes after the properties,
        in its order; the record is the general path's, with the client's properties plus the
        CLUSTER pair. None when the general path must answer (an error, or the unusual)."""
        queue_id = h.queueId
        if queue_id < 0:
            queue_id = self._pick_queue(config, queue_id)
        sys_flag = h.sysFlag
        if (
            sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE
            and self.cfg.rejectTransactionMessage
        ):
            return None
        try:
            topic_b, magic = topic_field(h.topic)
        except MessageFormatError:
            return None
        born, store = self._host_fields(remote)
        encoded = encode_single(
            topic_b,
            magic,
            queue_id,
            h.flag,
            body,
            props_s.encode(),
            self._client_props.cluster_pair(self.cfg.brokerClusterName),
            sys_flag,
            h.bornTimestamp,
            born,
            store,
            h.reconsumeTimes or 0,
        )
        return None if encoded is None else (encoded, queue_id)

    async def _send_batch(
        self, cmd: RemotingCommand, h: SendHeader, config: TopicConfig, remote: str
    ) -> RemotingCommand:
        topic = h.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self._error(
                cmd, ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + topic
            )
        body = cmd.body if isinstance(cmd.body, bytes) else cmd.body_bytes
        queue_id = self._pick_queue(config, h.queueId)
        try:
            topic_b, magic = topic_field(topic)
            born, store = self._hosts(remote)
        except (MessageFormatError, ValueError):
            encoded = None  # the general path answers, at the point it always did
        else:
            # Encoded for the place the store appends next, the records need no second pass
            # there; nothing can append in between (no checkpoint until the store has them).
            slot = self.broker.store.plain_batch_slot(topic, queue_id)
            encoded = self._batch_encoder.encode(
                body,
                topic_b,
                magic,
                queue_id,
                h.sysFlag,
                h.bornTimestamp,
                born,
                store,
                self.store_cfg.maxMessageSize,
                self.cfg.brokerClusterName,
                slot or NO_SLOT,
            )
        placed: PlacedBatch | None = None
        if encoded is None:
            built = self._encode_batch(cmd, h, body, queue_id, remote)
            if isinstance(built, RemotingCommand):
                return built
            records, hints, uniqs = built
        else:
            records, hints, uniqs, placed = encoded
        began = monotonic_ns()
        result = await self.broker.replication.put_messages(
            records, topic, queue_id, sys_flag=h.sysFlag, hints=hints, placed=placed
        )
        self.broker.stats.on_put_result(topic, len(uniqs), result, began)
        return send_response(cmd, result, queue_id, ",".join(uniqs), self._ext_ok)

    def _encode_batch(
        self,
        cmd: RemotingCommand,
        h: SendHeader,
        body: bytes,
        queue_id: int,
        remote: str,
    ) -> tuple[bytearray, list[BatchHint], list[str]] | RemotingCommand:
        """The general batch path: split, then complete and encode item by item (or the error)."""
        try:
            items = split_batch_body(body)
        except MessageFormatError as e:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {e}")
        if not items:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        (born_ip, born_port), (store_ip, store_port) = self._hosts(remote)
        sys_flag = h.sysFlag
        born_ts = h.bornTimestamp
        max_size = self.store_cfg.maxMessageSize
        complete = self._complete_properties
        encoded = bytearray()
        uniqs: list[str] = []
        hints: list[BatchHint] = []
        try:
            topic_b, magic = topic_field(h.topic)
            for flag, data, props_s in items:
                if len(data) > max_size:
                    return self._error(
                        cmd,
                        ResponseCode.MESSAGE_ILLEGAL,
                        f"a batch message body of {len(data)} bytes is over the limit",
                    )
                props, tail, uniq = complete(props_s)
                uniqs.append(uniq)
                hints.append((tags_hash_code(props.get(PROPERTY_TAGS)), props.get(PROPERTY_KEYS), uniq))
                append_record(
                    encoded,
                    topic_b,
                    magic,
                    queue_id,
                    flag,
                    data,
                    (props_s + tail if tail is not None else properties_to_string(props)).encode(),
                    sys_flag,
                    born_ts,
                    born_ip,
                    born_port,
                    store_ip,
                    store_port,
                )
        except MessageFormatError as e:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, str(e))
        return encoded, hints, uniqs

    async def send_back(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """Upstream ``consumerSendMsgBack``: store a copy in %RETRY%group (delayed) or %DLQ%group."""
        h = decode_header(cmd, ConsumerSendMsgBackRequestHeader)
        b = self.broker
        group_config = b.groups.find(h.group)
        if group_config is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}"
            )
        if not PermName.is_writeable(self.cfg.brokerPermission) or b.is_slave:
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the broker[{self.cfg.brokerIP1}] sending message is forbidden"
            )
        if group_config.retryQueueNums <= 0:
            return cmd.response(ResponseCode.SUCCESS)
        await b.store.read_in_message(h.offset)
        view = b.store.look_message_by_offset(h.offset)
        if view is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        try:
            msg = decode_message(view)
        except MessageFormatError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}: {e}")
        props = dict(msg.properties)
        if PROPERTY_RETRY_TOPIC not in props:
            props[PROPERTY_RETRY_TOPIC] = msg.topic
        if not props.get(PROPERTY_ORIGIN_MESSAGE_ID, "").strip():
            # the first send-back names the stored message by its offset msg id, as upstream (which
            # decodes it broker-side: ``getMsgId`` is not the UNIQ_KEY there); the request's
            # ``originMsgId`` is not used, upstream neither
            props[PROPERTY_ORIGIN_MESSAGE_ID] = msg.offset_msg_id
        max_times = group_config.retryMaxTimes
        if cmd.version >= V3_4_9 and h.maxReconsumeTimes is not None and h.maxReconsumeTimes >= 0:
            max_times = h.maxReconsumeTimes
        delay_level = h.delayLevel
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = b.topics.create_system_like(
                dlq_topic(h.group), 1, PermName.PERM_READ | PermName.PERM_WRITE
            ).topicName
            queue_id = 0
            props[PROPERTY_DELAY] = "0"  # upstream: ``setDelayTimeLevel(0)``, not delayed
        else:
            retry = b.topics.create_system_like(
                retry_topic(h.group), group_config.retryQueueNums, PermName.PERM_READ | PermName.PERM_WRITE
            )
            topic = retry.topicName
            queue_id = self._rng.randrange(max(1, retry.writeQueueNums))
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            props[PROPERTY_DELAY] = str(delay_level)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
        store_topic, store_queue = self._park_delay(topic, queue_id, props, msg.sys_flag)
        encoded = encode_message(
            topic=store_topic,
            queue_id=store_queue,
            flag=msg.flag,
            body=msg.body,
            properties=properties_to_string(props),
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=parse_host(msg.born_host),
            store_host=self._store_host(),
            reconsume_times=msg.reconsume_times + 1,
        )
        began = monotonic_ns()
        result = await b.replication.put_message(encoded, store_topic, store_queue, sys_flag=msg.sys_flag)
        b.stats.on_put_result(store_topic, 1, result, began)
        if not result.is_ok:
            code, remark = STATUS_CODES.get(result.status, (ResponseCode.SYSTEM_ERROR, result.status.name))
            if code in (
                ResponseCode.FLUSH_DISK_TIMEOUT,
                ResponseCode.FLUSH_SLAVE_TIMEOUT,
                ResponseCode.SLAVE_NOT_AVAILABLE,
            ):
                return cmd.response(ResponseCode.SUCCESS)
            return cmd.response(code, remark)
        b.stats.items.on_send_back(h.group, props[PROPERTY_RETRY_TOPIC])
        await self._created_topics_settled(topic)
        return cmd.response(ResponseCode.SUCCESS)


def register(broker: BrokerController, table: ProcessorTable) -> None:
    p = SendProcessor(broker)
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        table.register(code, p.send)
    table.register(RequestCode.CONSUMER_SEND_MSG_BACK, p.send_back)


__all__ = ["DLQ_GROUP_TOPIC_PREFIX", "SendProcessor", "register"]
