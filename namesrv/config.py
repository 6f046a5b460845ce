"""Name server configuration (upstream ``NamesrvConfig``).

Field names are upstream's config keys, defaults upstream's. ``listenPort`` is upstream's
``NettyServerConfig.listenPort`` as set by ``NamesrvStartup`` (9876); it lives here because every
component in the process owns its own listening port. Keys upstream has that rmq-container gives no
meaning are in :data:`IGNORED_NAMESRV_KEYS` (accepted with a warning).
"""

from __future__ import annotations

import os

import msgspec


def _home(*parts: str) -> str:
    return os.path.join(os.path.expanduser("~"), *parts)


def _env_rocketmq_home() -> str | None:
    return os.environ.get("ROCKETMQ_HOME")


class NamesrvConfig(msgspec.Struct, kw_only=True):
    listenPort: int = 9876
    rocketmqHome: str | None = msgspec.field(default_factory=_env_rocketmq_home)
    kvConfigPath: str = msgspec.field(default_factory=lambda: _home("namesrv", "kvConfig.json"))
    configStorePath: str = msgspec.field(default_factory=lambda: _home("namesrv", "namesrv.properties"))
    productEnvName: str = "center"
    clusterTest: bool = False
    orderMessageEnable: bool = False
    returnOrderTopicConfigToBroker: bool = True
    scanNotActiveBrokerInterval: int = 5 * 1000
    unRegisterBrokerQueueCapacity: int = 3000
    supportActingMaster: bool = False
    enableAllTopicList: bool = True
    enableTopicList: bool = True
    notifyMinBrokerIdChanged: bool = False
    enableControllerInNamesrv: bool = False
    needWaitForService: bool = False
    waitSecondsForService: int = 45
    deleteTopicWithBrokerRegistration: bool = False
    configBlackList: str = "configBlackList;configStorePath;kvConfigPath"


#: Upstream ``NamesrvConfig`` keys without effect here (request executors are trio tasks).
IGNORED_NAMESRV_KEYS: frozenset[str] = frozenset(
    {
        "clientRequestThreadPoolNums",
        "defaultThreadPoolNums",
        "clientRequestThreadPoolQueueCapacity",
        "defaultThreadPoolQueueCapacity",
    }
)
