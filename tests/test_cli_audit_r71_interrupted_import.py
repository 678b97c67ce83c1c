"""A Ctrl-C (or SIGTERM) that lands while a verb's handler module is being imported.

Until review R71 ``handled_by`` imported the handler's module (``agentgate.cli.audit``, and with
it pydantic and orjson) with SIGINT live: a Ctrl-C in the first fraction of a second of ``audit
verify`` raised ``KeyboardInterrupt`` inside an extension module's initialization, and orjson
3.13's crashed the interpreter (exit -11, SIGSEGV, no ``agentgate: interrupted`` line), about one
run in ten when the signal came 0.3-0.5 s after start on a loaded machine.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from agentgate.cli._handlers import handled_by


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_handler_import_waits_for_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    """Review R71: the signal interrupted the import half way (an extension module's init
    included). Rule: the module is imported whole, then the signal's handler runs (Ctrl-C's
    ``KeyboardInterrupt``: exit 130 in ``main``), and the handler itself does not run."""
    (tmp_path / "r71_slow_handlers.py").write_text(
        "import os, signal\n"
        f"os.kill(os.getpid(), {int(signum)})\n"
        "for _ in range(1000):\n"
        "    pass  # where the interpreter would run the signal's handler\n"
        "IMPORTED_WHOLE = True\n"
        "def run(args):\n"
        "    raise AssertionError('the handler ran after the interrupt')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "r71_slow_handlers", raising=False)

    class Stop(BaseException):
        pass

    def stop(signum: int, frame: object) -> None:
        raise Stop

    before = signal.signal(signum, stop)
    try:
        with pytest.raises(Stop):
            handled_by("r71_slow_handlers", "run")(None)  # type: ignore[arg-type]
        assert signal.getsignal(signum) is stop  # put back as it was
    finally:
        signal.signal(signum, before)
    assert getattr(sys.modules.get("r71_slow_handlers"), "IMPORTED_WHOLE", False)
