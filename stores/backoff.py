"""The pause before a store repeats a request that was definitely not applied
(throttled, rolled back by a lock conflict, refused for now): exponential from
``first`` seconds, capped at ``cap``, with jitter (0.5 to 1.5 times) so
writers that collided do not collide again.  Each store picks its scale: a
SQL lock conflict clears in milliseconds, DynamoDB throttling and an S3
conditional-write conflict take longer."""

from __future__ import annotations

import random
import time


def backoff(attempt: int, *, first: float, cap: float) -> None:
    """Sleep before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
    time.sleep(min(cap, first * 2**attempt) * random.uniform(0.5, 1.5))
