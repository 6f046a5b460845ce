"""Three controller peers in one process over real loopback sockets and real Raft files:
a broker registers and gets elected through the wire, then the leader controller dies and
another one takes over with the same state."""

from __future__ import annotations

from pathlib import Path

import trio

from controller.config import ControllerConfig
from controller.service import ControllerPeer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import ProcessorTable
from remoting.errors import RemotingError
from remoting.protocol.controller import SyncStateSet
from remoting.server import RemotingServer

C, B = "DefaultCluster", "broker-a"
BROKER = "127.0.0.1:30911"


class Node:
    def __init__(self, nid: str) -> None:
        self.nid = nid
        self.peer: ControllerPeer | None = None
        self.scope = trio.CancelScope()
        self.server = RemotingServer()
        self.table = ProcessorTable(on_close=self._on_close)
        self.address = ""

    def _on_close(self, conn: object) -> None:
        if self.peer is not None:
            self.peer.service.connection_closed(conn)


async def ask(
    client: RemotingClient, address: str, code: int, ext: dict | None = None, body: bytes | None = None
) -> RemotingCommand:
    return await client.invoke(address, request(code, ext, body), 3.0)


async def find_leader(client: RemotingClient, nodes: list[Node], skip: str | None = None) -> str:
    """Like a broker: ask the peers for metadata until one says who leads."""
    with trio.fail_after(20):
        while True:
            for node in nodes:
                if node.nid == skip:
                    continue
                try:
                    r = await ask(client, node.address, RequestCode.CONTROLLER_GET_METADATA_INFO)
                except RemotingError:
                    continue
                ext = r.ext_fields or {}
                if ext.get("isLeader") == "true":
                    return ext["controllerLeaderAddress"]
            await trio.sleep(0.05)


async def leader_call(
    client: RemotingClient, nodes: list[Node], code: int, ext: dict | None = None, body: bytes | None = None
) -> tuple[str, RemotingCommand]:
    """Like a broker: send to the leader; on "not leader" (an election under load) find it again."""
    with trio.fail_after(20):
        while True:
            leader = await find_leader(client, nodes)
            try:
                r = await ask(client, leader, code, ext, body)
            except RemotingError:
                continue
            if r.code not in (ResponseCode.CONTROLLER_NOT_LEADER, ResponseCode.SYSTEM_ERROR):
                return leader, r
            await trio.sleep(0.05)


async def test_three_controller_peers_over_sockets(tmp_path: Path) -> None:
    nodes = [Node(f"n{i}") for i in range(3)]
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        for node in nodes:
            listener = await node.server.add_listener("127.0.0.1", 0, node.table, name=node.nid)
            node.address = listener.address
        peers = ";".join(f"{n.nid}-{n.address}" for n in nodes)
        for node in nodes:
            config = ControllerConfig(
                controllerDLegerGroup="it",
                controllerDLegerPeers=peers,
                controllerDLegerSelfId=node.nid,
                controllerStorePath=str(tmp_path / node.nid),
                rmqRaftHeartbeatIntervalMillis=100,
                rmqRaftElectionTimeoutMillis=1000,
            )
            peer_client = RemotingClient()
            node.peer = ControllerPeer(config, peer_client)
            node.peer.register(node.table)

            async def run_node(
                node: Node = node,
                peer_client: RemotingClient = peer_client,
                *,
                task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
            ) -> None:
                with node.scope:
                    async with peer_client, trio.open_nursery() as inner:
                        await inner.start(node.server.run)
                        assert node.peer is not None
                        await inner.start(node.peer.run)
                        task_status.started()

            await nursery.start(run_node)

        _, r = await leader_call(
            client, nodes, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}
        )
        assert (r.code, r.ext_fields["nextBrokerId"]) == (ResponseCode.SUCCESS, "1")
        _, r = await leader_call(
            client,
            nodes,
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {"clusterName": C, "brokerName": B, "appliedBrokerId": 1, "registerCheckCode": f"{BROKER};1"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        for node in nodes:  # brokers heartbeat to every controller
            hb = {
                "clusterName": C,
                "brokerName": B,
                "brokerAddr": BROKER,
                "brokerId": 1,
                "heartbeatTimeoutMills": 60_000,
            }
            await client.invoke_oneway(node.address, request(RequestCode.BROKER_HEARTBEAT, hb))
        register = {
            "clusterName": C,
            "brokerName": B,
            "brokerId": 1,
            "brokerAddress": BROKER,
            "invokeTime": 1,
        }
        _, r = await leader_call(client, nodes, RequestCode.CONTROLLER_REGISTER_BROKER, register)
        assert r.code == ResponseCode.SUCCESS, r.remark
        elect = {"clusterName": C, "brokerName": B, "brokerId": 1}
        leader, r = await leader_call(client, nodes, RequestCode.CONTROLLER_ELECT_MASTER, elect)
        # a retried election (after an answer lost to a leader change) finds the master in place
        assert r.code in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST), r.remark
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("1", "1")

        follower = next(n for n in nodes if n.address != leader)
        r = await ask(client, follower.address, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        assert r.ext_fields["controllerLeaderAddress"] in {n.address for n in nodes}

        # the leader controller dies; another peer leads and still knows the master
        dead = next(n for n in nodes if n.address == leader)
        dead.scope.cancel()
        new_leader = await find_leader(client, nodes, skip=dead.nid)
        assert new_leader != leader
        with trio.fail_after(10):
            while True:
                r = await ask(client, new_leader, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
                if r.code == ResponseCode.SUCCESS:
                    break
                await trio.sleep(0.05)
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterAddress"]) == ("1", BROKER)
        assert SyncStateSet.decode(r.body) == SyncStateSet(syncStateSet=frozenset({1}), syncStateSetEpoch=1)
        nursery.cancel_scope.cancel()
