"""Config loading (container/config.py): routing, kinds, errors with file:line, post-load rules."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec
import pytest

from broker.config import BrokerConfig
from container.config import (
    BadConfigValue,
    ConfigError,
    InvalidConfig,
    ProcessConfig,
    UnknownConfigKey,
    detect_kind,
    load_process_config,
)
from container.config_fields import PROJECT_ROOT
from container.config_render import render_toml
from controller.config import ControllerConfig
from namesrv.config import NamesrvConfig
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- defaults --------------------------------------------------------------------------------------


def test_upstream_defaults() -> None:
    b = BrokerConfig()
    assert (b.brokerClusterName, b.brokerId, b.listenPort, b.brokerPermission) == (
        "DefaultCluster",
        0,
        10911,
        6,
    )
    assert (b.defaultTopicQueueNums, b.flushConsumerOffsetInterval, b.channelExpiredTimeout) == (
        8,
        5000,
        120000,
    )
    assert (b.registerNameServerPeriod, b.registerBrokerTimeoutMills, b.compatibleWithOldNameSrv) == (
        30000,
        24000,
        True,
    )
    assert (b.regionId, b.brokerElectionPriority, b.transactionCheckMax) == ("DefaultRegion", 2**31 - 1, 15)
    n = NamesrvConfig()
    assert (
        n.listenPort,
        n.scanNotActiveBrokerInterval,
        n.notifyMinBrokerIdChanged,
        n.enableAllTopicList,
    ) == (
        9876,
        5000,
        False,
        True,
    )
    assert n.kvConfigPath == os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json")
    c = ControllerConfig()
    assert (c.controllerType, c.mappedFileSize, c.notifyBrokerRoleChanged, c.electMasterMaxRetryCount) == (
        "DLedger",
        1 << 30,
        True,
        3,
    )
    assert c.store_path == os.path.join(os.path.expanduser("~"), "DLedgerController")


def test_broker_display_name() -> None:
    b = BrokerConfig(brokerClusterName="C", brokerName="broker-a", brokerId=2)
    assert b.broker_display_name == "C_broker-a_2"


# --- .properties: kinds and routing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "name", "kind"),
    [
        ({"brokerConfigPaths", "listenPort"}, "x.conf", "container"),
        ({"brokerName", "listenPort"}, "x.conf", "broker"),
        ({"brokerRole"}, "namesrv.conf", "broker"),
        ({"kvConfigPath"}, "x.conf", "namesrv"),
        ({"enableControllerInNamesrv", "controllerDLegerPeers"}, "x.conf", "namesrv"),
        ({"supportActingMaster"}, "x.conf", "namesrv"),
        ({"controllerDLegerPeers", "controllerDLegerSelfId"}, "x.conf", "controller"),
        (set(), "namesrv.properties", "namesrv"),
        ({"listenPort"}, "my-controller.conf", "controller"),
        ({"listenPort"}, "broker-container1.conf", "container"),
        ({"listenPort"}, "anything.conf", "broker"),
    ],
)
def test_detect_kind(keys: set[str], name: str, kind: str) -> None:
    assert detect_kind(keys, name) == kind


def test_broker_file_keys_split_between_broker_and_store(tmp_path: Path) -> None:
    f = write(
        tmp_path / "broker.conf",
        "brokerClusterName = C1\nbrokerName = broker-x\nbrokerRole = SYNC_MASTER\n"
        "flushDiskType = SYNC_FLUSH\nlistenPort = 20911\nmaxMessageSize = 1024\n"
        "autoCreateTopicEnable = false\ndiskSpaceWarningLevelRatio = 0.5\nbrokerIP1 = 10.0.0.1\n"
        "storePathRootDir = /tmp/x/store\nserverWorkerThreads = 2\nbindAddress = 127.0.0.1\n",
    )
    cfg = load_process_config(f)
    assert cfg.namesrv is None
    assert cfg.container is None
    (spec,) = cfg.brokers
    assert spec.source == str(f)
    assert (spec.broker.brokerClusterName, spec.broker.brokerName, spec.broker.listenPort) == (
        "C1",
        "broker-x",
        20911,
    )
    assert spec.broker.autoCreateTopicEnable is False
    assert spec.broker.brokerIP1 == "10.0.0.1"
    assert spec.broker.brokerIP2 == "127.0.0.1"  # not given: defaults to the specific bindAddress
    assert spec.store.brokerRole is BrokerRole.SYNC_MASTER
    assert spec.store.flushDiskType is FlushDiskType.SYNC_FLUSH
    assert spec.store.maxMessageSize == 1024
    assert spec.store.diskSpaceWarningLevelRatio == 0.5
    assert spec.store.storePathRootDir == "/tmp/x/store"
    # standalone broker: HA port derived from the listen port, netty keys read
    assert spec.store.haListenPort == 20912
    assert cfg.nettyServer.serverWorkerThreads == 2


def test_container_file_loads_relative_broker_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sub = tmp_path / "brokers"
    sub.mkdir()
    write(
        sub / "a.conf",
        "brokerName=broker-a\nlistenPort=30911\nhaListenPort=40000\nnamesrvAddr=1.2.3.4:9876\n"
        f"storePathRootDir={tmp_path}/a\n",
    )
    write(
        sub / "b.conf",
        "brokerName=broker-b\nlistenPort=30921\nbrokerRole=SLAVE\nbrokerId=1\nserverWorkerThreads=9\n"
        f"storePathRootDir={tmp_path}/b\n",
    )
    c = write(
        tmp_path / "c.properties",
        "listenPort=30811\nnamesrvAddr=127.0.0.1:9876\nbindAddress=127.0.0.1\n"
        "brokerConfigPaths=brokers/a.conf:brokers/b.conf\n",
    )
    with caplog.at_level(logging.WARNING, "container.config"):
        cfg = load_process_config(c)
    assert cfg.container is not None
    assert cfg.container.listenPort == 30811
    assert cfg.container.brokerContainerIP == "127.0.0.1"
    a, b = cfg.brokers
    assert a.source == str(sub / "a.conf")
    assert (a.broker.brokerName, b.broker.brokerName) == ("broker-a", "broker-b")
    # the container's name server address wins, HA port is forced to listenPort+1
    assert a.broker.namesrvAddr == b.broker.namesrvAddr == "127.0.0.1:9876"
    assert (a.store.haListenPort, b.store.haListenPort) == (30912, 30922)
    assert b.store.brokerRole is BrokerRole.SLAVE
    assert b.broker.brokerId == 1
    # a broker file's netty keys are not read inside a container
    assert cfg.nettyServer.serverWorkerThreads == 8
    text = caplog.text
    assert "haListenPort 40000 replaced" in text
    assert "namesrvAddr 1.2.3.4:9876 replaced" in text
    assert "serverWorkerThreads (line 5)" in text


def test_namesrv_file_with_embedded_controller(tmp_path: Path) -> None:
    f = write(
        tmp_path / "namesrv.conf",
        "enableControllerInNamesrv = true\ncontrollerDLegerGroup = group1\n"
        "controllerDLegerPeers = n0-127.0.0.1:9878;n1-127.0.0.1:9868\ncontrollerDLegerSelfId = n1\n"
        "scanNotActiveBrokerInterval = 1500\nlistenPort = 19876\nprocessReadEvent = true\n",
    )
    cfg = load_process_config(f)
    assert cfg.namesrv is not None
    assert cfg.controller is not None
    assert cfg.namesrv.listenPort == 19876
    # a key both know goes to both, as upstream's properties2Object does
    assert cfg.namesrv.scanNotActiveBrokerInterval == cfg.controller.scanNotActiveBrokerInterval == 1500
    assert cfg.controller.processReadEvent is True
    assert cfg.controller.peers == {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868"}
    assert cfg.controller.self_address == "127.0.0.1:9868"


def test_namesrv_file_without_embedded_controller_skips_controller_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = write(tmp_path / "n.conf", "supportActingMaster=true\ncontrollerDLegerGroup=g\n")
    with caplog.at_level(logging.WARNING, "container.config"):
        cfg = load_process_config(f)
    assert cfg.namesrv is not None
    assert cfg.namesrv.supportActingMaster is True
    assert cfg.controller is None
    assert "controllerDLegerGroup (line 2)" in caplog.text


def test_standalone_controller_file(tmp_path: Path) -> None:
    f = write(
        tmp_path / "controller-n0.conf",
        "controllerDLegerGroup = group1\ncontrollerDLegerPeers = n0-127.0.0.1:9878\n"
        "controllerDLegerSelfId = n0\ncontrollerStorePath = ~/ctl\nrmqRaftHeartbeatIntervalMillis = 100\n",
    )
    cfg = load_process_config(f)
    assert cfg.controller is not None
    assert cfg.namesrv is None
    assert cfg.controller.controllerStorePath == os.path.join(os.path.expanduser("~"), "ctl")
    assert cfg.controller.rmqRaftHeartbeatIntervalMillis == 100


def test_upstream_distribution_files_load(tmp_path: Path) -> None:
    # Shaped like upstream's distribution/conf/container/2container-2m-2s files.
    write(
        tmp_path / "broker-a-in-container1.conf",
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\nbrokerRole=SYNC_MASTER\n"
        "flushDiskType=ASYNC_FLUSH\nstorePathRootDir=/root/broker-a/store\n"
        "storePathCommitLog=/root/broker-a/store/commitlog\nlistenPort=10911\nhaListenPort=10912\n"
        "totalReplicas=2\ninSyncReplicas=2\nminInSyncReplicas=1\nenableAutoInSyncReplicas=true\n"
        "slaveReadEnable=true\nbrokerHeartbeatInterval=1000\nbrokerNotActiveTimeoutMillis=5000\n"
        "sendHeartbeatTimeoutMillis=1000\nenableSlaveActingMaster=true\n",
    )
    c = write(
        tmp_path / "broker-container1.conf",
        f"listenPort=10811\nnamesrvAddr=172.22.144.49:9876\nfetchNamesrvAddrByAddressServer=false\n"
        f"brokerConfigPaths={tmp_path / 'broker-a-in-container1.conf'}\n",
    )
    cfg = load_process_config(c)
    (spec,) = cfg.brokers
    assert spec.store.totalReplicas == 2
    assert spec.broker.enableSlaveActingMaster is True
    assert spec.store.storePathCommitLog == "/root/broker-a/store/commitlog"


def test_duplicate_key_later_wins(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = write(tmp_path / "b.conf", "brokerName=one\nbrokerName=two\n")
    with caplog.at_level(logging.WARNING, "container.config"):
        cfg = load_process_config(f)
    assert cfg.brokers[0].broker.brokerName == "two"
    assert "b.conf:2: brokerName given again (line 1)" in caplog.text


def test_ignored_upstream_keys_load_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = write(tmp_path / "b.conf", "brokerName=x\nsendMessageThreadPoolNums=4\ntransientStorePoolSize=5\n")
    with caplog.at_level(logging.WARNING, "container.config"):
        load_process_config(f)
    assert "sendMessageThreadPoolNums (line 2)" in caplog.text
    assert "transientStorePoolSize (line 3)" in caplog.text


# --- paths -----------------------------------------------------------------------------------------


def test_path_placeholders_and_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    f = write(
        tmp_path / "n.conf",
        "kvConfigPath=${user.home}/kv.json\nconfigStorePath=rel/ns.properties\nrocketmqHome=~\n",
    )
    cfg = load_process_config(f, "namesrv")
    assert cfg.namesrv is not None
    assert cfg.namesrv.kvConfigPath == os.path.join(os.path.expanduser("~"), "kv.json")
    assert cfg.namesrv.configStorePath == str(tmp_path / "rel" / "ns.properties")
    assert cfg.namesrv.rocketmqHome == os.path.expanduser("~")
    assert cfg.dataDir is None


def test_data_dir_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = write(tmp_path / "b.conf", "storePathRootDir=${rmq.data.dir}/broker-a\n")
    cfg = load_process_config(f, data_dir=str(tmp_path / "d"))
    assert cfg.brokers[0].store.storePathRootDir == str(tmp_path / "d" / "broker-a")
    assert cfg.dataDir == str(tmp_path / "d")
    monkeypatch.setenv("RMQ_DATA_DIR", str(tmp_path / "env"))
    cfg = load_process_config(f)
    assert cfg.brokers[0].store.storePathRootDir == str(tmp_path / "env" / "broker-a")


# --- unknown keys and bad values -------------------------------------------------------------------


def test_unknown_keys_in_properties_are_all_listed_with_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "a.conf", "brokerName=a\nbrokerNmae=x\n\n# c\nnoSuchKey=1\n")
    c = write(tmp_path / "c.conf", "brokerConfigPaths=a.conf\nlistenPrt=1\n")
    with pytest.raises(UnknownConfigKey) as err:
        load_process_config(c)
    found = [(k.file, k.line, k.key) for k in err.value.keys]
    assert found == [
        (str(c), 2, "listenPrt"),
        (str(tmp_path / "a.conf"), 2, "brokerNmae"),
        (str(tmp_path / "a.conf"), 5, "noSuchKey"),
    ]
    text = str(err.value)
    assert f"{tmp_path / 'a.conf'}:2: unknown key 'brokerNmae' (did you mean 'brokerName'?)" in text
    assert f"{c}:2: unknown key 'listenPrt' (did you mean 'listenPort'?)" in text


TOML_WITH_MISTAKES = """\
# a process
[namesrv]
listenPort = 9876
kvConfigPth = "x"

