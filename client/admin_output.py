"""mqadmin-shaped text for the broker admin commands of ``rmq-admin`` (tables, ``toString`` forms).

Pure formatting plus the two multi-call reports of ``consumerProgress``; the click commands live
in :mod:`client.admin_cli`.
"""

from __future__ import annotations

import logging
import time

from client.admin import RETRY_GROUP_TOPIC_PREFIX, AdminError, MQAdmin
from remoting.command import version_desc
from remoting.errors import RemotingError
from remoting.protocol.broker import (
    ConsumerRunningInfo,
    ProcessQueueInfo,
    SubscriptionGroupConfig,
    TopicStatsTable,
)
from remoting.protocol.common import MessageQueue, PermName, TopicConfig

__all__ = [
    "all_groups_progress_lines",
    "analyze_process_queues",
    "group_config_str",
    "group_progress_lines",
    "human_ms",
    "human_time_digits",
    "java_date",
    "java_map_str",
    "mq_key",
    "parse_attribute_modification",
    "process_queue_info_str",
    "rebalance_ok",
    "running_info_str",
    "same_subscription",
    "topic_config_str",
    "topic_status_lines",
    "version_desc",
]

log = logging.getLogger("client.admin")


def java_map_str(m: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in m.items()) + "}"


def human_ms(ms: int) -> str:
    """Upstream ``UtilAll.timeMillisToHumanString2``: local time ``yyyy-MM-dd HH:mm:ss,SSS``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


def mq_key(mq: MessageQueue) -> tuple[str, str, int]:
    return (mq.topic, mq.brokerName, mq.queueId)


def parse_attribute_modification(text: str) -> dict[str, str]:
    """``+a=1,-b`` -> ``{"+a": "1", "-b": ""}`` (upstream ``AttributeParser.parseToMap``)."""
    result: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and "+" not in key:
            raise ValueError(f"add/alter attribute format is wrong: {key}")
        if not sep and "-" not in key:
            raise ValueError(f"delete attribute format is wrong: {key}")
        if key in result:
            raise ValueError(f"key duplication: {key}")
        result[key] = value
    return result


def topic_config_str(c: TopicConfig, attributes: dict[str, str]) -> str:
    """Upstream ``TopicConfig.toString`` (attributes as given on the command line)."""
    return (
        f"TopicConfig [topicName={c.topicName}, readQueueNums={c.readQueueNums}, "
        f"writeQueueNums={c.writeQueueNums}, perm={PermName.to_string(c.perm)}, "
        f"topicFilterType={c.topicFilterType.value}, topicSysFlag={c.topicSysFlag}, "
        f"order={'true' if c.order else 'false'}, attributes={java_map_str(attributes)}]"
    )


def group_config_str(c: SubscriptionGroupConfig) -> str:
    """Upstream ``SubscriptionGroupConfig.toString`` (Guava toStringHelper form)."""

    def b(v: bool) -> str:
        return "true" if v else "false"

    return (
        f"SubscriptionGroupConfig{{groupName={c.groupName}, consumeEnable={b(c.consumeEnable)}, "
        f"consumeFromMinEnable={b(c.consumeFromMinEnable)}, "
        f"consumeBroadcastEnable={b(c.consumeBroadcastEnable)}, "
        f"consumeMessageOrderly={b(c.consumeMessageOrderly)}, retryQueueNums={c.retryQueueNums}, "
        f"retryMaxTimes={c.retryMaxTimes}, brokerId={c.brokerId}, "
        f"whichBrokerWhenConsumeSlowly={c.whichBrokerWhenConsumeSlowly}, "
        f"notifyConsumerIdsChangedEnable={b(c.notifyConsumerIdsChangedEnable)}, "
        f"groupSysFlag={c.groupSysFlag}, consumeTimeoutMinute={c.consumeTimeoutMinute}, "
        f"attributes={java_map_str(c.attributes)}}}"
    )


def java_date(ms: int) -> str:
    """``ms`` (epoch milliseconds) as mqadmin's ``yyyy-MM-dd HH:mm:ss`` in local time; whole seconds
    by floor division (a float division rounds times before 1970 and beyond 2^53 ms the wrong way).
    A value no calendar here can show (a corrupt timestamp) is printed as the number."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms // 1000))
    except (OverflowError, OSError, ValueError):
        return str(ms)


