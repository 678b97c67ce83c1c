"""``Call``: a concrete call (a resource, an action, its arguments), what capabilities are decided on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgate._shown import character_named, not_printable
from agentgate.capabilities._capability import _ACTION
from agentgate.capabilities._resources import DEFAULT_ACTIONS, MAX_NAME_LENGTH, canonical_resource
from agentgate.capabilities._values import PLAIN_SCALARS, _plain, _text
from agentgate.errors import CapabilityError

_USUAL_ACTIONS = frozenset(DEFAULT_ACTIONS.values())
"""The actions of nearly every call (``invoke``, ``generate``, ``lease``): taken without the regex."""


@dataclass(frozen=True)
class Call:
    """A concrete call: a resource, an action, and its arguments.

    Refuses (``CapabilityError``) a resource or action that is not a string and arguments that
    are not a mapping: ``Call("model:m", {...})`` puts the arguments where the action goes, and
    a capability for every action (``*``) would otherwise allow it with no arguments at all.
    Refuses an action that a capability could not name (``_check_action``: a lower-case
    identifier of at most ``MAX_NAME_LENGTH`` characters, not ``*``). The resource name is
    checked where the call is decided, which denies a non-canonical one.

    Holds exact built-in types, so that what is decided is what is recorded: the resource, the
    action and each argument name as a ``str``, each argument value that is a ``str``, ``int`` or
    ``float`` of a subclass (a ``str`` enum member) as the plain value it holds (a ``bool`` stays
    a ``bool``), and the arguments as a ``dict`` read once (a ``Mapping`` of another type is
    copied). A subclass's ``startswith``, ``__eq__`` or ``__le__`` never decides a constraint.
    Values nested in a list or a mapping are kept as they are: no constraint looks inside one.
    Refuses two argument names that are one name as ``str``.
    """

    resource: str
    action: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not issubclass(type(self.resource), str) or not issubclass(type(self.action), str):
            raise CapabilityError(
                f"a call's resource and action are strings, got {type(self.resource).__name__} and "
                f"{type(self.action).__name__}: Call(resource, action, args)"
            )
        object.__setattr__(self, "resource", _text(self.resource, "a call's resource"))
        object.__setattr__(self, "action", _check_action(_text(self.action, "a call's action")))
        object.__setattr__(self, "args", _plain_arguments(self.args))

    @classmethod
    def tool(cls, name: str, args: Mapping[str, Any] | None = None) -> Call:
        return cls(canonical_resource("tool:" + _text(name, "a tool name")), "invoke", _arguments(args))

    @classmethod
    def model(cls, name: str, args: Mapping[str, Any] | None = None) -> Call:
        return cls(canonical_resource("model:" + _text(name, "a model name")), "generate", _arguments(args))


def _check_action(action: str) -> str:
    """``action`` if a capability could name it as one action: a lower-case identifier (the
    grammar of a capability's action) of at most ``MAX_NAME_LENGTH`` characters, and not ``*``
    (a capability's word for every action, not an action a call can take); else
    ``CapabilityError`` naming it. Until review R56 a call's action was any string: under a
    grant of every action, ``"invoke\\n"``, ``""``, one with a zero-width character or one of
    5,000 characters was allowed, and its audit entry and spans carried it."""
    if action in _USUAL_ACTIONS or (
        len(action) <= MAX_NAME_LENGTH and action != "*" and _ACTION.fullmatch(action)
    ):
        return action
    if len(action) > MAX_NAME_LENGTH:
        why = f"is {len(action)} characters long, more than {MAX_NAME_LENGTH}"
    elif (hidden := next((c for c in action if not_printable(c)), None)) is not None:
        why = f"holds {character_named(hidden)}"
    elif action == "*":
        why = "names every action, which a capability may grant and a call cannot take"
    else:
        why = "is not a lower-case identifier (a-z, then a-z, 0-9 or '_')"
    raise CapabilityError(f"a call's action {action[:40]!r}{'...' if len(action) > 40 else ''} {why}")


def _arguments(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``args`` (``None``: no arguments); refuses what is not a mapping, such as a list
    of pairs, which ``dict`` would quietly turn into one."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise CapabilityError(f"a call's arguments are a mapping, got {type(args).__name__}")
    return dict(args)


def _plain_arguments(args: object) -> dict[str, Any]:
    """``args`` as a ``dict`` of exact built-in names and scalars (``Call``'s rule): itself when it
    already is one (the common case, nothing copied), else a copy; ``CapabilityError`` for what is
    not a mapping, and for two names that are one ``str``."""
    if type(args) is not dict:
        if not isinstance(args, Mapping):
            raise CapabilityError(f"a call's arguments are a mapping, got {type(args).__name__}")
        args = dict(args)
    for name, value in args.items():
        if type(name) is not str or (type(value) not in PLAIN_SCALARS and _plain(value) is not value):
            break
    else:
        return args
    plain: dict[Any, Any] = {}
    for name, value in args.items():
        key = _plain(name)
        if key in plain:
            raise CapabilityError(f"a call's argument {key!r} is given twice (as {type(name).__name__})")
        plain[key] = _plain(value)
    return plain
