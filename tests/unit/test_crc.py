"""The body CRC is zlib's CRC-32 whichever implementation computes it, and on the machines this
project runs on (x86-64, aarch64) the fast one is installed."""

from __future__ import annotations

import platform
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting.crc import crc32
from remoting.protocol.message import crc32_masked


@given(data=st.binary(max_size=70_000), seed=st.integers(0, 2**32 - 1))
def test_crc32_equals_zlib(data: bytes, seed: int) -> None:
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, seed) == zlib.crc32(data, seed)
    view = memoryview(bytearray(data))[1:]
    assert crc32(view) == zlib.crc32(view)
    assert crc32_masked(view) == zlib.crc32(view) & 0x7FFFFFFF


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="no ISA-L wheel is installed here"
)
def test_isal_is_used_where_it_has_wheels() -> None:
    assert crc32.__module__.startswith("isal"), crc32.__module__
