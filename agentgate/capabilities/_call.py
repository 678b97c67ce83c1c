"""``Call``: a concrete call (a resource, an action, its arguments), what capabilities are decided on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgate.capabilities._resources import canonical_resource
from agentgate.capabilities._values import _text
from agentgate.errors import CapabilityError


@dataclass(frozen=True)
class Call:
    """A concrete call: a resource, an action, and its arguments.

    Refuses (``CapabilityError``) a resource or action that is not a string and arguments that
    are not a mapping: ``Call("model:m", {...})`` puts the arguments where the action goes, and
    a capability for every action (``*``) would otherwise allow it with no arguments at all.
    The resource name is checked where the call is decided, which denies a non-canonical one.
    """

    resource: str
    action: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.resource, str) or not isinstance(self.action, str):
            raise CapabilityError(
                f"a call's resource and action are strings, got {type(self.resource).__name__} and "
                f"{type(self.action).__name__}: Call(resource, action, args)"
            )
        if type(self.args) is not dict and not isinstance(self.args, Mapping):
            raise CapabilityError(f"a call's arguments are a mapping, got {type(self.args).__name__}")

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
