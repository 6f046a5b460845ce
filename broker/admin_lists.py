"""Creating topics and subscription groups, one at a time or a list at once.

UPDATE_AND_CREATE_TOPIC_LIST (18) and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225), upstream
``AdminBrokerProcessor.updateAndCreateTopicList`` / ``updateAndCreateSubscriptionGroupList``, and
the checks they share with the single-entry handlers of :mod:`broker.admin` (UPDATE_AND_CREATE_TOPIC,
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): a check that fails raises :class:`Refused` with the response
code and remark upstream answers.

A list is all or nothing: every entry is checked before anything changes, and the first bad one
refuses the whole request with that entry's answer (upstream validates names, system topics and the
MIXED message type the same way). The name servers learn the new topics from one registration after
the whole list. Deviations from upstream, each deliberate:

- an entry equal to the broker's config of that topic is skipped (upstream answers SUCCESS as soon
  as it meets one and applies none of the entries, the ones before and after it included);
- attribute modifications that cannot be applied (an unknown key, a value outside the allowed set,
  an unchangeable attribute) refuse the request with SYSTEM_ERROR before anything changes
  (upstream finds them while applying and leaves the entries before the bad one applied);
- perm outside [0, 7] and negative queue numbers are refused, as for a single topic here;
- a body that does not parse, or lacks the list, is answered SYSTEM_ERROR naming the body
  (upstream: the parser's exception text).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from broker.topic_attributes import alter_attributes
from broker.topics import is_system_topic, validate_group, validate_topic
from remoting.codes import ResponseCode
from remoting.protocol.broker import (
    CreateTopicListRequestBody,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
)
from remoting.protocol.common import PermName, TopicConfig

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.controller import BrokerController
    from remoting.command import RemotingCommand
    from remoting.connection import RequestContext

__all__ = [
    "Refused",
    "altered_topic_attributes",
    "check_group",
    "check_message_type",
    "check_topic",
    "update_and_create_subscription_group_list",
    "update_and_create_topic_list",
]

log = logging.getLogger("broker.admin")


class Refused(Exception):
    """The request is answered with ``code`` and ``remark`` instead of being carried out."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def check_topic(
    config: BrokerConfig,
    topic: str,
    *,
    perm: int,
    read_queue_nums: int,
    write_queue_nums: int,
    is_system: Callable[[str], bool] = is_system_topic,
) -> None:
    """Refuse (INVALID_PARAMETER) a bad topic name, a system topic (``is_system``, when
    ``validateSystemTopicWhenUpdateTopic``), a perm outside [0, 7] or negative queue numbers."""
    reason = validate_topic(topic)
    if reason is not None:
        raise Refused(ResponseCode.INVALID_PARAMETER, reason)
    if config.validateSystemTopicWhenUpdateTopic and is_system(topic):
        raise Refused(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
    if not 0 <= perm < PermName.PERM_PRIORITY:
        raise Refused(ResponseCode.INVALID_PARAMETER, f"The perm[{perm}] of topic[{topic}] is not in [0, 7].")
    if read_queue_nums < 0 or write_queue_nums < 0:
        raise Refused(
            ResponseCode.INVALID_PARAMETER,
            f"The queue nums of topic[{topic}] must not be negative "
            f"(read {read_queue_nums}, write {write_queue_nums}).",
        )


def check_message_type(config: BrokerConfig, modification: dict[str, str]) -> None:
    """Refuse (INVALID_PARAMETER) ``+message.type=MIXED`` unless ``enableMixedMessageType``."""
    if not config.enableMixedMessageType and modification.get("+message.type") == "MIXED":
        raise Refused(ResponseCode.INVALID_PARAMETER, "MIXED message type is not supported.")


def altered_topic_attributes(existing: TopicConfig | None, modification: dict[str, str]) -> dict[str, str]:
    """The attributes a topic has after ``modification`` (``existing`` is None for a new topic);
    refuses (SYSTEM_ERROR, upstream's answer to the exception) one that cannot be applied."""
    try:
        return alter_attributes(existing is None, dict(existing.attributes) if existing else {}, modification)
    except ValueError as e:
        raise Refused(ResponseCode.SYSTEM_ERROR, str(e)) from None


def check_group(config: SubscriptionGroupConfig) -> None:
    """Refuse (INVALID_PARAMETER) a bad group name or a negative ``retryQueueNums``."""
    reason = validate_group(config.groupName)
    if reason is not None:
        raise Refused(ResponseCode.INVALID_PARAMETER, reason)
    if config.retryQueueNums < 0:
        raise Refused(ResponseCode.INVALID_PARAMETER, f"retryQueueNums {config.retryQueueNums} is negative")


def _topic_configs(broker: BrokerController, requested: list[TopicConfig]) -> list[TopicConfig]:
    """The configs to store for a requested list, in its order (a topic listed twice: the later
    entry modifies what the earlier one made); raises :class:`Refused` for the first bad entry."""
    bc = broker.broker_config
    for config in requested:
        check_topic(
            bc,
            config.topicName,
            perm=config.perm,
            read_queue_nums=config.readQueueNums,
            write_queue_nums=config.writeQueueNums,
            is_system=broker.topics.is_system,
        )
        check_message_type(bc, config.attributes)
    staged: dict[str, TopicConfig] = {}
    for config in requested:
        name = config.topicName
        existing = staged[name] if name in staged else broker.topics.get(name)
        attributes = altered_topic_attributes(existing, config.attributes)
        staged[name] = msgspec.structs.replace(config, attributes=attributes)
    return list(staged.values())


async def update_and_create_topic_list(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """Handle UPDATE_AND_CREATE_TOPIC_LIST for ``broker`` (see the module docstring)."""
    try:
        body = CreateTopicListRequestBody.decode(request.body_bytes)
    except (ValueError, msgspec.ValidationError) as e:
        return request.response(ResponseCode.SYSTEM_ERROR, f"bad CreateTopicListRequestBody body: {e}")
    names = "".join(f"{c.topicName};" for c in body.topicConfigList)
    log.info("update or create topic list %s (from %s)", names, ctx.connection.remote_address)
    try:
        configs = _topic_configs(broker, body.topicConfigList)
    except Refused as r:
        return request.response(r.code, r.remark)
    for config in configs:
        # an unchanged config is a no-op; a changed one bumps the DataVersion and asks for a
        # re-registration, which runs once after this handler (no checkpoint in between)
        broker.topics.update(config)
    await broker.topics_file.persist()  # durable when the answer comes, as upstream
    await broker.wait_routed(*(c.topicName for c in configs))  # routed when the answer comes
    return request.response(ResponseCode.SUCCESS)


async def update_and_create_subscription_group_list(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """Handle UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST for ``broker`` (see the module docstring)."""
    try:
        body = SubscriptionGroupList.decode(request.body_bytes)
    except (ValueError, msgspec.ValidationError) as e:
        return request.response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupList body: {e}")
    try:
        for config in body.groupConfigList:
            check_group(config)
    except Refused as r:
        return request.response(r.code, r.remark)
    names = "".join(f"{c.groupName};" for c in body.groupConfigList)
    log.info("update subscription group list %s (from %s)", names, ctx.connection.remote_address)
    for config in body.groupConfigList:
        broker.groups.update(config)
    if body.groupConfigList:
        broker.groups_changed()
        await broker.groups_file.persist()
    return request.response(ResponseCode.SUCCESS)
