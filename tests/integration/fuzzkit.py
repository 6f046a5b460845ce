"""Pieces shared by the request fuzzers (``test_broker_fuzz``, ``test_namesrv_controller_fuzz``):
edge values for header fields, header classes found by introspection, and a request drawn so that
most of them get past the header check into the handler."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import ModuleType

import msgspec
from hypothesis import event
from hypothesis import strategies as st

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import CommandHeader
from tests.integration.broker_requests import describe

#: values that hit the edges of a field of any type (the fuzzers add their own names)
EDGES = [
    "",
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "99999999999999999999999",
    "1.5",
    "1e400",
    "NaN",
    "true",
    "false",
    "null",
    "*",
    "TagA || TagB",
    "TagA ||",
    "../../escape",
    "a/b",
    "x" * 300,
    "\x01\x02",
    "KEY\x01value\x02",
    "UNIQ_KEY\x01\x02",
    "héllo",
    "{}",
    "[]",
    '{"a":1}',
]
INT_VALUE = st.integers(-1, 20).map(str)
BOOL_VALUE = st.sampled_from(["true", "false"])


def any_value(names: list[str]) -> st.SearchStrategy[str]:
    """Any string a field could be sent: a name, an edge value, a number of any size, any text."""
    return st.one_of(
        st.sampled_from([*names, *EDGES]),
        st.integers(min_value=-(2**64), max_value=2**64).map(str),
        st.text(max_size=24),
    )


def json_values(keys: list[str], names: list[str]) -> st.SearchStrategy[object]:
    """JSON documents of any shape whose object keys are the ones the handlers read."""
    return st.recursive(
        st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.sampled_from([*names, *EDGES]),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(keys), inner, max_size=5),
        max_leaves=14,
    )


def header_classes(*modules: ModuleType) -> list[type[CommandHeader]]:
    """Every request/response header class the modules define."""
    return [
        cls
        for module in modules
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, CommandHeader) and cls is not CommandHeader and cls.__module__ == module.__name__
    ]


def field_names(headers: list[type[CommandHeader]]) -> list[str]:
    """The wire names of all the headers' fields."""
    return sorted({f.encode_name for cls in headers for f in msgspec.structs.fields(cls)})


def typed_value(
    cls: type[CommandHeader],
    name: str,
    wire_name: str,
    special: Mapping[str, st.SearchStrategy[str]],
    names: st.SearchStrategy[str],
) -> st.SearchStrategy[str]:
    """A plausible value for the field: its own strategy in ``special`` (by wire or Python name),
    else the right type -- a small int, a boolean, or one of the known ``names``."""
    own = special.get(wire_name, special.get(name))
    if own is not None:
        return own
    hint = str(cls.__annotations__.get(name, ""))
    if "int" in hint:
        return INT_VALUE
    if "bool" in hint:
        return BOOL_VALUE
    return names


@dataclass(frozen=True)
class RequestPool:
    """What requests of one fuzzer are drawn from (see :meth:`draw`)."""

    #: the request codes
    codes: st.SearchStrategy[int]
    #: code -> the header its handler reads
    header_of: Mapping[int, type[CommandHeader]]
    #: every header class (a request sometimes carries another header's fields)
    headers: list[type[CommandHeader]]
    #: code -> the body shaped as the clients send it
    body_of: Mapping[int, st.SearchStrategy[object]]
    #: any body
    bodies: st.SearchStrategy[bytes | None]
    #: (header class, field name, wire name) -> a plausible value of the field
    valid: Callable[[type[CommandHeader], str, str], st.SearchStrategy[str]]
    #: any value of any field
    anything: st.SearchStrategy[str]
    #: wire names for stray fields
    fields: list[str]

    def draw(self, draw: st.DrawFn) -> RemotingCommand:
        """A request of a drawn code, mostly with the header its handler reads: every field
        plausible except up to two, which get any value or go missing; sometimes another header's
        fields instead, now and then a stray field; the body shaped as the clients send it most of
        the time, else any body."""
        code = draw(self.codes)
        cls = self.header_of.get(code) if draw(st.integers(0, 5)) else None
        if cls is None:
            cls = draw(st.sampled_from(self.headers))
        cls_fields = msgspec.structs.fields(cls)
        bad = (
            draw(st.sets(st.sampled_from([f.encode_name for f in cls_fields]), max_size=2))
            if cls_fields
            else set()
        )
        ext: dict[str, str] = {}
        for f in cls_fields:
            if f.encode_name in bad:
                if draw(st.booleans()):
                    ext[f.encode_name] = draw(self.anything)
            elif f.required or draw(st.booleans()):
                ext[f.encode_name] = draw(self.valid(cls, f.name, f.encode_name))
        if not draw(st.integers(0, 4)):
            ext.setdefault(draw(st.sampled_from(self.fields) | st.text(max_size=8)), draw(self.anything))
        shaped = self.body_of.get(code)
        if shaped is not None and draw(st.integers(0, 4)):
            body: bytes | None = msgspec.json.encode(draw(shaped))
        else:
            body = draw(self.bodies)
        return RemotingCommand(code=code, ext_fields=ext or None, body=body)


_CODE_NAMES = {int(c): c.name for c in RequestCode}


def check_answer(
    cmd: RemotingCommand,
    response: RemotingCommand,
    *,
    served: bool,
    must_explain: Collection[int],
    where: str = "",
) -> None:
    """What every answer to a fuzzed request must be: an error in ``must_explain`` says why (has a
    remark), a code the server does not serve (``served`` False) is refused as such. Records the
    answer as a hypothesis event (with its remark when ``$FUZZ_REMARKS`` is set)."""
    if response.code in must_explain:
        assert response.remark, f"{where}{cmd} -> {describe(response)}: an error without a remark"
    name = _CODE_NAMES.get(cmd.code, str(cmd.code))
    remark = f" {(response.remark or '')[:70]}" if os.environ.get("FUZZ_REMARKS") else ""
    event(f"{where}{name} -> {response.code}{remark}")
    if not served:
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"{where}{describe(response)}"
