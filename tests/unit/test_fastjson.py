"""fastjson dialect: parsing what Java writes, writing what Java (and the C++/Go clients) read."""

from __future__ import annotations

import enum
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting import fastjson
from remoting.protocol.common import (
    DataVersion,
    KVTable,
    MessageQueue,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicFilterType,
    TopicList,
)
from remoting.protocol.namesrv import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    GetBrokerMemberGroupResponseBody,
    QueueData,
    RegisterBrokerBody,
    TopicRouteData,
)

# Hand-written from remoting-protocol.md §4.2 (with its line breaks and indentation).
ROUTE_42 = """{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},
                 "brokerName":"broker-a","cluster":"DefaultCluster",
                 "enableActingMaster":false}],
 "filterServerTable":{},
 "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,
                "topicSysFlag":0,"writeQueueNums":4}]}
"""

# cpp-client-wire.md §3, in the old spelling and with nulls as a 4.x broker may write.
ROUTE_CPP_OLD = (
    '{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'
    '"cluster":"DefaultCluster","zoneName":null}],"filterServerTable":{},"orderTopicConf":null,'
    '"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"writeQueueNums":4,'
    '"topicSynFlag":0}]}'
)


def test_route_from_reference_parses_with_unquoted_broker_ids() -> None:
    route = TopicRouteData.decode(ROUTE_42.encode())
    assert route.brokerDatas[0].brokerAddrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert route.brokerDatas[0].cluster == "DefaultCluster"
    assert route.queueDatas == [
        QueueData(brokerName="broker-a", perm=6, readQueueNums=4, writeQueueNums=4, topicSysFlag=0)
    ]


def test_route_with_quoted_ids_nulls_and_old_sysflag_spelling() -> None:
    route = TopicRouteData.decode(ROUTE_CPP_OLD)
    assert route.brokerDatas[0].brokerAddrs == {0: "127.0.0.1:10911"}
    assert route.brokerDatas[0].zoneName is None
    assert route.queueDatas[0].topicSysFlag == 0
    old = QueueData.decode(
        b'{"brokerName":"b","perm":6,"readQueueNums":1,"writeQueueNums":1,"topicSynFlag":2}'
    )
    assert old.topicSysFlag == 2
    assert b"topicSynFlag" not in old.encode()


def test_route_is_written_like_java_fastjson() -> None:
    route = TopicRouteData.decode(ROUTE_42)
    expected = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    assert route.encode() == expected


def test_standard_route_is_valid_json_with_quoted_sorted_keys() -> None:
    route = TopicRouteData(
        brokerDatas=[BrokerData(cluster="c", brokerName="b", brokerAddrs={2: "h:2", 0: "h:0", 10: "h:10"})]
    )
    body = route.encode(standard=True)
    assert b'"brokerAddrs":{"0":"h:0","2":"h:2","10":"h:10"}' in body
    assert json.loads(body)["brokerDatas"][0]["brokerAddrs"] == {"0": "h:0", "2": "h:2", "10": "h:10"}
    assert TopicRouteData.decode(body) == route


def test_standard_mode_escapes_non_ascii_and_quotes_unsafe_longs() -> None:
    assert fastjson.dumps({"k": "é"}, standard=True) == b'{"k":"\\u00e9"}'
    assert fastjson.dumps({"k": "é"}) == '{"k":"é"}'.encode()
    assert fastjson.dumps([2**60], standard=True) == b'["1152921504606846976"]'
    assert fastjson.dumps([2**60]) == b"[1152921504606846976]"


def test_object_keys_parse_to_hashable_dicts_and_convert_to_message_queue() -> None:
    text = b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5},{"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":7}}}\n'
    raw = fastjson.loads(text)
    key = next(iter(raw["offsetTable"]))
    assert isinstance(key, fastjson.FrozenDict)
    assert dict(key) == {"brokerName": "b", "queueId": 0, "topic": "T"}
    with pytest.raises(TypeError):
        key["topic"] = "x"  # type: ignore[index]
    typed = fastjson.decode(text, dict[str, dict[MessageQueue, dict[str, int]]])
    mq1 = MessageQueue(topic="T", brokerName="b", queueId=1)
    assert typed["offsetTable"][mq1] == {"brokerOffset": 7}


