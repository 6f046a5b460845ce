"""Subscription group configs (upstream ``SubscriptionGroupManager``), persisted as ``config/subscriptionGroup.json``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from broker.persist import EntryTexts, atomic_write, load_json, with_own_attributes
from remoting.protocol.broker import SubscriptionGroupConfig, SubscriptionGroupWrapper
from remoting.protocol.common import DataVersion

log = logging.getLogger("broker.groups")

#: Groups every broker knows from the start (upstream ``SubscriptionGroupManager.init``).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)


class SubscriptionGroupManager:
    def __init__(
        self,
        *,
        config_dir: str,
        auto_create: bool,
        now_ms: Callable[[], int],
        logger: logging.Logger | None = None,
    ) -> None:
        self.log = logger or log
        self.path = os.path.join(config_dir, "subscriptionGroup.json")
        self.auto_create = auto_create
        self.now_ms = now_ms
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.forbidden: dict[str, dict[str, int]] = {}
        self.data_version = DataVersion()
        self._texts: EntryTexts[SubscriptionGroupConfig] = EntryTexts(with_own_attributes)
        for g in SYSTEM_GROUPS:
            self.table[g] = SubscriptionGroupConfig(
                groupName=g, consumeBroadcastEnable=g != "SELF_TEST_C_GROUP" or True
            )

    def load(self) -> None:
        wrapper = load_json(self.path, SubscriptionGroupWrapper, SubscriptionGroupWrapper)
        self.table.update(wrapper.subscriptionGroupTable)
        self.forbidden = wrapper.forbiddenTable
        self.data_version = wrapper.dataVersion

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(
            subscriptionGroupTable=dict(self.table),
            forbiddenTable=self.forbidden,
            dataVersion=self.data_version,
        )

    def encode(self) -> bytes:
        """``subscriptionGroup.json``, also the GET_ALL_SUBSCRIPTIONGROUP_CONFIG body: the bytes of
        ``self.wrapper().encode()``, each group written again only when it changed (see
        :class:`EntryTexts`)."""
        return SubscriptionGroupWrapper(
            subscriptionGroupTable=self._texts.text_of(self.table),  # type: ignore[arg-type]
            forbiddenTable=self.forbidden,
            dataVersion=self.data_version,
        ).encode()

    def persist(self) -> None:
        atomic_write(self.path, self.encode())

    def _changed(self) -> None:
        self.data_version = self.data_version.next_version(self.now_ms())

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created when ``autoCreateSubscriptionGroup`` (else None)."""
        config = self.table.get(group)
        if config is None and self.auto_create:
            config = SubscriptionGroupConfig(groupName=group)
            self.table[group] = config
            self.log.info("auto-created subscription group %s", group)
            self._changed()
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        old = self.table.get(config.groupName)
        self.table[config.groupName] = config
        if old != config:
            self.log.info("subscription group %s: %s -> %s", config.groupName, old, config)
            self._changed()

    def delete(self, group: str) -> SubscriptionGroupConfig | None:
        old = self.table.pop(group, None)
        if old is not None:
            self._changed()
        return old

    def replace_all(self, wrapper: SubscriptionGroupWrapper) -> None:
        """Adopt a master's table (slave synchronisation), keeping its DataVersion."""
        self.table = dict(wrapper.subscriptionGroupTable)
        self.forbidden = wrapper.forbiddenTable
        self.data_version = wrapper.dataVersion
