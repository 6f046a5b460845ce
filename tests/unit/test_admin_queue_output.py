"""The lines of ``queryCq``, ``getConsumerConfig`` and ``allocateMQ`` for bodies as an upstream
broker writes them (fields this broker does not keep included)."""

from __future__ import annotations

import json

from client.admin_queue_cli import (
    SubscriptionGroupConfigView,
    consume_queue_data_str,
    group_config_lines,
    query_cq_text,
    rebalance_json,
)
from remoting.protocol.broker import ConsumeQueueData, QueryConsumeQueueResponseBody
from remoting.protocol.common import MessageQueue

#: a GET_SUBSCRIPTIONGROUP_CONFIG body of an upstream 5.x broker (fastjson: fields sorted)
UPSTREAM_GROUP = (
    '{"attributes":{"k":"v"},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,'
    '"consumeFromMinEnable":false,"consumeMessageOrderly":true,"consumeTimeoutMinute":15,"groupName":"G",'
    '"groupRetryPolicy":{"exponentialRetryPolicy":{"initial":1000,"max":60000,"multiplier":3},'
    '"type":"EXPONENTIAL"},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":3,'
    '"retryQueueNums":1,"subscriptionDataSet":[{"expression":"*","expressionType":"TAG","topic":"T",'
    '"version":0}],"whichBrokerWhenConsumeSlowly":1}'
)


def test_group_config_lines_of_an_upstream_body_print_every_field_as_java_does() -> None:
    config = SubscriptionGroupConfigView.decode(UPSTREAM_GROUP)
    lines = group_config_lines("C", "b", config)
    assert lines[0] == "=============================C:b============================="
    values = {line[:40].rstrip(): line[43:] for line in lines[1:]}
    assert all(line[40:43] == "=  " for line in lines[1:])
    assert list(values) == [
        "groupName",
        "consumeEnable",
        "consumeFromMinEnable",
        "consumeBroadcastEnable",
        "consumeMessageOrderly",
        "retryQueueNums",
        "retryMaxTimes",
        "groupRetryPolicy",
        "brokerId",
        "whichBrokerWhenConsumeSlowly",
        "notifyConsumerIdsChangedEnable",
        "groupSysFlag",
        "consumeTimeoutMinute",
        "subscriptionDataSet",
        "attributes",
    ]
    assert values["consumeFromMinEnable"] == "false"
    assert values["retryMaxTimes"] == "3"
    assert values["groupRetryPolicy"] == (
        "GroupRetryPolicy{type=EXPONENTIAL, exponentialRetryPolicy=ExponentialRetryPolicy"
        "{initial=1000, max=60000, multiplier=3}, customizedRetryPolicy=null}"
    )
    assert values["subscriptionDataSet"] == (
        "[SimpleSubscriptionData{topic=T, expressionType=TAG, expression=*, version=0}]"
    )
    assert values["attributes"] == "{k=v}"


def test_customized_retry_policy_prints_its_steps() -> None:
    body = '{"groupName":"G","groupRetryPolicy":{"customizedRetryPolicy":{"next":[1000,5000]},"type":"CUSTOMIZED"}}'
    lines = group_config_lines(None, "b", SubscriptionGroupConfigView.decode(body))
    assert lines[0] == "=============================null:b============================="
    assert lines[8].endswith(
        "=  GroupRetryPolicy{type=CUSTOMIZED, exponentialRetryPolicy=null, "
        "customizedRetryPolicy=CustomizedRetryPolicy{next=[1000, 5000]}}"
    )


def test_consume_queue_data_str_is_javas_to_string() -> None:
    unit = ConsumeQueueData(
        physicOffset=10, physicSize=20, tagsCode=-(2**31) - 5, msg="Cq extend not exist!addr: 1"
    )
    assert consume_queue_data_str(unit) == (
        "ConsumeQueueData{physicOffset=10, physicSize=20, tagsCode=-2147483653, extendDataJson='null', "
        "bitMap='null', eval=false, msg='Cq extend not exist!addr: 1'}"
    )
    body = QueryConsumeQueueResponseBody(filterData="g@t is not online!", queueData=[unit], maxQueueIndex=9)
    rule = "=" * 38
    assert query_cq_text(body, 7).splitlines() == [
        "Filter data: ",
        "g@t is not online!",
        rule,
        "Queue data: ",
        "max: 9, min: 0",
        rule,
        "idx: 7",
        consume_queue_data_str(unit),
        rule,
    ]


def test_rebalance_json_shares_the_sorted_queues_of_every_broker_group() -> None:
    mqs = {MessageQueue(topic="T", brokerName=b, queueId=q) for b in ("b2", "b1") for q in range(4)}
    shares = json.loads(rebalance_json(mqs, ["z", "a", "m"]))["result"]
    assert list(shares) == ["z", "a", "m"]
    got = {cid: [(q["brokerName"], q["queueId"]) for q in queues] for cid, queues in shares.items()}
    assert got == {
        "a": [("b1", 0), ("b1", 1), ("b1", 2)],
        "m": [("b1", 3), ("b2", 0), ("b2", 1)],
        "z": [("b2", 2), ("b2", 3)],
    }
