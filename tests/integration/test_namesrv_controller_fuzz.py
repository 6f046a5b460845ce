"""Random requests to a live name server and a live controller peer (hypothesis), as
``test_broker_fuzz`` does for a broker: every request code either serves, plus unknown ones and Raft
messages from strangers, with header fields drawn from their request headers' field names and
values chosen to hit edges, and bodies that are random bytes, JSON, or shaped as brokers and
``rmq-admin`` send them (registrations with topic tables, sync state sets, name lists).

What must hold after any such sequence (the "Bad input" standard):

- each request is answered (a Raft message, oneway, is not), an error that must say why has a
  remark, a code the server does not serve is refused as such, and the server keeps serving;
- what the sequence could not name stays as it was: a broker registered with the name server
  before (its topic's route), and a broker group registered with the controller before (master,
  epoch, SyncStateSet) -- the fuzz draws names from a pool that does not hold theirs;
- both start again from the files the sequence left behind: the name server's KV config reads back
  as it was, and the controller replays its Raft log to exactly the state it had (whatever the
  requests did to the replicated state machine, every peer would rebuild the same state), then
  still registers and elects a new group.

Elections on broker expiry are off (long scan intervals) so that the state before the restart is
the sequence's alone. ``NAMESRV_CONTROLLER_FUZZ_EXAMPLES=3000`` runs a longer search (25 by
default); ``FUZZ_REMARKS=1`` with ``--hypothesis-show-statistics`` lists the responses."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import msgspec
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.config import ControllerConfig
from controller.raft_transport import RAFT_MESSAGE
from controller.service import ControllerPeer
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.headers import CommandHeader, encode_header
from remoting.protocol import controller as controller_headers
from remoting.protocol import namesrv as namesrv_headers
from remoting.protocol.common import DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.controller import SyncStateSet
from remoting.protocol.namesrv import RegisterBrokerBody, RegisterBrokerRequestHeader, crc32
from remoting.server import RemotingServer
from tests.integration.broker_requests import describe
from tests.integration.fuzzkit import (
    RequestPool,
    any_value,
    check_answer,
    field_names,
    header_classes,
    json_values,
    typed_value,
)

GROUP = "FuzzControllerGroup"
MARKER_CLUSTER = "MarkerCluster"
MARKER_BROKER = "MarkerBroker"
MARKER_ADDR = "127.0.0.1:2"
MARKER_TOPIC = "FuzzMarkerTopic"
ANSWER_TIMEOUT = 5.0

NAMESRV, CONTROLLER = "namesrv", "controller"
#: the settings requests: a valid value changes what the server does (and a name server setting
#: persists), so "still serving" could not tell a bug from a setting
EXCLUDED = {RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.UPDATE_CONTROLLER_CONFIG}
CODES = sorted({int(c) for c in RequestCode} | {0, 9999, -7, RAFT_MESSAGE})
#: oneway on the wire: never answered
ONEWAY = {RAFT_MESSAGE}
MUST_EXPLAIN = {
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
    ResponseCode.INVALID_PARAMETER,
    ResponseCode.CONTROLLER_INVALID_REQUEST,
    ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
    ResponseCode.CONTROLLER_INVALID_MASTER,
    ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
    ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
    ResponseCode.CONTROLLER_INVALID_REPLICAS,
    ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
}

HEADERS = header_classes(namesrv_headers, controller_headers)
FIELDS = field_names(HEADERS)
HEADER_OF: dict[int, type[CommandHeader]] = {
    RequestCode.REGISTER_BROKER: namesrv_headers.RegisterBrokerRequestHeader,
    RequestCode.UNREGISTER_BROKER: namesrv_headers.UnRegisterBrokerRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: namesrv_headers.GetRouteInfoRequestHeader,
    RequestCode.BROKER_HEARTBEAT: namesrv_headers.BrokerHeartbeatRequestHeader,
    RequestCode.QUERY_DATA_VERSION: namesrv_headers.QueryDataVersionRequestHeader,
    RequestCode.GET_BROKER_MEMBER_GROUP: namesrv_headers.GetBrokerMemberGroupRequestHeader,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: namesrv_headers.DeleteTopicFromNamesrvRequestHeader,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: namesrv_headers.RegisterTopicRequestHeader,
    RequestCode.GET_TOPICS_BY_CLUSTER: namesrv_headers.GetTopicsByClusterRequestHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: namesrv_headers.WipeWritePermOfBrokerRequestHeader,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: namesrv_headers.AddWritePermOfBrokerRequestHeader,
    RequestCode.PUT_KV_CONFIG: namesrv_headers.PutKVConfigRequestHeader,
    RequestCode.GET_KV_CONFIG: namesrv_headers.GetKVConfigRequestHeader,
    RequestCode.DELETE_KV_CONFIG: namesrv_headers.DeleteKVConfigRequestHeader,
    RequestCode.GET_KVLIST_BY_NAMESPACE: namesrv_headers.GetKVListByNamespaceRequestHeader,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: controller_headers.GetNextBrokerIdRequestHeader,
    RequestCode.CONTROLLER_APPLY_BROKER_ID: controller_headers.ApplyBrokerIdRequestHeader,
    RequestCode.CONTROLLER_REGISTER_BROKER: controller_headers.RegisterBrokerToControllerRequestHeader,
    RequestCode.CONTROLLER_GET_REPLICA_INFO: controller_headers.GetReplicaInfoRequestHeader,
    RequestCode.CONTROLLER_ELECT_MASTER: controller_headers.ElectMasterRequestHeader,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: controller_headers.AlterSyncStateSetRequestHeader,
    RequestCode.CLEAN_BROKER_DATA: controller_headers.CleanControllerBrokerDataRequestHeader,
}
NAMES = [
    "FuzzTopic",
    "%RETRY%FuzzGroup",
    "TBW102",
    "DefaultCluster",
    "broker-a",
    "broker-b",
    "127.0.0.1:1",
    "127.0.0.1:10911",
    "ORDER_TOPIC_CONFIG",
    "n0",
    "n1",
]
ANY_VALUE = any_value(NAMES)
NAME = st.sampled_from(NAMES)
#: broker-a's two replicas (brought up on both servers before the requests)
BROKER_A = ["127.0.0.1:1", "127.0.0.1:10911"]
SMALL = st.integers(-1, 5)
SPECIAL_VALUES: dict[str, st.SearchStrategy[str]] = {
    "registerCheckCode": st.sampled_from(["127.0.0.1:1;1", "127.0.0.1:10911;0", "x", ";", ""]),
    "brokerControllerIdsToClean": st.sampled_from(["1", "1;2", "", ";", "a;1"]),
    # mostly broker-a's own names, ids and epochs (it is up on both servers), so that the
    # requests get past "not registered" into elections, SyncStateSet changes and clean-ups
    "brokerName": st.one_of(st.just("broker-a"), NAME),
    "clusterName": st.one_of(st.just("DefaultCluster"), NAME),
    "brokerAddr": st.one_of(st.sampled_from(BROKER_A), NAME),
    "brokerAddress": st.one_of(st.sampled_from(BROKER_A), NAME),
    "brokerId": st.one_of(st.sampled_from(["1", "2"]), SMALL.map(str)),
    "appliedBrokerId": st.one_of(st.sampled_from(["2", "3"]), SMALL.map(str)),
    "masterBrokerId": st.one_of(st.sampled_from(["1", "2"]), SMALL.map(str)),
    "masterEpoch": st.one_of(st.sampled_from(["1", "2", "3"]), SMALL.map(str)),
    # RAFT_MESSAGE's own fields: a group and a sender that are not this peer's, or are
    "group": st.sampled_from([GROUP, "OtherGroup", ""]),
    "from": st.sampled_from(["n0", "n1", "n9", ""]),
}
JSON_KEYS = [
    *FIELDS,
    "topicConfigSerializeWrapper",
    "topicConfigTable",
    "dataVersion",
    "filterServerList",
    "queueDatas",
    "brokerDatas",
    "syncStateSet",
    "syncStateSetEpoch",
    "topicName",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "counter",
]
JSON = json_values(JSON_KEYS, NAMES)
TOPIC_CONFIG = st.fixed_dictionaries(
    {"topicName": NAME},
    optional={
        "readQueueNums": SMALL,
        "writeQueueNums": SMALL,
        "perm": st.sampled_from([0, 2, 4, 6, 7, 9]),
        "order": st.booleans(),
        "topicSysFlag": SMALL,
    },
)
REGISTER_BODY = st.fixed_dictionaries(
    {
        "topicConfigSerializeWrapper": st.fixed_dictionaries(
            {
                "topicConfigTable": st.dictionaries(NAME, TOPIC_CONFIG, max_size=3),
                "dataVersion": st.fixed_dictionaries(
                    {"counter": st.integers(-1, 2**40), "timestamp": st.integers(0, 2**42)}
                ),
            }
        ),
        "filterServerList": st.lists(NAME, max_size=2),
    }
)
BODY_OF: dict[int, st.SearchStrategy[object]] = {
    RequestCode.REGISTER_BROKER: REGISTER_BODY,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: st.fixed_dictionaries(
        {
            "queueDatas": st.lists(
                st.fixed_dictionaries(
                    {
                        "brokerName": NAME,
                        "readQueueNums": SMALL,
                        "writeQueueNums": SMALL,
                        "perm": st.sampled_from([0, 6, 7]),
                        "topicSysFlag": SMALL,
                    }
                ),
                max_size=2,
            )
        }
    ),
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: st.fixed_dictionaries(
        {
            "syncStateSet": st.lists(st.one_of(st.sampled_from([1, 2]), SMALL), max_size=3),
            "syncStateSetEpoch": st.one_of(st.sampled_from([1, 2, 3]), SMALL),
        }
    ),
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: st.lists(NAME, max_size=3),
}
NAMESRV_CODES = frozenset(NamesrvController(NamesrvConfig(kvConfigPath=os.devnull)).processor_table.handlers)
CONTROLLER_CODES = frozenset(
    {
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.CONTROLLER_GET_METADATA_INFO,
        RequestCode.GET_CONTROLLER_CONFIG,
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RequestCode.CONTROLLER_GET_REPLICA_INFO,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        RequestCode.CLEAN_BROKER_DATA,
        RAFT_MESSAGE,
    }
)
BODIES = st.one_of(st.none(), st.binary(max_size=256), JSON.map(msgspec.json.encode))


def _valid(cls: type[CommandHeader], name: str, wire_name: str) -> st.SearchStrategy[str]:
    return typed_value(cls, name, wire_name, SPECIAL_VALUES, NAME)


POOL = RequestPool(
    codes=st.sampled_from(sorted(HEADER_OF.keys() | BODY_OF.keys() | {RAFT_MESSAGE}))
    | st.sampled_from(CODES),
    header_of=HEADER_OF,
    headers=HEADERS,
    body_of=BODY_OF,
    bodies=BODIES,
    valid=_valid,
    anything=ANY_VALUE,
    fields=FIELDS,
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, RemotingCommand]:
    """(which server, a request of any code) -- see :meth:`tests.integration.fuzzkit.RequestPool.draw`."""
    cmd = POOL.draw(draw)
    # mostly the server that serves the code (each also gets the other's codes now and then)
    if cmd.code in NAMESRV_CODES:
        target = NAMESRV if draw(st.integers(0, 5)) else CONTROLLER
    elif cmd.code in CONTROLLER_CODES:
        target = CONTROLLER if draw(st.integers(0, 5)) else NAMESRV
    else:
        target = draw(st.sampled_from([NAMESRV, CONTROLLER]))
    return target, cmd


# --------------------------------------------------------------------------- the two servers


@dataclass
class Servers:
    namesrv: NamesrvController
    controller: ControllerPeer
    addr: dict[str, str]


async def _start(nursery: trio.Nursery, root: str, controller_port: int = 0) -> Servers:
    namesrv = NamesrvController(
        NamesrvConfig(
            kvConfigPath=os.path.join(root, "kvConfig.json"),
            configStorePath=os.path.join(root, "namesrv.properties"),
            orderMessageEnable=True,
        )
    )
    await nursery.start(namesrv.run)
    server = RemotingServer(name="fuzz")
    ns = await server.add_listener("127.0.0.1", 0, namesrv.processor_table, name="namesrv")
    # the controller's peer list names its own address: bind first, then configure
    port = controller_port
    if not port:
        probe = trio.socket.socket()
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
    client = RemotingClient(name="fuzz.controller")
    controller = ControllerPeer(
        ControllerConfig(
            controllerDLegerGroup=GROUP,
            controllerDLegerPeers=f"n0-127.0.0.1:{port}",
            controllerDLegerSelfId="n0",
            controllerStorePath=os.path.join(root, "controller"),
            configStorePath=os.path.join(root, "controller.properties"),
            # no elections on expiry or inactivity: the state is the requests' alone
            scanNotActiveBrokerInterval=3_600_000,
            scanInactiveMasterInterval=3_600_000,
            rmqRaftHeartbeatIntervalMillis=50,
            rmqRaftElectionTimeoutMillis=200,
        ),
        client,
    )
    await server.add_listener("127.0.0.1", port, controller.processor_table(), name="controller")

    async def run_controller(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with client:
            await controller.run(task_status=task_status)

    await nursery.start(run_controller)
    await nursery.start(server.run)
    return Servers(namesrv, controller, {NAMESRV: ns.address, CONTROLLER: f"127.0.0.1:{port}"})


async def _call(
    client: RemotingClient, addr: str, code: int, ext: dict | None = None, body: bytes | None = None
) -> RemotingCommand:
    return await client.invoke(addr, request(code, ext, body), ANSWER_TIMEOUT)


async def _controller_ready(client: RemotingClient, addr: str) -> None:
    with trio.fail_after(10):
        while True:
            r = await _call(client, addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
            if (r.ext_fields or {}).get("isLeader") == "true":
                return
            await trio.sleep(0.02)


async def _bring_up(client: RemotingClient, addr: str, cluster: str, name: str, replicas: list[str]) -> None:
    """A broker group as its replicas bring it up: ids, heartbeats, registrations, the first one
    elected master, then every replica in the SyncStateSet."""
    names = {"clusterName": cluster, "brokerName": name}
    for broker_id, broker in enumerate(replicas, 1):
        r = await _call(client, addr, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, names)
        assert (r.code, (r.ext_fields or {}).get("nextBrokerId")) == (ResponseCode.SUCCESS, str(broker_id)), (
            describe(r)
        )
        ext = {**names, "appliedBrokerId": broker_id, "registerCheckCode": f"{broker};1"}
        r = await _call(client, addr, RequestCode.CONTROLLER_APPLY_BROKER_ID, ext)
        assert r.code == ResponseCode.SUCCESS, describe(r)
        hb = {**names, "brokerAddr": broker, "brokerId": broker_id, "heartbeatTimeoutMills": 3_600_000}
        r = await _call(client, addr, RequestCode.BROKER_HEARTBEAT, hb)
        assert r.code == ResponseCode.SUCCESS, describe(r)
        ext = {**names, "brokerId": broker_id, "brokerAddress": broker}
        r = await _call(client, addr, RequestCode.CONTROLLER_REGISTER_BROKER, ext)
        assert r.code == ResponseCode.SUCCESS, describe(r)
    r = await _call(client, addr, RequestCode.CONTROLLER_ELECT_MASTER, {**names, "brokerId": 1})
    assert r.code == ResponseCode.SUCCESS, describe(r)
    assert ((r.ext_fields or {}).get("masterBrokerId"), (r.ext_fields or {}).get("masterEpoch")) == ("1", "1")
    if len(replicas) > 1:
        body = SyncStateSet(syncStateSet=frozenset(range(1, len(replicas) + 1)), syncStateSetEpoch=1).encode()
        ext = {"brokerName": name, "masterBrokerId": 1, "masterEpoch": 1}
        r = await _call(client, addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body)
        assert r.code == ResponseCode.SUCCESS, describe(r)


def _register(cluster: str, name: str, addr: str, topic: str) -> RemotingCommand:
    """A master's full registration with the name server: ``topic`` and the topic named after it."""
    body = RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
            topicConfigTable={
                t: TopicConfig(topicName=t, readQueueNums=4, writeQueueNums=4) for t in (topic, name)
            },
            dataVersion=DataVersion(counter=1),
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        brokerName=name,
        brokerAddr=addr,
        clusterName=cluster,
        haServerAddr=addr,
        brokerId=0,
        bodyCrc32=crc32(body),
    )
    return request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body)


