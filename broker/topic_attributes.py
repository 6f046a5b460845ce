"""Topic attributes (upstream ``TopicAttributes``, ``AttributeParser``, ``AttributeUtil``).

A modification is written ``+key=value,+key2=value2,-key3`` (add or change, delete). Only the
attributes upstream knows are accepted, with their allowed values; some may be set only when the
topic is created. ``reserve.time`` (tiered storage only upstream) is not supported.
"""

from __future__ import annotations

__all__ = ["TOPIC_ATTRIBUTES", "alter_attributes", "parse_attribute_modification"]

#: attribute name -> (changeable after creation, allowed values)
TOPIC_ATTRIBUTES: dict[str, tuple[bool, frozenset[str]]] = {
    "queue.type": (False, frozenset({"BatchCQ", "SimpleCQ"})),
    "cleanup.policy": (False, frozenset({"DELETE", "COMPACTION"})),
    "message.type": (
        True,
        frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
    ),
}


def parse_attribute_modification(text: str | None) -> dict[str, str]:
    """``+a=1,+b=2,-c`` -> ``{"+a": "1", "+b": "2", "-c": ""}``; raises ValueError on bad syntax."""
    result: dict[str, str] = {}
    if not text:
        return result
    for item in text.split(","):
        if "=" in item:
            key, _, value = item.partition("=")
            if "+" not in key:
                raise ValueError(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = item, ""
            if "-" not in key:
                raise ValueError(f"delete attribute format is wrong: {key}")
        if key in result:
            raise ValueError(f"key duplication: {key}")
        result[key] = value
    return result


def alter_attributes(create: bool, current: dict[str, str], modification: dict[str, str]) -> dict[str, str]:
    """Apply a parsed modification to a topic's attributes; raises ValueError when not allowed."""
    final = dict(current)
    seen: set[str] = set()
    for key, value in modification.items():
        real = key[1:]
        if not real or "+" in real or "-" in real:
            raise ValueError("kv string format wrong.")
        if real in seen:
            raise ValueError(f"alter duplication key. key: {real}")
        seen.add(real)
        spec = TOPIC_ATTRIBUTES.get(real)
        if spec is None:
            raise ValueError(f"unsupported key: {real}")
        changeable, allowed = spec
        if key.startswith("+"):
            if not create and not changeable:
                raise ValueError(f"attempt to update an unchangeable attribute. key: {real}")
            if value not in allowed:
                raise ValueError(f"value is not in set: {sorted(allowed)}")
            final[real] = value
        elif key.startswith("-"):
            if create:
                raise ValueError(f"only add attribute is supported while creating topic. key: {real}")
            if real not in current:
                raise ValueError(f"attempt to delete a nonexistent key: {real}")
            if not changeable:
                raise ValueError(f"attempt to update an unchangeable attribute. key: {real}")
            del final[real]
        else:
            raise ValueError(f"wrong format key: {real}")
    return final
