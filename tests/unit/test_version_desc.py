"""``version_desc``: upstream ``MQVersion.getVersionDesc`` names, checked against entries of the
upstream enum (its ordinal = the version number a client sends)."""

from __future__ import annotations

import pytest

from remoting.command import CURRENT_VERSION, version_desc


@pytest.mark.parametrize(
    ("number", "name"),
    [
        (0, "V3_0_0_SNAPSHOT"),
        (1, "V3_0_0_ALPHA1"),
        (7, "V3_0_0_BETA6_SNAPSHOT"),
        (14, "V3_0_0_BETA9"),
        (15, "V3_0_0_FINAL"),
        (16, "V3_0_1_SNAPSHOT"),
        (45, "V3_0_15"),
        (46, "V3_1_0_SNAPSHOT"),
        (63, "V3_1_8"),  # what the C++ client 2.x (PyPI rocketmq 0.4.4) reports
        (85, "V3_2_9"),
        (86, "V3_3_1_SNAPSHOT"),  # no 3.3.0 in the enum
        (149, "V3_6_5"),
        (158, "V3_7_1_SNAPSHOT"),
        (211, "V3_9_9"),
        (212, "V4_0_0_SNAPSHOT"),
        (213, "V4_0_0"),
        (479, "V5_3_3"),
        (610, "V5_9_9_SNAPSHOT"),
        (611, "V5_9_9"),
        (612, "HIGHER_VERSION"),
        (5000, "HIGHER_VERSION"),
    ],
)
def test_names_of_upstream_versions(number: int, name: str) -> None:
    assert version_desc(number) == name


def test_every_number_up_to_the_newest_has_its_own_name() -> None:
    names = [version_desc(v) for v in range(612)]
    assert len(set(names)) == 612
    assert version_desc(CURRENT_VERSION) == "V5_3_3"


def test_a_negative_number_is_named_unknown() -> None:
    assert version_desc(-1) == "V_UNKNOWN(-1)"
