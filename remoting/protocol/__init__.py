"""Typed request/response headers and JSON bodies, grouped by the server that handles them.

:mod:`remoting.protocol.common` holds bodies shared by several servers (TopicConfig, DataVersion,
TopicConfigSerializeWrapper, MessageQueue, KVTable, TopicList, permission bits);
:mod:`remoting.protocol.namesrv` the name server's headers and bodies (routes, cluster info,
registration). Bodies are encoded with :func:`remoting.fastjson.dumps` and decoded with
:func:`remoting.fastjson.decode`; every struct's ``encode``/``decode`` helpers do exactly that.
"""
