"""Error classification: which kind of failure is this exception?

A classifier maps an exception to an error class (a short string) or to None ("not mine").
Classifiers compose with ``|``: the first one with an answer wins, and ``DEFAULT_CLASSIFIER``
ends in ``"error"``. The classes the scheduler knows:

- ``transient``: failed before any effect, safe to retry (connection refused, HTTP 429/503).
- ``timeout``: no answer in time; the effect may or may not have happened (ambiguous).
- ``connection``: the connection broke after the request may have been sent (ambiguous).
- ``error``: anything else; retried only if a policy lists it in ``retry_on``.

A tool can classify its own exceptions by giving them an ``error_class`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from agentgate.errors import DeadlineExceeded

#: Where the httpx exception tree says the request may already have reached the server.
_HTTPX: tuple[tuple[type[BaseException], str], ...] = (
    (httpx.ConnectError, "transient"),
    (httpx.ConnectTimeout, "transient"),
    (httpx.PoolTimeout, "transient"),
    (httpx.TimeoutException, "timeout"),
    (httpx.TransportError, "connection"),
)
_HTTP_STATUS = {429: "transient", 503: "transient", 502: "connection", 504: "timeout"}


class Classifier:
    """Maps an exception to an error class, or None to let the next classifier decide."""

    def __call__(self, error: BaseException) -> str | None:
        raise NotImplementedError

    def __or__(self, other: Classifier) -> Classifier:
        return _FirstOf((self, other))


class _FirstOf(Classifier):
    def __init__(self, parts: tuple[Classifier, ...]) -> None:
        self.parts = parts

    def __call__(self, error: BaseException) -> str | None:
        for part in self.parts:
            found = part(error)
            if found is not None:
                return found
        return None


class by_attribute(Classifier):
    """The exception's own ``error_class`` attribute, when it is a string."""

    def __init__(self, name: str = "error_class") -> None:
        self.name = name

    def __call__(self, error: BaseException) -> str | None:
        value = getattr(error, self.name, None)
        return value if isinstance(value, str) else None


class by_type(Classifier):
    """The class mapped to the first type the exception is an instance of (mapping order)."""

    def __init__(self, mapping: Mapping[type[BaseException], str]) -> None:
        self.mapping = tuple(mapping.items())

    def __call__(self, error: BaseException) -> str | None:
        for kind, error_class in self.mapping:
            if isinstance(error, kind):
                return error_class
        return None


class httpx_errors(Classifier):
    """httpx transport errors and HTTP statuses (429/503 transient, 502 connection, 504 timeout)."""

    def __call__(self, error: BaseException) -> str | None:
        if isinstance(error, httpx.HTTPStatusError):
            return _HTTP_STATUS.get(error.response.status_code, "error")
        for kind, error_class in _HTTPX:
            if isinstance(error, kind):
                return error_class
        return None


class always(Classifier):
    """Every exception is ``error_class`` (the fallback at the end of a chain)."""

    def __init__(self, error_class: str) -> None:
        self.error_class = error_class

    def __call__(self, error: BaseException) -> str | None:
        return self.error_class


class from_function(Classifier):
    """Wrap a plain function ``exception -> class | None``."""

    def __init__(self, function: Callable[[BaseException], str | None]) -> None:
        self.function = function

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