async def group_progress_lines(
    admin: MQAdmin, group: str, topic: str | None, cluster: str | None
) -> list[str]:
    stats = await admin.examine_consume_stats(group, topic, cluster)
    lines = [
        f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  "
        f"{'#Consumer Offset':<20}  {'#Diff':<20} {'#Inflight':<20}#LastTime"
    ]
    diff_total = inflight_total = 0
    for mq in sorted(stats.offsetTable, key=mq_key):
        o = stats.offsetTable[mq]
        diff = o.brokerOffset - o.consumerOffset
        inflight = o.pullOffset - o.consumerOffset
        diff_total += diff
        inflight_total += inflight
        last = java_date(o.lastTimestamp) if o.lastTimestamp else "N/A"
        lines.append(
            f"{mq.topic:<64}  {mq.brokerName:<32}  {mq.queueId:<4}  {o.brokerOffset:<20}  "
            f"{o.consumerOffset:<20}  {diff:<20} {inflight:<20} {last}"
        )
    lines += [
        "",
        f"Consume TPS: {stats.consumeTps:.2f}",
        f"Consume Diff Total: {diff_total}",
        f"Consume Inflight Total: {inflight_total}",
    ]
    return lines


async def all_groups_progress_lines(admin: MQAdmin) -> list[str]:
    lines = [
        f"{'#Group':<64}  {'#Count':<6}  {'#Version':<24} {'#Type':<5}  {'#Model':<14}  {'#TPS':<7}  #Diff Total"
    ]
    for topic in (await admin.fetch_all_topic_list()).topicList:
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            continue
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        tps = diff_total = count = 0
        version = consume_type = model = ""
        try:
            stats = await admin.examine_consume_stats(group)
            tps = int(stats.consumeTps)
            diff_total = sum(o.brokerOffset - o.consumerOffset for o in stats.offsetTable.values())
        except (AdminError, RemotingError, ValueError) as e:
            log.debug("consume stats of %s: %s", group, e)
        try:
            cc = await admin.examine_consumer_connection_info(group)
            count = len(cc.connectionSet)
            if count:
                version = version_desc(min(c.version for c in cc.connectionSet))
                consume_type = "PULL" if cc.consumeType == "CONSUME_ACTIVELY" else "PUSH"
                model = cc.messageModel or "" if consume_type == "PUSH" else ""
        except (AdminError, RemotingError, ValueError) as e:
            log.debug("connections of %s: %s", group, e)
        lines.append(
            f"{group:<64}  {count:<6}  {version if count else 'OFFLINE':<24} {consume_type:<5}  "
            f"{model:<14}  {tps:<7}  {diff_total}"
        )
    return lines


def topic_status_lines(stats: TopicStatsTable) -> list[str]:
    """mqadmin ``topicStatus`` output."""
    lines = [f"{'#Broker Name':<32}  {'#QID':<4}  {'#Min Offset':<20}  {'#Max Offset':<20}    #Last Updated"]
    for mq in sorted(stats.offsetTable, key=mq_key):
        o = stats.offsetTable[mq]
        updated = human_ms(o.lastUpdateTimestamp) if o.lastUpdateTimestamp > 0 else ""
        lines.append(
            f"{mq.brokerName:<32}  {mq.queueId:<4}  {o.minOffset:<20}  {o.maxOffset:<20}    {updated}"
        )
    lines.append("")
    # upstream's TopicStatsTable also carries topicPutTps; printed once our struct has it
    lines.append(f"Topic Put TPS: {getattr(stats, 'topicPutTps', 0.0)}")
    return lines


