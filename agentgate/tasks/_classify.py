"""Error classification: which kind of failure is this exception?

A classifier maps an exception to an error class (a short string) or to None ("not mine").
Classifiers compose with ``|``: the first one with an answer wins, and ``DEFAULT_CLASSIFIER``
ends in ``"error"``. The classes the scheduler knows:

- ``transient``: failed before any effect, safe to retry (connection refused, HTTP 429/503).
- ``timeout``: no answer in time; the effect may or may not have happened (ambiguous).
- ``connection``: the connection broke after the request may have been sent (ambiguous).
- ``error``: anything else; retried only if a policy lists it in ``retry_on``.

A tool can classify its own exceptions by giving them an ``error_class`` attribute.

A classifier that may return a class of its own (``"quota"``, ``"rate_limited"``) declares it
in ``classes``: ``by_type`` and ``always`` declare the classes they map to, ``by_attribute`` and
``from_function`` the ``classes`` they are given, a subclass sets ``classes`` itself, and a chain
declares what its parts declare. A scheduler refuses a ``retry_on`` or ``trip_on`` class that is
neither built in (``ERROR_CLASSES``) nor declared by its classifier (``InputError`` naming the
field): such a class would never be returned, so the retry it asks for would silently never
happen. A class returned without being declared is still used (it is just never retried).

Each refusal quotes what it refuses as ``quoted`` does (at most 80 characters, a huge integer by
its size, a value nested too deep by its type): until review R86b its whole ``repr`` was written,
a bare ``ValueError`` for an integer past 4,300 digits, a ``RecursionError`` for a list nested
100,000 deep, and megabytes of message for megabytes of text.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType, UnionType
from typing import Any, NoReturn, TypeAlias

from agentgate._shown import quoted
from agentgate.errors import DeadlineExceeded, InputError
from agentgate.tasks._config import _declared


@functools.cache
def _httpx_kinds(httpx: ModuleType) -> tuple[tuple[type[BaseException], str], ...]:
    """Where the httpx exception tree says the request may already have reached the server."""
    return (
        (httpx.ConnectError, "transient"),
        (httpx.ConnectTimeout, "transient"),
        (httpx.PoolTimeout, "transient"),
        (httpx.TimeoutException, "timeout"),
        (httpx.TransportError, "connection"),
    )


ExceptionKinds: TypeAlias = type | UnionType | tuple[Any, ...]
"""A ``by_type`` key: what ``isinstance`` takes as its second argument."""

_PROBE = BaseException()
"""What each ``by_type`` key is tried on once, so that a key ``isinstance`` refuses, or whose own
check raises, is refused."""

_HTTP_STATUS = {429: "transient", 503: "transient", 502: "connection", 504: "timeout"}


class Classifier:
    """Maps an exception to an error class, or None to let the next classifier decide.

    ``classes``: the error classes beyond the built-in ones (``ERROR_CLASSES``) that it may return.

    ``|`` chains classifiers only: a function or None on either side raises ``InputError`` (wrap
    a function in ``from_function``). Until review R86 it raised a bare ``AttributeError``.
    """

    classes: frozenset[str] = frozenset()

    def __call__(self, error: BaseException) -> str | None:
        raise NotImplementedError

    def __or__(self, other: Classifier) -> Classifier:
        if not isinstance(other, Classifier):
            raise _unchainable(other)
        return _FirstOf((self, other))

    def __ror__(self, other: object) -> NoReturn:
        # Reached only where ``other`` is no Classifier: a Classifier's own ``__or__`` ran first.
        raise _unchainable(other)


def _unchainable(part: object) -> InputError:
    """The refusal of ``part``, no ``Classifier``, on either side of ``|``."""
    return InputError(
        f"a classifier chains with classifiers only (wrap a function in from_function), got {quoted(part)}"
    )


class _FirstOf(Classifier):
    def __init__(self, parts: tuple[Classifier, ...]) -> None:
        self.parts = parts
        self.classes = frozenset().union(
            *(_declared(part.classes, f"{type(part).__name__}.classes") for part in parts)
        )

    def __call__(self, error: BaseException) -> str | None:
        for part in self.parts:
            found = part(error)
            if found is not None:
                return found
        return None


class by_attribute(Classifier):
    """The exception's own ``error_class`` attribute, when it is a string.

    ``classes``: the classes beyond the built-in ones that the exceptions may carry.
    """

    def __init__(self, name: str = "error_class", classes: Iterable[str] = ()) -> None:
        if not isinstance(name, str):
            # getattr would raise TypeError at every classification, each failure then ``error``.
            raise InputError(f"by_attribute name must be an attribute name (a string), got {quoted(name)}")
        self.name = name
        self.classes = _declared(classes, "by_attribute classes")

    def __call__(self, error: BaseException) -> str | None:
        value = getattr(error, self.name, None)
        return value if isinstance(value, str) else None


class by_type(Classifier):
    """The class mapped to the first key the exception is an instance of (mapping order).

    A key is what ``isinstance`` takes: an exception class, a tuple of them
    (``(TimeoutError, OSError)``), a union (``TimeoutError | ConnectionError``) or an ABC with
    exception classes registered. Raises ``InputError`` unless ``mapping`` is a mapping, each key
    one that ``isinstance`` can use (each is tried once, when the mapping is made) and each value
    an error class name. Until review R86 a key ``isinstance`` refuses (a type's name,
    ``"TimeoutError"``) was taken, and every classification raised ``TypeError`` from
    ``isinstance``: the whole chain counted each failure as ``error``, so nothing was retried and
    no breaker tripped.
    """

    def __init__(self, mapping: Mapping[ExceptionKinds, str]) -> None:
        if not isinstance(mapping, Mapping):
            raise InputError(
                f"by_type mapping: give a mapping of exception classes to error classes, "
                f"got {type(mapping).__name__}"
            )
        for kind in mapping:
            why = _unusable(kind)
            if why is not None:
                raise InputError(
                    f"by_type mapping: a key is an exception class, a tuple or union of them, "
                    f"or another class isinstance takes, got {quoted(kind)}{why}"
                )
        self.mapping = tuple(mapping.items())
        self.classes = _declared((error_class for _, error_class in self.mapping), "by_type mapping")

    def __call__(self, error: BaseException) -> str | None:
        for kind, error_class in self.mapping:
            if isinstance(error, kind):
                return error_class
        return None


def _unusable(kind: object) -> str | None:
    """Why ``isinstance`` cannot use ``kind`` as a ``by_type`` key (``""`` when it just refuses
    it), or None when it can. A tuple or a union is taken when each of its parts is; any other key,
    an exception class included, is tried on ``_PROBE`` once, and refused when that raises
    anything: a key whose check raises on one error raises on others, and the classifier would
    then class every failure ``error`` without reaching its later keys or the classifiers chained
    after it. Until review R86c only ``TypeError`` and ``RecursionError`` were caught around the
    probe, and a key's own check raising another error came out of ``by_type`` bare, and a tuple
    was taken whose first part matched the probe whatever came after it; R86c took an exception
    class without a probe, so one whose metaclass's ``__instancecheck__`` reads an attribute (an
    ``errno``) raised ``AttributeError`` inside the classifier on every other error, until review
    R86d."""
    try:
        if isinstance(kind, tuple | UnionType):
            for part in kind if isinstance(kind, tuple) else kind.__args__:
                why = _unusable(part)
                if why is not None:
                    return why
            return None
        isinstance(_PROBE, kind)  # type: ignore[arg-type]  # what is tried: whatever isinstance takes
    except (TypeError, RecursionError):  # a type's name, None, list[int], a tuple nested too deep
        return ""
    except Exception as exc:  # the key's own __instancecheck__ (or an ABC's __subclasshook__) failed
        return f" (its isinstance check raised {type(exc).__name__})"
    return None


class httpx_errors(Classifier):
    """httpx transport errors and HTTP statuses (429/503 transient, 502 connection, 504 timeout).

    httpx is not imported for it: an httpx error exists only once something imported httpx, so
    without it loaded nothing is httpx's (until review R64 every scheduler, and so every Gate,
    imported httpx, 45-65 ms of each process's start)."""

    def __call__(self, error: BaseException) -> str | None:
        httpx = sys.modules.get("httpx")
        if httpx is None:
            return None
        if isinstance(error, httpx.HTTPStatusError):
            return _HTTP_STATUS.get(error.response.status_code, "error")
        for kind, error_class in _httpx_kinds(httpx):
            if isinstance(error, kind):
                return error_class
        return None


class always(Classifier):
    """Every exception is ``error_class`` (the fallback at the end of a chain)."""

    def __init__(self, error_class: str) -> None:
        self.classes = _declared((error_class,), "always")
        self.error_class = error_class

    def __call__(self, error: BaseException) -> str | None:
        return self.error_class


class from_function(Classifier):
    """Wrap a plain function ``exception -> class | None``; ``classes``: those beyond the built-in
    ones that it may return. ``InputError`` unless ``function`` can be called (until review R86
    ``from_function(None)`` was taken, and every failure classed ``error``)."""

    def __init__(self, function: Callable[[BaseException], str | None], classes: Iterable[str] = ()) -> None:
        if not callable(function):
            raise InputError(f"from_function needs a function of an exception, got {quoted(function)}")
        self.function = function
        self.classes = _declared(classes, "from_function classes")

    def __call__(self, error: BaseException) -> str | None:
        return self.function(error)


DEFAULT_CLASSIFIER: Classifier = (
    by_attribute()
    | httpx_errors()
    | by_type(
        {
            TimeoutError: "timeout",
            DeadlineExceeded: "timeout",
            ConnectionRefusedError: "transient",
            ConnectionError: "connection",
        }
    )
    | always("error")
)
