"""httpx for the loopback servers the tests start, with one TLS trust store per process.

Every ``httpx.Client()``, ``httpx.AsyncClient()`` and module-level ``httpx.get``/``post`` builds
its own ``ssl.SSLContext`` and loads the CA bundle into it (45-60 ms of CPU here), although the
tests only ever speak ``http://`` to loopback: about 5% of the suite's CPU went to that
(tests/README.md, "How long it takes, and where the time goes"). These take the same arguments as
httpx's and hand it the one context ``TLS`` instead (an argument ``verify=`` of a call's own wins).
"""

from __future__ import annotations

import functools

import httpx

TLS = httpx.create_ssl_context()
"""The context httpx would build for each client: certifi's bundle, or ``SSL_CERT_FILE``."""

get = functools.partial(httpx.get, verify=TLS)
post = functools.partial(httpx.post, verify=TLS)
delete = functools.partial(httpx.delete, verify=TLS)
request = functools.partial(httpx.request, verify=TLS)
stream = functools.partial(httpx.stream, verify=TLS)
Client = functools.partial(httpx.Client, verify=TLS)
AsyncClient = functools.partial(httpx.AsyncClient, verify=TLS)
