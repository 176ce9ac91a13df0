"""The config keys a head's criterion reads, under MODEL.ALRP: the head's delta and tau (DELTA and TAU, or the RPN's
RPN_DELTA and RPN_TAU)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["HEAD_KEYS", "RPN_KEYS", "HeadKeys"]


class HeadKeys(NamedTuple):
    """The keys under MODEL.ALRP of one head's delta and tau."""

    delta: str = "DELTA"
    tau: str = "TAU"


#: The keys of the heads' delta and tau (RetinaNet, ATSS, FoveaBox, FCOS, the box head), and of the RPN's.
HEAD_KEYS = HeadKeys()
RPN_KEYS = HeadKeys(delta="RPN_DELTA", tau="RPN_TAU")