def test_struct_keys_are_written_as_objects() -> None:
    table = {MessageQueue(topic="T", brokerName="b", queueId=0): 5}
    assert fastjson.dumps({"offsetTable": table}) == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}'
    )
    assert fastjson.decode(fastjson.dumps(table), dict[MessageQueue, int]) == table


def test_lenient_syntax_single_quotes_bare_keys_trailing_commas() -> None:
    assert fastjson.loads("{'a':'it\\'s \\u00e9',b:[1,2,],0:-1.5e3,}\n") == {
        "a": "it's é",
        "b": [1, 2],
        0: -1500.0,
    }
    assert fastjson.loads('{"offsetTable":{1:100,2:200}}') == {"offsetTable": {1: 100, 2: 200}}


def test_numbers_as_strings_are_accepted_for_typed_fields() -> None:
    dv = DataVersion.decode(b'{"counter":"3","stateVersion":0,"timestamp":"1700000000000"}')
    assert dv == DataVersion(counter=3, stateVersion=0, timestamp=1700000000000)


@pytest.mark.parametrize(
    "bad",
    [b"", b"{", b'{"a":}', b"{0 1}", b"[1 2]", b'{"a":1} x', b"\xff\xfe", b"{'a", b"nul"],
)
def test_garbage_raises_fastjson_error(bad: bytes) -> None:
    with pytest.raises(fastjson.FastjsonError):
        fastjson.loads(bad)


def test_decode_raises_validation_error_for_wrong_shape() -> None:
    with pytest.raises(msgspec.ValidationError):
        fastjson.decode(b'{brokerName:"b"}', QueueData)
    with pytest.raises(msgspec.ValidationError):
        fastjson.decode(b'{"brokerName":"b"}', QueueData)


def test_none_fields_and_null_map_values_are_omitted_enums_by_name() -> None:
    class Color(enum.IntEnum):
        RED = 0
        BLUE = 1

    class S(msgspec.Struct):
        zeta: int
        alpha: str | None = None
        color: Color = Color.BLUE

    assert fastjson.dumps(S(zeta=1)) == b'{"color":"BLUE","zeta":1}'
    assert fastjson.dumps({"a": None, "b": 1, 3: [None]}) == b'{"b":1,3:[null]}'
    assert fastjson.dumps(b"\x00\x01") == b'"AAE="'
    assert fastjson.dumps({1, 2}) in (b"[1,2]", b"[2,1]")
    with pytest.raises(TypeError):
        fastjson.dumps(object())


def test_topic_config_defaults_and_field_names_match_upstream() -> None:
    tc = TopicConfig(topicName="T")
    assert json.loads(tc.encode()) == {
        "attributes": {},
        "order": False,
        "perm": 6,
        "readQueueNums": 16,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "T",
        "topicSysFlag": 0,
        "writeQueueNums": 16,
    }
    assert TopicConfig.decode(b'{"topicName":"T","topicFilterType":"MULTI_TAG"}').topicFilterType is (
        TopicFilterType.MULTI_TAG
    )


def test_topic_config_text_form_round_trips() -> None:
    tc = TopicConfig(topicName="T", readQueueNums=4, writeQueueNums=2, perm=4, attributes={"a": "b"})
    assert tc.encode_text() == 'T 4 2 4 SINGLE_TAG {"a":"b"}'
    assert TopicConfig.decode_text(tc.encode_text()) == tc
    with pytest.raises(ValueError, match="at least 5"):
        TopicConfig.decode_text("T 1 2")