def human_time_digits(ms: int) -> str:
    """Upstream ``UtilAll.timeMillisToHumanString``: local time as ``yyyyMMddHHmmssSSS``."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


def process_queue_info_str(p: ProcessQueueInfo) -> str:
    """Upstream ``ProcessQueueInfo.toString``."""
    return (
        f"ProcessQueueInfo [commitOffset={p.commitOffset}, cachedMsgMinOffset={p.cachedMsgMinOffset}, "
        f"cachedMsgMaxOffset={p.cachedMsgMaxOffset}, cachedMsgCount={p.cachedMsgCount}, "
        f"cachedMsgSizeInMiB={p.cachedMsgSizeInMiB}, transactionMsgMinOffset={p.transactionMsgMinOffset}, "
        f"transactionMsgMaxOffset={p.transactionMsgMaxOffset}, transactionMsgCount={p.transactionMsgCount}, "
        f"locked={str(p.locked).lower()}, tryUnlockTimes={p.tryUnlockTimes}, "
        f"lastLockTimestamp={human_time_digits(p.lastLockTimestamp)}, droped={str(p.droped).lower()}, "
        f"lastPullTimestamp={human_time_digits(p.lastPullTimestamp)}, "
        f"lastConsumeTimestamp={human_time_digits(p.lastConsumeTimestamp)}]"
    )


def _java_value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def running_info_str(info: ConsumerRunningInfo) -> str:
    """Upstream ``ConsumerRunningInfo.formatString`` (what ``mqadmin consumerStatus -i`` prints);
    properties sorted by key (upstream: hash order), queues by topic, broker and id."""
    out = ["#Consumer Properties#\n"]
    out += [f"{k:<40}: {_java_value(v)}\n" for k, v in sorted(info.properties.items())]
    out.append("\n\n#Consumer Subscription#\n")
    subs = sorted(info.subscriptionSet, key=lambda s: f"{s.topic}@{s.subString}")
    out += [
        f"{i:03d} Topic: {s.topic:<40} ClassFilter: {str(s.classFilterMode).lower():<8} SubExpression: {s.subString}\n"
        for i, s in enumerate(subs, 1)
    ]
    mqs = sorted(info.mqTable.items(), key=lambda e: mq_key(e[0]))
    out.append("\n\n#Consumer Offset#\n")
    out.append(f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Consumer Offset':<20}\n")
    out += [f"{mq.topic:<32}  {mq.brokerName:<32}  {mq.queueId:<4}  {p.commitOffset:<20}\n" for mq, p in mqs]
    out.append("\n\n#Consumer MQ Detail#\n")
    out.append(f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}\n")
    out += [
        f"{mq.topic:<64}  {mq.brokerName:<32}  {mq.queueId:<4}  {process_queue_info_str(p)}\n"
        for mq, p in mqs
    ]
    out.append("\n\n#Consumer Pop Detail#\n")
    out.append(f"{'#Topic':<32}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}\n")
    out.append("\n\n#Consumer RT&TPS#\n")
    out.append(
        f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} {'#ConsumeOK TPS':>14} "
        f"{'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}\n"
    )
    out += [
        f"{topic:<32}  {s.pullRT:14.2f} {s.pullTPS:14.2f} {s.consumeRT:14.2f} {s.consumeOKTPS:14.2f} "
        f"{s.consumeFailedTPS:18.2f} {s.consumeFailedMsgs:25d}\n"
        for topic, s in sorted(info.statusTable.items())
    ]
    if info.userConsumerInfo is not None:
        out.append("\n\n#User Consume Info#\n")
        out += [f"{k:<40}: {v}\n" for k, v in sorted(info.userConsumerInfo.items())]
    if info.jstack is not None:
        out.append("\n\n#Consumer jstack#\n")
        out.append(info.jstack)
    return "".join(out)


def analyze_process_queues(client_id: str, info: ConsumerRunningInfo, now_ms: int) -> list[str]:
    """Upstream ``ConsumerRunningInfo.analyzeProcessQueue``: a push consumer's queues that look
    stuck -- orderly: not locked, or dropped with unlock attempts; concurrent: messages cached
    and nothing consumed for over a minute."""
    if str(info.properties.get("PROP_CONSUME_TYPE", "CONSUME_PASSIVELY")) != "CONSUME_PASSIVELY":
        return []
    orderly = _java_value(info.properties.get("PROP_CONSUMEORDERLY", "false")) == "true"
    lines: list[str] = []
    for mq, p in sorted(info.mqTable.items(), key=lambda e: mq_key(e[0])):
        where = (
            f"{client_id} MessageQueue [topic={mq.topic}, brokerName={mq.brokerName}, queueId={mq.queueId}]"
        )
        if orderly:
            if not p.locked:
                lines.append(f"{where} can't lock for a while, {now_ms - p.lastLockTimestamp}ms")
            elif p.droped and p.tryUnlockTimes > 0:
                lines.append(f"{where} unlock {p.tryUnlockTimes} times, still failed")
        else:
            idle = now_ms - p.lastConsumeTimestamp
            if idle > 60_000 and p.cachedMsgCount > 0:
                lines.append(f"{where} can't consume for a while, maybe blocked, {idle}ms")
    return lines


def rebalance_ok(infos: dict[str, ConsumerRunningInfo]) -> bool:
    """No queue is pulled by two clients of the group (mqadmin's "Rebalance OK"; upstream's
    ``analyzeRebalance`` always says OK)."""
    seen: set[tuple[str, str, int]] = set()
    for info in infos.values():
        for mq in info.mqTable:
            if mq_key(mq) in seen:
                return False
            seen.add(mq_key(mq))
    return True


def same_subscription(infos: dict[str, ConsumerRunningInfo]) -> bool:
    """Every client of the group subscribes the same topics with the same expressions."""
    shapes = {frozenset((s.topic, s.subString) for s in info.subscriptionSet) for info in infos.values()}
    return len(shapes) <= 1
