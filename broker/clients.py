"""Producer and consumer tables of one broker (upstream ``ProducerManager``, ``ConsumerManager``).

Registrations are keyed by connection: a closed connection drops its registrations at once, a
silent one expires after ``channelExpiredTimeout``. Membership changes of a consumer group are
returned to the caller, which notifies the group's remaining clients
(NOTIFY_CONSUMER_IDS_CHANGED).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from remoting.protocol.broker import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)

log = logging.getLogger("broker.clients")


@dataclass
class ClientChannel:
    """One client's registration on one connection."""

    client_id: str
    connection: Any  # remoting.server.Connection
    language: str
    version: int
    #: the last heartbeat on the broker's liveness clock (what expiry measures) ...
    last_update_ms: int
    #: ... and on the wall clock (what the admin lists show)
    heard_at_ms: int = 0


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    channels: dict[int, ClientChannel] = field(default_factory=dict)  # connection id -> channel
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_ms: int = 0

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(
        self, data: ConsumerData, channel: ClientChannel, now_ms: int, *, without_sub: bool = False
    ) -> bool:
        """Record a consumer heartbeat. Returns True when the group's membership or subscriptions changed."""
        info = self.groups.get(data.groupName)
        if info is None:
            info = self.groups[data.groupName] = ConsumerGroupInfo(group=data.groupName)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        info.last_update_ms = now_ms
        conn_id = channel.connection.id
        changed = conn_id not in info.channels or info.channels[conn_id].client_id != channel.client_id
        info.channels[conn_id] = channel
        if not without_sub:
            new_subs = {s.topic: s for s in data.subscriptionDataSet}
            if set(new_subs) != set(info.subscriptions) or any(
                info.subscriptions[t].subString != s.subString for t, s in new_subs.items()
            ):
                changed = True
            info.subscriptions = new_subs
        return changed

    def unregister(self, group: str, connection_id: int) -> bool:
        info = self.groups.get(group)
        if info is None or info.channels.pop(connection_id, None) is None:
            return False
        if not info.channels:
            del self.groups[group]
        return True

    def connection_closed(self, connection_id: int) -> list[str]:
        """Drop every registration of a connection; returns the groups whose membership changed."""
        changed = []
        for group in list(self.groups):
            if self.unregister(group, connection_id):
                changed.append(group)
        return changed

    def expire(self, now_ms: int, timeout_ms: int) -> list[str]:
        changed = []
        for group, info in list(self.groups.items()):
            for conn_id, ch in list(info.channels.items()):
                if now_ms - ch.last_update_ms > timeout_ms:
                    log.warning(
                        "consumer %s of group %s expired (silent %d ms)",
                        ch.client_id,
                        group,
                        now_ms - ch.last_update_ms,
                    )
                    self.unregister(group, conn_id)
                    if group not in changed:
                        changed.append(group)
        return changed

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for g, info in self.groups.items() if topic in info.subscriptions}


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[int, ClientChannel]] = {}

    def register(self, group: str, channel: ClientChannel) -> None:
        self.groups.setdefault(group, {})[channel.connection.id] = channel

    def unregister(self, group: str, connection_id: int) -> None:
        chans = self.groups.get(group)
        if chans is not None:
            chans.pop(connection_id, None)
            if not chans:
                del self.groups[group]

    def connection_closed(self, connection_id: int) -> None:
        for group in list(self.groups):
            self.unregister(group, connection_id)

    def expire(self, now_ms: int, timeout_ms: int) -> None:
        for group, chans in list(self.groups.items()):
            for conn_id, ch in list(chans.items()):
                if now_ms - ch.last_update_ms > timeout_ms:
                    self.unregister(group, conn_id)

    def channels(self, group: str) -> list[ClientChannel]:
        return list(self.groups.get(group, {}).values())
