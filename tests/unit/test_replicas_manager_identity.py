"""The persisted broker identity (broker/identity.py): upstream file formats, parsing, the write
protocol (.bak of the previous content, temp file confirmed into the metadata file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.identity import (
    BrokerIdentityFiles,
    BrokerMetadata,
    IdentityFileError,
    TempBrokerMetadata,
    mismatch,
    register_check_code,
)


def test_metadata_format_is_cluster_name_id_separated_by_hash() -> None:
    m = BrokerMetadata(clusterName="DefaultCluster", brokerName="broker-a", brokerId=3)
    assert m.encode() == "DefaultCluster#broker-a#3"
    assert BrokerMetadata.decode("DefaultCluster#broker-a#3\n") == m


def test_temp_metadata_carries_the_register_check_code() -> None:
    code = register_check_code("127.0.0.1:10911", 1700000000123)
    assert code == "127.0.0.1:10911;1700000000123"
    t = TempBrokerMetadata(clusterName="c", brokerName="b", brokerId=1, registerCheckCode=code)
    assert t.encode() == "c#b#1#127.0.0.1:10911;1700000000123"
    assert TempBrokerMetadata.decode(t.encode()) == t
    assert t.metadata() == BrokerMetadata(clusterName="c", brokerName="b", brokerId=1)


@pytest.mark.parametrize(
    "text",
    ["", "c#b", "c#b#x", "c##1", "c#b#1#extra", "c#b#-1", "c;b;1"],
)
def test_bad_metadata_is_rejected(text: str) -> None:
    with pytest.raises(IdentityFileError):
        BrokerMetadata.decode(text)


@pytest.mark.parametrize("text", ["c#b#1", "c#b#1#", "c#b#one#code"])
def test_bad_temp_metadata_is_rejected(text: str) -> None:
    with pytest.raises(IdentityFileError):
        TempBrokerMetadata.decode(text)


def test_mismatch_names_the_differing_key() -> None:
    m = BrokerMetadata(clusterName="c", brokerName="b", brokerId=1)
    assert mismatch(m, "c", "b") is None
    assert "clusterName" in (mismatch(m, "other", "b") or "")
    assert "brokerName" in (mismatch(m, "c", "other") or "")


def test_files_round_trip_and_confirm(tmp_path: Path) -> None:
    files = BrokerIdentityFiles(str(tmp_path / "store" / "brokerIdentity"))
    assert files.read_metadata() is None
    assert files.read_temp() is None
    temp = TempBrokerMetadata(clusterName="c", brokerName="b", brokerId=2, registerCheckCode="h:1;5")
    files.write_temp(temp)
    assert (tmp_path / "store" / "brokerIdentity-temp").read_text() == "c#b#2#h:1;5"
    assert files.read_temp() == temp
    metadata = files.confirm(temp)
    assert metadata == BrokerMetadata(clusterName="c", brokerName="b", brokerId=2)
    assert (tmp_path / "store" / "brokerIdentity").read_text() == "c#b#2"
    assert not (tmp_path / "store" / "brokerIdentity-temp").exists()
    assert files.read_metadata() == metadata


def test_rewrite_keeps_the_previous_content_in_bak(tmp_path: Path) -> None:
    path = tmp_path / "brokerIdentity"
    files = BrokerIdentityFiles(str(path))
    files.write_metadata(BrokerMetadata(clusterName="c", brokerName="b", brokerId=1))
    files.write_metadata(BrokerMetadata(clusterName="c", brokerName="b", brokerId=4))
    assert path.read_text() == "c#b#4"
    assert (tmp_path / "brokerIdentity.bak").read_text() == "c#b#1"
    assert not (tmp_path / "brokerIdentity.tmp").exists()


def test_unparsable_file_reads_as_absent(tmp_path: Path) -> None:
    path = tmp_path / "brokerIdentity"
    path.write_text("garbage")
    (tmp_path / "brokerIdentity-temp").write_text("c#b#1")
    files = BrokerIdentityFiles(str(path))
    assert files.read_metadata() is None
    assert files.read_temp() is None