[[broker]]
brokerName = "a"

[[broker]]
brokerName = "b"
"brokerIdd" = 1
serverWorkerThreads = 3

[nettyServer]
bindAddress = "127.0.0.1"
multi = \"\"\"
notAKey = 1
\"\"\"

[brokers]
x = 1
"""


def test_unknown_keys_in_toml_have_the_right_lines(tmp_path: Path) -> None:
    f = write(tmp_path / "p.toml", TOML_WITH_MISTAKES)
    with pytest.raises(UnknownConfigKey) as err:
        load_process_config(f)
    found = {(k.line, k.key, k.hint) for k in err.value.keys}
    assert found == {
        (4, "kvConfigPth", "did you mean 'kvConfigPath'?"),
        (11, "brokerIdd", "did you mean 'brokerId'?"),
        (12, "serverWorkerThreads", "belongs in [nettyServer]"),
        (16, "multi", ""),
        (20, "brokers", "did you mean 'broker'?"),
    }
    assert all(k.file == str(f) for k in err.value.keys)


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("brokerName=a\nlistenPort=abc\n", 2, "listenPort"),
        ("listenPort=10911 1\n", 1, "listenPort"),
        ("autoCreateTopicEnable=yes\n", 1, "autoCreateTopicEnable"),
        ("brokerRole=MASTER\n", 1, "brokerRole"),
        ("diskSpaceWarningLevelRatio=high\n", 1, "diskSpaceWarningLevelRatio"),
        ("brokerId=99999999999999999999\n", 1, "brokerId"),
    ],
)
def test_bad_values_in_properties_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, key: str
) -> None:
    f = write(tmp_path / "b.conf", text)
    with pytest.raises(BadConfigValue) as err:
        load_process_config(f, "broker")
    assert (err.value.file, err.value.line, err.value.key) == (str(f), line, key)
    assert str(err.value).startswith(f"{f}:{line}: bad value for {key}:")


def test_bad_enum_value_lists_choices(tmp_path: Path) -> None:
    f = write(tmp_path / "b.conf", "brokerRole=MASTER\n")
    with pytest.raises(BadConfigValue, match="ASYNC_MASTER, SYNC_MASTER, SLAVE"):
        load_process_config(f)


@pytest.mark.parametrize(
    ("body", "line", "key"),
    [
        ('[namesrv]\nlistenPort = "9876"\n', 2, "listenPort"),
        ("[[broker]]\nbrokerName = 'a'\nautoCreateTopicEnable = 1\n", 3, "autoCreateTopicEnable"),
        ("[[broker]]\nbrokerRole = 'MASTER'\n", 2, "brokerRole"),
        ("[[broker]]\nbrokerId = true\n", 2, "brokerId"),
        ("[[broker]]\n[[broker]]\nbrokerName = 5\n", 3, "brokerName"),
    ],
)
def test_bad_values_in_toml_name_file_line_and_key(tmp_path: Path, body: str, line: int, key: str) -> None:
    f = write(tmp_path / "p.toml", body)
    with pytest.raises(BadConfigValue) as err:
        load_process_config(f)
    assert (err.value.line, err.value.key) == (line, key)


def test_toml_values_are_typed(tmp_path: Path) -> None:
    f = write(
        tmp_path / "p.toml",
        "[[broker]]\nbrokerName = 'a'\nbrokerRole = 'SLAVE'\nbrokerId = 2\ndiskSpaceWarningLevelRatio = 1\n",
    )
    (spec,) = load_process_config(f).brokers
    assert spec.store.brokerRole is BrokerRole.SLAVE
    assert spec.broker.brokerId == 2
    assert spec.store.diskSpaceWarningLevelRatio == 1.0
    assert spec.source == f"{f}:1"


def test_toml_syntax_error_is_a_config_error(tmp_path: Path) -> None:
    f = write(tmp_path / "p.toml", "[namesrv\n")
    with pytest.raises(ConfigError, match=r"p\.toml"):
        load_process_config(f)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_process_config(tmp_path / "nope.conf")
    c = write(tmp_path / "c.conf", "brokerConfigPaths=missing.conf\n")
    with pytest.raises(ConfigError, match=r"missing\.conf"):
        load_process_config(c)


# --- rules after loading ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[[broker]]\nbrokerRole = 'SLAVE'\n", "slave broker id must be > 0"),
        ("[[broker]]\ntotalReplicas = 1\ninSyncReplicas = 2\n", "invalid replicas number"),
        (
            "[namesrv]\nlistenPort = 9000\n[[broker]]\nlistenPort = 8999\n",
            "port 9000 is used by both the name server and broker",
        ),
        ("[[broker]]\nbrokerName='a'\n[[broker]]\nbrokerName='a'\nlistenPort=20000\n", "already described"),
        (
            # a block copied for another group with only its name and port changed
            "[[broker]]\nbrokerName='a'\nstorePathRootDir='/tmp/s'\n"
            "[[broker]]\nbrokerName='b'\nlistenPort=20000\nstorePathRootDir='/tmp/s/'\n",
            r"broker DefaultCluster_b_0 keeps its store in /tmp/s \(storePathRootDir\), as broker "
            r"DefaultCluster_a_0 does \(storePathRootDir\): give each broker of the process its own",
        ),
        (
            # two brokers left on upstream's default store, ~/store
            "[[broker]]\nbrokerName='a'\n[[broker]]\nbrokerName='b'\nlistenPort=20000\n",
            r"keeps its store in .*/store \(storePathRootDir\)",
        ),
        (
            "[[broker]]\nbrokerName='a'\nstorePathRootDir='/tmp/a'\nstorePathCommitLog='/tmp/cl'\n"
            "[[broker]]\nbrokerName='b'\nlistenPort=20000\nstorePathRootDir='/tmp/b'\nstorePathCommitLog='/tmp/cl'\n",
            r"keeps its store in /tmp/cl \(storePathCommitLog\), as broker DefaultCluster_a_0 does",
        ),
        (
            # controller mode too (as upstream's container): the configured id names the replica
            "[[broker]]\nbrokerName='a'\nbrokerId=-1\nbrokerRole='SLAVE'\nenableControllerMode=true\ncontrollerAddr='127.0.0.1:9878'\n"
            "[[broker]]\nbrokerName='a'\nbrokerId=-1\nbrokerRole='SLAVE'\nenableControllerMode=true\ncontrollerAddr='127.0.0.1:9878'\n"
            "listenPort=20000\n",
            r"already described .* give each replica of a group in one process its own",
        ),
        (
            "[controller]\ncontrollerDLegerGroup = 'g'\n",
            "needs controllerDLegerPeers, controllerDLegerSelfId",
        ),
        (
            "[controller]\ncontrollerDLegerGroup='g'\ncontrollerDLegerPeers='n0-127.0.0.1:1'\ncontrollerDLegerSelfId='n1'\n",
            "not one of the peers",
        ),
        (
            "[controller]\ncontrollerDLegerGroup='g'\ncontrollerDLegerPeers='n0:1'\ncontrollerDLegerSelfId='n0'\n",
            "bad peer",
        ),
        ("[controller]\ncontrollerType='jRaft'\n", "not supported"),
        (
            "[namesrv]\nenableControllerInNamesrv = true\n",
            r"needs the controller keys in a \[controller\] table",
        ),
        ("[[broker]]\nenableDLegerCommitLog = true\n", "not supported"),
        ("[[broker]]\naclEnable = true\n", "aclEnable=true is not supported"),
        ("[[broker]]\nenableControllerMode = true\n", "needs controllerAddr"),
        (
            "[[broker]]\nnamesrvAddr = '127.0.0.1;9876'\n",
            r"namesrvAddr '127.0.0.1;9876': '127.0.0.1' is not host:port",
        ),
        ("[[broker]]\nnamesrvAddr = '127.0.0.1:9876;b:98765'\n", r"'b:98765' is not host:port"),
        (
            "[[broker]]\nenableControllerMode = true\ncontrollerAddr = '127.0.0.1:9878;:9879'\n",
            r"controllerAddr .*':9879' is not host:port",
        ),
        (
            "[[broker]]\nlistenPort = 70000\n",
            r"broker .* is given port 70000, which is not a port \(0..65535\)",
        ),
        ("[[broker]]\nlistenPort = 65535\n", r"\(HA\) is given port 65536"),
        ("[namesrv]\nlistenPort = -1\n", "the name server is given port -1"),
        ("[[broker]]\nmappedFileSizeCommitLog = -1\n", "mappedFileSizeCommitLog must be positive, got -1"),
        ("[[broker]]\nmaxIndexNum = 0\n", "maxIndexNum must be positive, got 0"),
        (
            "[[broker]]\nflushIntervalCommitLog = 0\n",
            "flushIntervalCommitLog is the period of a loop.* got 0",
        ),
        ("[[broker]]\nbrokerHeartbeatInterval = -1\n", "brokerHeartbeatInterval is the period .* got -1"),
        (
            "[[broker]]\nmessageDelayLevel = '1s 5x'\n",
            "messageDelayLevel '1s 5x': '5x' is not a delay such as 5s",
        ),
        ("[[broker]]\nmessageDelayLevel = ''\n", "messageDelayLevel is empty"),
        ("[namesrv]\nscanNotActiveBrokerInterval = 0\n", "scanNotActiveBrokerInterval is the period"),
        (
            "[controller]\ncontrollerDLegerGroup='g'\ncontrollerDLegerPeers='n0-127.0.0.1:1'\n"
            "controllerDLegerSelfId='n0'\nscanInactiveMasterInterval = 0\n",
            "scanInactiveMasterInterval is the period",
        ),
        (
            "[[broker]]\nbrokerIP1 = 'no-such-host.invalid'\n",
            r"brokerIP1: 'no-such-host.invalid' is neither an IP address nor a host name that resolves",
        ),
        ("[namesrv]\n[nettyClient]\nuseTLS = true\n", "useTLS=true is not supported"),
        ("# nothing\n", "nothing to run"),
    ],
)
def test_invalid_combinations(tmp_path: Path, body: str, message: str) -> None:
    f = write(tmp_path / "p.toml", body)
    with pytest.raises(InvalidConfig, match=message):
        load_process_config(f)


def test_master_broker_id_is_forced_to_zero(tmp_path: Path) -> None:
    f = write(tmp_path / "b.conf", "brokerName=a\nbrokerId=3\nbrokerRole=SYNC_MASTER\n")
    assert load_process_config(f).brokers[0].broker.brokerId == 0


def test_controller_mode_broker_keeps_configured_id_and_role(tmp_path: Path) -> None:
    f = write(
        tmp_path / "b.conf",
        "brokerName=a\nbrokerId=-1\nbrokerRole=SLAVE\nenableControllerMode=true\ncontrollerAddr=127.0.0.1:9878\n",
    )
    (spec,) = load_process_config(f).brokers
    assert (spec.broker.brokerId, spec.store.brokerRole) == (-1, BrokerRole.SLAVE)
    assert spec.broker.controller_addr_list == ["127.0.0.1:9878"]


def test_brokers_default_to_the_local_name_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    f = write(
        tmp_path / "p.toml",
        "[nettyServer]\nbindAddress='127.0.0.1'\n[namesrv]\nlistenPort=19876\n[[broker]]\nlistenPort=0\n",
    )
    cfg = load_process_config(f)
    (spec,) = cfg.brokers
    assert spec.broker.namesrvAddr == "127.0.0.1:19876"
    assert spec.broker.brokerIP1 == "127.0.0.1"
    assert spec.store.haListenPort == 0  # ephemeral main port: ephemeral HA port


# --- --print-config round trip -----------------------------------------------------------------------


def _comparable(cfg: ProcessConfig) -> dict[str, object]:
    data = msgspec.to_builtins(cfg)
    data.pop("source")
    data.pop("dataDir")
    for b in data["brokers"]:
        b.pop("source")
    if data["container"] is not None:
        data["container"].pop("brokerConfigPaths")
    return data


CONF_FILES = sorted(p for p in (PROJECT_ROOT / "conf").rglob("*") if p.is_file())


@pytest.mark.parametrize("conf", CONF_FILES, ids=lambda p: str(p.relative_to(PROJECT_ROOT / "conf")))
def test_print_config_round_trips_through_the_loader(conf: Path, tmp_path: Path) -> None:
    cfg = load_process_config(conf, data_dir=str(tmp_path / "data"))
    out = write(tmp_path / "effective.toml", render_toml(cfg))
    again = load_process_config(out)
    assert _comparable(again) == _comparable(cfg)


def test_rendered_toml_contains_every_key(tmp_path: Path) -> None:
    cfg = load_process_config(PROJECT_ROOT / "conf" / "dev-cluster.toml", data_dir=str(tmp_path))
    text = render_toml(cfg)
    for name in msgspec.structs.fields(MessageStoreConfig):
        assert f"\n{name.name} = " in text or f"\n# {name.name} = " in text
    assert "[namesrv]" in text
    assert text.count("[[broker]]") == 4


def test_dev_cluster_file(tmp_path: Path) -> None:
    cfg = load_process_config(PROJECT_ROOT / "conf" / "dev-cluster.toml", data_dir=str(tmp_path))
    assert cfg.namesrv is not None
    assert cfg.namesrv.listenPort == 9876
    assert cfg.nettyServer.bindAddress == "127.0.0.1"
    names = [
        (
            b.broker.brokerName,
            b.broker.brokerId,
            b.store.brokerRole.value,
            b.broker.listenPort,
            b.store.haListenPort,
        )
        for b in cfg.brokers
    ]
    assert names == [
        ("broker-a", 0, "ASYNC_MASTER", 10911, 10912),
        ("broker-b", 0, "ASYNC_MASTER", 10921, 10922),
        ("broker-a", 1, "SLAVE", 10915, 10916),
        ("broker-b", 1, "SLAVE", 10925, 10926),
    ]
    assert all(b.broker.autoCreateTopicEnable for b in cfg.brokers)
    assert cfg.brokers[0].store.storePathRootDir == str(tmp_path / "broker-a")
    assert cfg.dataDir == str(tmp_path)