def test_register_broker_body_plain_and_compressed_round_trip() -> None:
    table = {
        f"T{i}": TopicConfig(topicName=f"T{i}", readQueueNums=i + 1, writeQueueNums=i + 1) for i in range(5)
    }
    body = RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
            topicConfigTable=table, dataVersion=DataVersion(stateVersion=1, timestamp=2, counter=3)
        ),
        filterServerList=["f:1"],
    )
    assert RegisterBrokerBody.decode(body.encode()) == body
    assert RegisterBrokerBody.decode_compressed(body.encode_compressed(479), 479) == body
    assert RegisterBrokerBody.decode_compressed(body.encode_compressed(37), 37) == body
    with pytest.raises(ValueError, match="compressed RegisterBrokerBody"):
        RegisterBrokerBody.decode_compressed(body.encode_compressed(479)[:-6], 479)
    with pytest.raises(ValueError, match="compressed RegisterBrokerBody"):
        RegisterBrokerBody.decode_compressed(b"not zlib", 479)


def test_small_bodies_match_reference_examples() -> None:
    assert ClusterInfo.decode(
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1"},"brokerName":"broker-a","cluster":"DefaultCluster"}},'
        b'"clusterAddrTable":{"DefaultCluster":["broker-a","broker-b"]}}'
    ).clusterAddrTable == {"DefaultCluster": ["broker-a", "broker-b"]}
    group = GetBrokerMemberGroupResponseBody(
        brokerMemberGroup=BrokerMemberGroup(cluster="c", brokerName="b", brokerAddrs={0: "ip:1", 1: "ip:2"})
    )
    assert group.encode() == (
        b'{"brokerMemberGroup":{"brokerAddrs":{0:"ip:1",1:"ip:2"},"brokerName":"b","cluster":"c"}}'
    )
    assert KVTable(table={"k": "v"}).encode() == b'{"table":{"k":"v"}}'
    assert TopicList(topicList=["T1", "T2"]).encode() == b'{"topicList":["T1","T2"]}'
    assert TopicList.decode(b'{"topicList":["T1"],"brokerAddr":null}') == TopicList(topicList=["T1"])


def test_pretty_output_follows_fastjson_pretty_format() -> None:
    route = TopicRouteData.decode(ROUTE_42)
    assert fastjson.dumps_pretty(route) == (
        "{\n"
        '\t"brokerDatas":[{\n'
        '\t\t"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"\n'
        "\t\t},\n"
        '\t\t"brokerName":"broker-a",\n'
        '\t\t"cluster":"DefaultCluster",\n'
        '\t\t"enableActingMaster":false\n'
        "\t}],\n"
        '\t"filterServerTable":{},\n'
        '\t"queueDatas":[{\n'
        '\t\t"brokerName":"broker-a",\n'
        '\t\t"perm":6,\n'
        '\t\t"readQueueNums":4,\n'
        '\t\t"topicSysFlag":0,\n'
        '\t\t"writeQueueNums":4\n'
        "\t}]\n"
        "}"
    )
    two = TopicRouteData(queueDatas=[route.queueDatas[0], route.queueDatas[0]])
    assert '"queueDatas":[\n\t\t{\n\t\t\t"brokerName"' in fastjson.dumps_pretty(two)


# Both parse paths must agree: standard JSON goes through msgspec, the rest through the parser.
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(-1000, 1000), children, max_size=4)
    ),
    max_leaves=20,
)


