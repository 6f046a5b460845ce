"""remoting.log_owner: the process log names the broker (or listener) a record of a shared module
belongs to -- set by a broker's task, by the server for each connection, inherited by the tasks
and worker threads they start."""

from __future__ import annotations

import io
import logging

import trio

from container.logs import setup_logging
from container.process import _process_paused
from remoting.client import RemotingClient
from remoting.clock import AwakeClock
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import RequestContext
from remoting.log_owner import LOG_OWNER, set_log_owner
from remoting.server import ProcessorTable, RemotingServer

STORE_LOG = logging.getLogger("store.test_owner")


def all_tasks() -> list[trio.lowlevel.Task]:
    found, todo = [], [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        found.append(task)
        todo += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return found


def lines(out: io.StringIO) -> list[str]:
    return [line[line.index("[") :] for line in out.getvalue().splitlines()]


async def test_tasks_threads_and_connections_name_their_owner() -> None:
    out = io.StringIO()
    root_level = logging.getLogger().level
    setup_logging("INFO", stream=out)
    try:

        async def broker(name: str) -> None:
            set_log_owner(name)
            STORE_LOG.info("recovered")
            async with trio.open_nursery() as nursery:  # a task the broker starts
                nursery.start_soon(lambda: trio.to_thread.run_sync(STORE_LOG.info, "flushed in a thread"))
            logging.getLogger(f"broker.{name}").info("its own logger says it already")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker, "Cluster_broker-a_0")
            nursery.start_soon(broker, "Cluster_broker-b_0")
        STORE_LOG.info("nobody's")

        async def handler(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
            STORE_LOG.info("served a request")
            return req.response(ResponseCode.SUCCESS)

        table = ProcessorTable()
        table.register(10, handler)
        server = RemotingServer()
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            listener = await server.add_listener("127.0.0.1", 0, table, name="Cluster_broker-c_0")
            async with RemotingClient() as client:
                set_log_owner("Cluster_broker-d_0")  # the task that happens to open the connection
                response = await client.invoke(listener.address, request(10), timeout=5)
                assert response.code == ResponseCode.SUCCESS
                # the client's connection tasks are nobody's: a shared client serves every broker
                conn_tasks = [t for t in all_tasks() if "_serve_unowned" in t.name]
                assert conn_tasks, "the client's connection task"
                assert all(t.context.get(LOG_OWNER, "") == "" for t in conn_tasks)
                set_log_owner("")
            nursery.cancel_scope.cancel()
    finally:
        logging.getLogger().setLevel(root_level)
        logging.getLogger().handlers[:] = [
            h for h in logging.getLogger().handlers if not getattr(h, "_rmq_container", False)
        ]
    got = lines(out)
    for name in ("Cluster_broker-a_0", "Cluster_broker-b_0"):
        assert f"[store.test_owner {name}] recovered" in got
        assert f"[store.test_owner {name}] flushed in a thread" in got
        assert f"[broker.{name}] its own logger says it already" in got
    assert "[store.test_owner] nobody's" in got
    assert "[store.test_owner Cluster_broker-c_0] served a request" in got


def test_the_process_pause_line_is_the_process_s_whoever_noticed_the_pause() -> None:
    # the process's liveness clock notices a pause at its first reading after it, in whichever
    # task reads first -- often a broker's: the line belongs to the whole process, not that broker
    out = io.StringIO()
    root_level = logging.getLogger().level
    setup_logging("INFO", stream=out)
    clock = AwakeClock(lambda: now[0], _process_paused)
    now = [0.0]
    try:
        clock()
        set_log_owner("Cluster_broker-b_1")
        now[0] += 15_000
        clock()
        STORE_LOG.info("the broker's own record")
    finally:
        set_log_owner("")
        logging.getLogger().setLevel(root_level)
        logging.getLogger().handlers[:] = [
            h for h in logging.getLogger().handlers if not getattr(h, "_rmq_container", False)
        ]
    got = lines(out)
    assert got[0].startswith("[container] this process did not run for 14.9 s"), got
    assert "[store.test_owner Cluster_broker-b_1] the broker's own record" in got
