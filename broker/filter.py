"""Tag subscriptions and filtering (upstream ``FilterAPI``, ``ExpressionMessageFilter`` for TAG).

The broker filters twice: cheaply on the tag hash stored in the consume-queue unit, then on the
exact tag string in the message properties (hash collisions). Clients filter again by tag.
"""

from __future__ import annotations

from remoting.protocol.broker import SubscriptionData
from remoting.protocol.message import PROPERTY_TAGS, dispatch_info, tags_hash_code

SUB_ALL = "*"


def build_subscription(
    topic: str, sub_string: str | None, sub_version: int = 0, expression_type: str | None = None
) -> SubscriptionData:
    """Parse a TAG expression (``*`` or ``TagA || TagB``) into a SubscriptionData with tags and codes."""
    expr = (sub_string or "").strip()
    etype = (expression_type or "TAG").upper()
    if not expr or expr == SUB_ALL:
        return SubscriptionData(topic=topic, subString=SUB_ALL, subVersion=sub_version, expressionType=etype)
    tags: list[str] = []
    if etype == "TAG":
        for tok in expr.split("||"):
            t = tok.strip()
            if t and t not in tags:
                tags.append(t)
    return SubscriptionData(
        topic=topic,
        subString=expr,
        tagsSet=tags,
        codeSet=[tags_hash_code(t) for t in tags],
        subVersion=sub_version,
        expressionType=etype,
    )


class TagFilter:
    """Matches consume-queue units by tag hash and messages by exact tag (None subscription = all)."""

    __slots__ = ("codes", "match_all", "tags")

    def __init__(self, subscription: SubscriptionData | None) -> None:
        if (
            subscription is None
            or subscription.subString in ("", SUB_ALL)
            or subscription.expressionType.upper() != "TAG"
        ):
            self.match_all = True
            self.codes: frozenset[int] = frozenset()
            self.tags: frozenset[str] = frozenset()
        else:
            self.match_all = False
            self.tags = frozenset(subscription.tagsSet)
            # Recompute the codes: the C++ client sends zeros in codeSet.
            self.codes = frozenset(tags_hash_code(t) for t in subscription.tagsSet)

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        if self.match_all or tags_code is None:
            return True
        return tags_code in self.codes

    def is_matched_by_commit_log(self, record: memoryview | bytes | dict[str, str] | None) -> bool:
        """Exact tag check on a stored record (or its already-parsed properties)."""
        if self.match_all or record is None:
            return True
        props = record if isinstance(record, dict) else dispatch_info(record).properties
        return props.get(PROPERTY_TAGS) in self.tags