def _drop_none_values(v: object) -> object:
    if isinstance(v, dict):
        return {k: _drop_none_values(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_none_values(x) for x in v]
    return v


@given(_json_values)
def test_fastjson_output_parses_back_on_both_paths(value: object) -> None:
    expected = _drop_none_values(value)
    text = fastjson.dumps(value)
    assert fastjson.loads(text) == expected
    assert fastjson.loads_lenient(text) == expected
    standard = fastjson.dumps(value, standard=True)
    assert fastjson.loads_lenient(standard) == msgspec.json.decode(standard)
    assert json.loads(standard) == msgspec.json.decode(standard)


@given(st.dictionaries(st.integers(0, 2**40), st.text(), max_size=5))
def test_int_keyed_maps_decode_from_either_style(table: dict[int, str]) -> None:
    for style in (False, True):
        assert fastjson.decode(fastjson.dumps(table, standard=style), dict[int, str]) == table


#: strings that look like integer map keys once taken out of their quotes
_KEY_LIKE_TEXT = st.text(alphabet='{},:"\\01-9 ab\x00\u00e9', max_size=12)
_INT_KEYED = st.recursive(
    st.integers(-(2**63), 2**63 - 1) | _KEY_LIKE_TEXT | st.none(),
    lambda children: (
        st.dictionaries(st.integers(-(2**40), 2**40), children, max_size=4)
        | st.dictionaries(_KEY_LIKE_TEXT, children, max_size=4)
        | st.lists(children, max_size=3)
    ),
    max_leaves=16,
)


@given(_INT_KEYED)
def test_unquoted_int_keys_take_the_quoting_path_and_decode_as_the_lenient_parser_does(value: object) -> None:
    """fastjson text with integer keys is quoted (outside strings only) and decoded by msgspec;
    what comes out is what the lenient parser makes of the original, strings that look like
    keys (``{1:`` inside a value or a key) untouched."""
    text = fastjson.dumps(value)
    quoted = fastjson._quote_int_keys(text)
    if quoted is not None:
        assert json.loads(quoted) is not None  # standard JSON now
    assert fastjson.decode(text, object) == _with_str_keys(fastjson.loads_lenient(text))


def _with_str_keys(v: object) -> object:
    """The lenient parse with int keys as text: what an untyped decode of quoted keys gives."""
    if isinstance(v, dict):
        return {str(k): _with_str_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_with_str_keys(x) for x in v]
    return v


def test_quoting_leaves_strings_and_non_compact_keys_alone() -> None:
    text = b'{"a,1:":{1:2,-3:4},"b\\",5:":"x{7:",8:[{9:0}]}'
    assert fastjson._quote_int_keys(text) == b'{"a,1:":{"1":2,"-3":4},"b\\",5:":"x{7:","8":[{"9":0}]}'
    assert fastjson._quote_int_keys(b'{"a":"b"}') is None  # nothing to quote
    # spaces around a key: not fastjson's compact form; the lenient parser takes it
    assert fastjson._quote_int_keys(b"{ 1 :2}") is None
    assert fastjson.decode(b"{ 1 :2}", dict[int, int]) == {1: 2}


def test_fast_path_and_lenient_path_give_the_same_route() -> None:
    route = TopicRouteData.decode(ROUTE_42)
    standard = route.encode(standard=True)
    msgspec.json.decode(standard)  # valid JSON: the msgspec fast path takes it
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(route.encode())  # fastjson style: only the lenient path can
    assert TopicRouteData.decode(standard) == TopicRouteData.decode(route.encode()) == route


def test_pretty_map_of_only_null_values_keeps_fastjsons_line_break() -> None:
    # fastjson leaves the null values out but, the map having entries, still ends the line
    # before its closing brace; an empty map stays on one line
    assert fastjson.dumps_pretty({"a": {"x": None}, "b": {}}) == '{\n\t"a":{\n\t},\n\t"b":{}\n}'


def test_doubles_are_written_as_javas_double_to_string() -> None:
    assert (
        fastjson.dumps({"a": 1e7, "b": 2.5e-4, "c": 12.5, "d": 3.0})
        == b'{"a":1.0E7,"b":2.5E-4,"c":12.5,"d":3.0}'
    )
    assert fastjson.loads(fastjson.dumps({"a": 1.23456789e7})) == {"a": 1.23456789e7}


def test_raw_values_are_spliced_in_verbatim_beside_escaped_nuls() -> None:
    value = {"a": msgspec.Raw(b"{1:2}"), "b": [msgspec.Raw(b'"x\xc3\xa9"'), "q\x00"], "c": msgspec.Raw(b"[]")}
    assert fastjson.dumps(value) == b'{"a":{1:2},"b":["x\xc3\xa9","q\\u0000"],"c":[]}'
    assert fastjson.dumps(KVTable(table={"k": "v\x00"})) == b'{"table":{"k":"v\\u0000"}}'
