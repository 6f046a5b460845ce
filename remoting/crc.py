"""CRC-32 with zlib's polynomial -- RocketMQ's body CRC (``UtilAll.crc32``, masked to 31 bits by
the callers) -- from ISA-L where its wheel is installed: carry-less multiply instructions make it
about six times faster than zlib's table code at 1 KiB and eleven times at 16 KiB on this
project's machines, and the broker computes one per message it stores. zlib's gives the same
values everywhere else."""

from __future__ import annotations

from collections.abc import Callable

#: ``crc32(data, value=0)``: data is any bytes-like object
crc32: Callable[..., int]
try:
    from isal.isal_zlib import crc32
except ImportError:  # no ISA-L wheel for this platform (see pyproject.toml)
    from zlib import crc32

__all__ = ["crc32"]
