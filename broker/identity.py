"""The broker's persistent controller identity (upstream ``BrokerMetadata`` / ``TempBrokerMetadata``).

In controller mode a broker's id is handed out by the controller once and kept on disk, so that a
restart — also on another IP or port — is recognised as the same replica (upstream #5745).

Files (text, upstream layout; paths from ``storePathBrokerIdentity``, default ``{root}/brokerIdentity``):

* metadata ``{path}``: ``cluster#brokerName#brokerId``;
* temp metadata ``{path}-temp``: ``cluster#brokerName#brokerId#registerCheckCode``, written after
  CONTROLLER_GET_NEXT_BROKER_ID and before CONTROLLER_APPLY_BROKER_ID, so that a crash between the two
  re-applies the same id with the same check code (which the controller accepts as a retry).

``registerCheckCode`` is ``{brokerAddr};{currentTimeMillis}``.

Writes go to ``{file}.tmp`` (fsynced), the previous content is copied to ``{file}.bak``, then the
temp file is renamed over the file and the directory fsynced (upstream ``MixAll.string2File`` plus
the fsyncs). Reads use the file itself. The I/O functions block: call them through
``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import logging
import os

import msgspec

log = logging.getLogger("broker.identity")

SEPARATOR = "#"
TEMP_SUFFIX = "-temp"


class IdentityFileError(ValueError):
    """An identity file whose content is not ``cluster#brokerName#brokerId[#checkCode]``."""


class BrokerMetadata(msgspec.Struct, frozen=True):
    """The persisted identity: which broker-set, and the controller-assigned id (>= 1)."""

    clusterName: str
    brokerName: str
    brokerId: int

    def encode(self) -> str:
        return SEPARATOR.join((self.clusterName, self.brokerName, str(self.brokerId)))

    @classmethod
    def decode(cls, text: str) -> BrokerMetadata:
        parts = _split(text, 3)
        return cls(clusterName=parts[0], brokerName=parts[1], brokerId=_broker_id(parts[2], text))


class TempBrokerMetadata(msgspec.Struct, frozen=True):
    """An id asked for but not yet confirmed by CONTROLLER_APPLY_BROKER_ID."""

    clusterName: str
    brokerName: str
    brokerId: int
    registerCheckCode: str

    def encode(self) -> str:
        return SEPARATOR.join((self.clusterName, self.brokerName, str(self.brokerId), self.registerCheckCode))

    @classmethod
    def decode(cls, text: str) -> TempBrokerMetadata:
        parts = _split(text, 4)
        return cls(
            clusterName=parts[0],
            brokerName=parts[1],
            brokerId=_broker_id(parts[2], text),
            registerCheckCode=parts[3],
        )

    def metadata(self) -> BrokerMetadata:
        return BrokerMetadata(
            clusterName=self.clusterName, brokerName=self.brokerName, brokerId=self.brokerId
        )


def _split(text: str, n: int) -> list[str]:
    parts = text.strip().split(SEPARATOR)
    if len(parts) != n or not all(parts):
        raise IdentityFileError(f"expected {n} non-empty '#'-separated fields, got {text.strip()!r}")
    return parts


def _broker_id(field: str, text: str) -> int:
    try:
        value = int(field)
    except ValueError:
        raise IdentityFileError(f"broker id {field!r} is not a number in {text.strip()!r}") from None
    if value < 0:
        raise IdentityFileError(f"negative broker id in {text.strip()!r}")
    return value


def register_check_code(broker_addr: str, now_ms: int) -> str:
    """``{brokerAddr};{currentTimeMillis}``: the controller keeps it to recognise a retried apply."""
    return f"{broker_addr};{now_ms}"


def mismatch(stored: BrokerMetadata | TempBrokerMetadata, cluster: str, broker_name: str) -> str | None:
    """Why a stored identity does not belong to this broker's configuration (None if it does)."""
    if stored.clusterName != cluster:
        return f"the clusterName {stored.clusterName} in the broker identity differs from brokerClusterName {cluster} in the config"
    if stored.brokerName != broker_name:
        return f"the brokerName {stored.brokerName} in the broker identity differs from brokerName {broker_name} in the config"
    return None


class BrokerIdentityFiles:
    """The two identity files of one broker (blocking I/O; see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.temp_path = path + TEMP_SUFFIX

    def read_metadata(self) -> BrokerMetadata | None:
        """The stored identity, or None when there is none or it cannot be parsed (logged)."""
        text = _read(self.path)
        if text is None:
            return None
        try:
            return BrokerMetadata.decode(text)
        except IdentityFileError as e:
            log.error("ignoring broker identity file %s: %s", self.path, e)
            return None

    def read_temp(self) -> TempBrokerMetadata | None:
        text = _read(self.temp_path)
        if text is None:
            return None
        try:
            return TempBrokerMetadata.decode(text)
        except IdentityFileError as e:
            log.error("ignoring temp broker identity file %s: %s", self.temp_path, e)
            return None

    def write_metadata(self, metadata: BrokerMetadata) -> None:
        _write(self.path, metadata.encode())

    def write_temp(self, temp: TempBrokerMetadata) -> None:
        _write(self.temp_path, temp.encode())

    def delete_temp(self) -> None:
        _delete(self.temp_path)

    def delete_metadata(self) -> None:
        _delete(self.path)

    def confirm(self, temp: TempBrokerMetadata) -> BrokerMetadata:
        """The controller accepted ``temp``: write the metadata file, then drop the temp file."""
        metadata = temp.metadata()
        self.write_metadata(metadata)
        self.delete_temp()
        return metadata


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return text if text.strip() else None


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    previous = _read(path)
    if previous is not None:
        with open(path + ".bak", "w", encoding="utf-8") as f:
            f.write(previous)
    os.replace(tmp, path)
    _fsync_dir(directory)


def _delete(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
