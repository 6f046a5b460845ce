"""Transport settings: upstream ``NettyServerConfig`` and ``NettyClientConfig`` keys.

Upstream properties files carry these next to the component keys, so they are known keys here too.
rmq-container has one trio transport per process, not Netty, so most of them have no effect; each
field's comment says whether it is honored. ``listenPort`` is not here: every component (name
server, broker, container) owns its own port in its own config struct.

In a TOML process file they live in the ``[nettyServer]`` and ``[nettyClient]`` tables. In
``.properties`` files they may appear in a name server, controller or container file; in a broker file
loaded through a container they are ignored with a warning, as upstream ignores them there.
"""

from __future__ import annotations

import os

import msgspec


class NettyServerConfig(msgspec.Struct, kw_only=True):
    #: Honored: the host every listener of the process binds.
    bindAddress: str = "0.0.0.0"
    #: Ignored (no thread pools; requests run as trio tasks).
    serverWorkerThreads: int = 8
    serverCallbackExecutorThreads: int = 0
    serverSelectorThreads: int = 3
    #: Ignored (upstream: bounds on oneway / async requests the server itself sends).
    serverOnewaySemaphoreValue: int = 256
    serverAsyncSemaphoreValue: int = 64
    #: Honored: a connection without a read or a write this long (and no request open) is
    #: closed, as upstream's idle handler does; 0 never closes one.
    serverChannelMaxIdleTimeSeconds: int = 120
    #: Ignored (0 = OS default, which is what we use).
    serverSocketSndBufSize: int = 0
    serverSocketRcvBufSize: int = 0
    writeBufferHighWaterMark: int = 0
    writeBufferLowWaterMark: int = 0
    #: Ignored (trio's default backlog).
    serverSocketBacklog: int = 1024
    #: Ignored (Netty internals).
    serverNettyWorkerGroupEnable: bool = True
    serverPooledByteBufAllocatorEnable: bool = True
    enableShutdownGracefully: bool = False
    shutdownWaitTimeSeconds: int = 30
    useEpollNativeSelector: bool = False


class NettyClientConfig(msgspec.Struct, kw_only=True):
    #: Ignored (no thread pools).
    clientWorkerThreads: int = 4
    clientCallbackExecutorThreads: int = msgspec.field(default_factory=lambda: os.cpu_count() or 1)
    clientOnewaySemaphoreValue: int = 65535
    clientAsyncSemaphoreValue: int = 65535
    #: Honored: TCP connect timeout of the process's shared remoting client.
    connectTimeoutMillis: int = 3000
    #: Ignored.
    channelNotActiveInterval: int = 1000 * 60
    scanAvailableNameSrv: bool = True
    #: Ignored for now (the remoting client keeps idle connections).
    clientChannelMaxIdleTimeSeconds: int = 120
    #: Ignored (OS defaults / Netty internals).
    clientSocketSndBufSize: int = 0
    clientSocketRcvBufSize: int = 0
    clientPooledByteBufAllocatorEnable: bool = False
    #: Honored: the process's shared remoting client closes a connection on which a call timed
    #: out (the next call connects anew).
    clientCloseSocketIfTimeout: bool = True
    #: Must stay false: TLS is not implemented (the loader rejects true).
    useTLS: bool = False
    socksProxyConfig: str = "{}"
    writeBufferHighWaterMark: int = 0
    writeBufferLowWaterMark: int = 0
    disableCallbackExecutor: bool = False
    disableNettyWorkerGroup: bool = False
    maxReconnectIntervalTimeSeconds: int = 60
    enableReconnectForGoAway: bool = True
