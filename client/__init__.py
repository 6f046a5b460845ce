"""The Python client: producer, pull/push consumers, a blocking facade, admin calls and ``rmq-admin``.

Depends only on :mod:`remoting` (the stored-message format is read with :mod:`remoting.protocol.message`).
"""

from client.blocking import BlockingLoop, BlockingProducer, BlockingPullConsumer, BlockingPushConsumer
from client.instance import ClientInstance
from client.message import (
    ConsumeStatus,
    Message,
    MessageExt,
    MQBrokerError,
    MQClientError,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer

__all__ = [
    "BlockingLoop",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingPushConsumer",
    "ClientInstance",
    "ConsumeStatus",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
]