async def _marker_state(
    client: RemotingClient, servers: Servers
) -> tuple[bytes | None, dict[str, str], bytes | None]:
    route = await _call(
        client, servers.addr[NAMESRV], RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": MARKER_TOPIC}
    )
    assert route.code == ResponseCode.SUCCESS, describe(route)
    info = await _call(
        client,
        servers.addr[CONTROLLER],
        RequestCode.CONTROLLER_GET_REPLICA_INFO,
        {"brokerName": MARKER_BROKER},
    )
    assert info.code == ResponseCode.SUCCESS, describe(info)
    return route.body, dict(info.ext_fields or {}), info.body


async def _run(root: str, sequence: list[tuple[str, RemotingCommand]]) -> None:
    async with trio.open_nursery() as nursery:
        servers = await _start(nursery, root)
        async with RemotingClient(name="fuzz.marker") as marker, RemotingClient(name="fuzz.client") as client:
            # the marker broker's registrations, on a connection of their own that stays open
            r = await marker.invoke(
                servers.addr[NAMESRV],
                _register(MARKER_CLUSTER, MARKER_BROKER, MARKER_ADDR, MARKER_TOPIC),
                ANSWER_TIMEOUT,
            )
            assert r.code == ResponseCode.SUCCESS, describe(r)
            await _controller_ready(marker, servers.addr[CONTROLLER])
            await _bring_up(marker, servers.addr[CONTROLLER], MARKER_CLUSTER, MARKER_BROKER, [MARKER_ADDR])
            before = await _marker_state(marker, servers)
            # broker-a, named in the pool, on both servers: the requests find a group to act on
            # (two replicas in sync on the controller; a master with FuzzTopic on the name server)
            await _bring_up(client, servers.addr[CONTROLLER], "DefaultCluster", "broker-a", BROKER_A)
            r = await client.invoke(
                servers.addr[NAMESRV],
                _register("DefaultCluster", "broker-a", BROKER_A[1], "FuzzTopic"),
                ANSWER_TIMEOUT,
            )
            assert r.code == ResponseCode.SUCCESS, describe(r)

            for target, cmd in sequence:
                if cmd.code in EXCLUDED:
                    continue
                addr = servers.addr[target]
                if cmd.code in ONEWAY:
                    await client.invoke_oneway(addr, cmd, ANSWER_TIMEOUT)
                    continue
                try:
                    response = await client.invoke(addr, cmd, ANSWER_TIMEOUT)
                except RemotingError as e:
                    raise AssertionError(f"{target}: {cmd} -> {type(e).__name__}: {e}") from None
                served = (
                    cmd.code in servers.namesrv.processor_table.handlers
                    if target == NAMESRV
                    else cmd.code in servers.controller.manager.codes()
                )
                check_answer(cmd, response, served=served, must_explain=MUST_EXPLAIN, where=f"{target} ")
            # still serving, and what the sequence could not name is as it was
            assert await _marker_state(marker, servers) == before
            kv = servers.namesrv.kv.snapshot()
            # stop the controller as a process stops (no elections for brokers going away)
            servers.controller.close()
            nursery.cancel_scope.cancel()
    state = servers.controller.replicas.snapshot()

    async with trio.open_nursery() as nursery:
        port = int(servers.addr[CONTROLLER].rpartition(":")[2])
        again = await _start(nursery, root, controller_port=port)
        assert again.namesrv.kv.snapshot() == kv
        async with RemotingClient(name="fuzz.after") as client:
            await _controller_ready(client, again.addr[CONTROLLER])
            with trio.move_on_after(10):
                while again.controller.replicas.snapshot() != state:
                    await trio.sleep(0.02)
            assert again.controller.replicas.snapshot() == state, "the Raft log replays to another state"
            # the state machine still moves: a new group registers and is elected
            await _bring_up(client, again.addr[CONTROLLER], MARKER_CLUSTER, "AfterFuzz", ["127.0.0.1:3"])
        nursery.cancel_scope.cancel()


@settings(
    max_examples=int(os.environ.get("NAMESRV_CONTROLLER_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sequence=st.lists(requests(), min_size=1, max_size=25))
def test_random_requests_never_stop_the_name_server_or_the_controller_or_change_what_they_cannot_name(
    sequence: list[tuple[str, RemotingCommand]],
) -> None:
    root = tempfile.mkdtemp(prefix="ns-ctl-fuzz-")
    try:
        trio.run(_run, root, sequence)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_fuzz_fields_cover_the_registration_and_election_headers() -> None:
    """The field pool really holds the header names the handlers read (guards the introspection)."""
    for name in (
        "brokerName",
        "brokerAddr",
        "clusterName",
        "brokerId",
        "namespace",
        "masterEpoch",
        "designateElect",
    ):
        assert name in FIELDS, name
