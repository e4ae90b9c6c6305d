"""Named fault-injection points on the commit path.

Production code calls :func:`point` at each step boundary; nothing happens
unless a test registered an action for that name (for example ``os._exit`` to
simulate a crash between two steps, which no real store can be asked to do).
"""

from __future__ import annotations

from collections.abc import Callable

_actions: dict[str, Callable[[], None]] = {}

STAGED = "after_stage"
#: the namespace checked a staged manifest and is about to ask the coordinator for its version
CHECKED = "namespace_checked"
#: a served commit was checked against every version since its read version, and is about to be committed
SERVED_CHECKED = "served_checked"
#: a served commit is a version; the server has not answered yet
SERVED_COMMITTED = "served_committed"
RESERVED = "after_reserve"
COPIED = "after_copy"
FLIPPED = "after_flip"


def point(name: str) -> None:
    action = _actions.get(name)
    if action is not None:
        action()


def set_action(name: str, action: Callable[[], None] | None) -> None:
    if action is None:
        _actions.pop(name, None)
    else:
        _actions[name] = action


def clear() -> None:
    _actions.clear()
