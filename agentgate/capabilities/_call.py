"""``Call``: a concrete call (a resource, an action, its arguments), what capabilities are decided on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgate.capabilities._capability import _check_action
from agentgate.capabilities._resources import canonical_resource
from agentgate.capabilities._values import PLAIN_SCALARS, _plain, _text
from agentgate.errors import CapabilityError


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
        object.__setattr__(self, "action", _check_action(_text(self.action, "a call's action"), "a call's"))
        object.__setattr__(self, "args", _plain_arguments(self.args))

    @classmethod
    def tool(cls, name: str, args: Mapping[str, Any] | None = None) -> Call:
        return cls(canonical_resource("tool:" + _text(name, "a tool name")), "invoke", _arguments(args))

    @classmethod
    def model(cls, name: str, args: Mapping[str, Any] | None = None) -> Call:
        return cls(canonical_resource("model:" + _text(name, "a model name")), "generate", _arguments(args))


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
