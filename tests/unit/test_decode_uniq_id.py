"""``decode_uniq_id`` / ``rmq-admin DecodeMessageId``: the client address and creation time in a
UNIQ_KEY, checked against ids made by the generator and ids built by hand."""

from __future__ import annotations

import struct
import time

import pytest
from click.testing import CliRunner

from client.admin_messages import decode_message_id
from remoting.protocol.message import UniqIdGenerator, decode_uniq_id


def local_ms(*fields: int) -> int:
    """Epoch ms of a local time (year, month, day, hour, minute, second)."""
    return int(time.mktime((*fields, 0, 0, -1))) * 1000


def test_an_id_decodes_to_its_address_and_time() -> None:
    made = local_ms(2026, 11, 20, 13, 45, 10) + 123
    uid = UniqIdGenerator("10.1.2.3", now_ms=lambda: made).create()
    assert decode_uniq_id(uid, made + 60_000) == ("10.1.2.3", made)
    assert decode_uniq_id(uid.lower(), made) == ("10.1.2.3", made)  # the same millisecond


def test_an_id_of_last_month_read_early_this_month() -> None:
    made = local_ms(2026, 10, 31, 23, 59, 0)  # the end of October
    uid = UniqIdGenerator("127.0.0.1", now_ms=lambda: made).create()
    read = local_ms(2026, 11, 1, 0, 5, 0)  # five minutes into November
    assert decode_uniq_id(uid, read) == ("127.0.0.1", made)


def test_an_ipv6_id_built_by_hand() -> None:
    start = local_ms(2026, 11, 1, 0, 0, 0)
    span = 3 * 86_400_000 + 7  # three days and 7 ms into the month
    raw = bytes.fromhex("fe800000000000000000000000000001") + struct.pack(">HIIH", 4321, 99, span, 5)
    assert len(raw) == 28
    assert decode_uniq_id(raw.hex().upper(), start + 10 * 86_400_000) == ("fe80::1", start + span)


@pytest.mark.parametrize("bad", ["", "zz", "7F000001", "7F00000103898A859A48862A22149D2"])
def test_what_is_not_an_id_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a message id"):
        decode_uniq_id(bad, 0)


def test_the_command_prints_ip_and_date() -> None:
    made = time.time_ns() // 1_000_000 - 5000
    uid = UniqIdGenerator("192.168.7.9", now_ms=lambda: made).create()
    result = CliRunner().invoke(decode_message_id, ["-i", uid])
    assert result.exit_code == 0, result.output
    stamp = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(made / 1000)) + f":{made % 1000:03d}"
    assert result.output.splitlines() == ["ip=192.168.7.9", f"date={stamp}"]
    bad = CliRunner().invoke(decode_message_id, ["-i", "xyz"])
    assert bad.exit_code == 1
    assert "DecodeMessageId command failed: not a message id" in bad.output
