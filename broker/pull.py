"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) (upstream ``PullMessageProcessor``).

The response body is the stored records themselves, passed to the transport as memoryviews of
the commit-log maps (no copy). A pull that finds nothing and carries the suspend flag is held by
the long-polling service and re-run when its queue gains a message or its hold time ends.
"""

from __future__ import annotations

from time import monotonic_ns
from typing import TYPE_CHECKING

from broker.filter import TagFilter, build_subscription
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import HeaderError, decode_header, encode_header
from remoting.protocol.broker import PullMessageRequestHeader, PullMessageResponseHeader, PullSysFlag
from remoting.protocol.common import PermName
from store.reading import MAX_PULL_MSG_SIZE
from store.results import GetMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController

MASTER_ID = 0

_CODES: dict[GetMessageStatus, int] = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_RESET: ResponseCode.PULL_OFFSET_MOVED,
}


class PullProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.cfg = broker.broker_config

    async def pull(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        return await self.process(ctx, cmd, allow_suspend=True)

    async def rerun(self, ctx: object, cmd: RemotingCommand) -> None:
        """Re-run a held pull without suspending again and answer it on its connection."""
        try:
            resp = await self.process(ctx, cmd, allow_suspend=False)  # type: ignore[arg-type]
        except HeaderError as e:  # cannot happen for a request that was parsed before; be safe
            resp = cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if resp is not None:
            await ctx.respond(resp)  # type: ignore[attr-defined]

    async def process(
        self, ctx: RequestContext, cmd: RemotingCommand, *, allow_suspend: bool
    ) -> RemotingCommand | None:
        b = self.broker
        h = decode_header(cmd, PullMessageRequestHeader)
        if not PermName.is_readable(self.cfg.brokerPermission):
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the broker[{self.cfg.brokerIP1}] pulling message is forbidden"
            )
        group = b.groups.find(h.consumerGroup)
        if group is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumerGroup}] does not exist (autoCreateSubscriptionGroup=false)",
            )
        if not group.consumeEnable:
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumerGroup}"
            )
        suspend = bool(h.sysFlag & PullSysFlag.SUSPEND) and allow_suspend
        commit = bool(h.sysFlag & PullSysFlag.COMMIT_OFFSET)
        has_sub = bool(h.sysFlag & PullSysFlag.SUBSCRIPTION)
        topic = b.topics.get(h.topic)
        if topic is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
            )
        if not PermName.is_readable(topic.perm):
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if h.queueId < 0 or h.queueId >= topic.readQueueNums:
            return cmd.response(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{h.queueId}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:[{topic.readQueueNums}] "
                f"consumer:[{ctx.connection.remote_address}]",
            )
        if has_sub:
            sub = build_subscription(h.topic, h.subscription, h.subVersion, h.expressionType)
        else:
            sub = b.consumers.find_subscription(h.consumerGroup, h.topic)
            if sub is None:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {h.consumerGroup}",
                )
            if sub.sub_version < h.subVersion:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription not latest, group: {h.consumerGroup} {sub.sub_version} < {h.subVersion}",
                )
            sub = build_subscription(h.topic, sub.subString, sub.sub_version, sub.expressionType)
        if sub.expressionType.upper() != "TAG":
            return cmd.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"the broker does not support consumer to filter message by {sub.expressionType}",
            )

        store = b.store
        reset = b.offsets.take_reset(h.consumerGroup, h.topic, h.queueId) if b.offsets.resets else None
        if reset is not None:
            # an admin reset the group's offset: the consumer moves there (and commits nothing from
            # before it); upstream's OFFSET_RESET
            b.log.info(
                "pull of %s/%d by %s: the queue was reset to offset %d",
                h.topic,
                h.queueId,
                h.consumerGroup,
                reset,
            )
            resp = cmd.response(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_RESET")
            resp.ext_fields = encode_header(
                PullMessageResponseHeader(
                    suggestWhichBrokerId=MASTER_ID,
                    nextBeginOffset=reset,
                    minOffset=store.get_min_offset_in_queue(h.topic, h.queueId),
                    maxOffset=store.get_max_offset_in_queue(h.topic, h.queueId),
                )
            )
            return resp
        max_count = max(1, min(h.maxMsgNums, 1024))
        max_bytes = h.maxMsgBytes if h.maxMsgBytes is not None else MAX_PULL_MSG_SIZE  # absent: no byte cap
        # units and bytes that may be out of memory (an older queue file's units; commit-log bytes
        # the page-cache bound dropped or written before the store's start) come back in a worker
        # thread, not in page faults of the event loop (the filter below and the send read them)
        read_to = await store.read_in_queue(h.topic, h.queueId, h.queueOffset, max_count)
        began = monotonic_ns()
        result = store.get_message(
            h.consumerGroup, h.topic, h.queueId, h.queueOffset, max_count, max_bytes, TagFilter(sub)
        )
        if result is None:
            # the store stopped (the broker is shutting down; a held pull woken by the stop ends
            # here): upstream's "store getMessage return null", with the reason
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, "store getMessage return null: the message store is not running"
            )
        b.stats.on_get_time((monotonic_ns() - began) // 1_000_000)
        code = _CODES.get(result.status)
        if code is None:  # NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if h.queueOffset != 0 else ResponseCode.PULL_NOT_FOUND
        next_begin = result.next_begin_offset
        if b.is_slave and code == ResponseCode.PULL_OFFSET_MOVED:
            # A slave may lag: do not move the consumer's offset, let it retry (offsetCheckInSlave=false).
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            next_begin = h.queueOffset
        if self.cfg.slaveReadEnable:
            suggest = (
                group.whichBrokerWhenConsumeSlowly if result.suggest_pulling_from_slave else group.brokerId
            )
        else:
            suggest = MASTER_ID
        if b.is_slave and b.master_addr and not result.suggest_pulling_from_slave:
            # Upstream: a slave sends a consumer that is not reading old data back to a live master,
            # and has it retry there at once when the slave has nothing (it may lag the master).
            suggest = MASTER_ID
            if code != ResponseCode.SUCCESS:
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
        if code == ResponseCode.SUCCESS:
            b.stats.on_get(result.message_count, h.consumerGroup, h.topic, result.buffer_total_size)
        elif code == ResponseCode.PULL_NOT_FOUND:
            b.stats.on_get(0)
        if commit and allow_suspend and not b.is_slave and h.commitOffset >= 0:
            b.offsets.commit(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        if code == ResponseCode.PULL_NOT_FOUND and suspend:
            hold = h.suspendTimeoutMillis if self.cfg.longPollingEnable else self.cfg.shortPollingTimeMills
            # Stay well under the client's own 30 s timeout for suspended pulls.
            b.hold.hold(h.topic, h.queueId, h.queueOffset, min(hold, 25_000) / 1000, ctx, cmd)
            return None
        resp = cmd.response(code, result.status.name)
        resp.ext_fields = encode_header(
            PullMessageResponseHeader(
                suggestWhichBrokerId=suggest,
                nextBeginOffset=next_begin,
                minOffset=result.min_offset,
                maxOffset=result.max_offset,
            )
        )
        if code == ResponseCode.SUCCESS:
            if result.phy_end > read_to and result.phy_start < store.commit_log.cold_end:
                await store.read_in(max(result.phy_start, read_to), result.phy_end)  # filtered past it
            resp.body = result.message_views
        return resp


def register(broker: BrokerController, table: ProcessorTable) -> None:
    p = PullProcessor(broker)
    table.register(RequestCode.PULL_MESSAGE, p.pull)
    table.register(RequestCode.LITE_PULL_MESSAGE, p.pull)
    broker.set_pull_rerun(p.rerun)
