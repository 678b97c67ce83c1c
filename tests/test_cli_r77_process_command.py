"""Review R77: the ``agentgate`` command's own process runs one command as "the process's" (the
one whose warnings a record logged outside any command's context is); two commands that start
at once in two threads both took it, and the first to end left the other's records to none."""

from __future__ import annotations

import threading
import time

from agentgate.cli import _warnings


class _SlowToAsk(_warnings._Process):
    """A process whose command takes a while to read, as a thread switch between the look and
    the taking would: both starting commands look before either takes."""

    @property
    def command(self) -> _warnings._Command | None:
        found = self.__dict__.get("_command")
        time.sleep(0.05)
        return found

    @command.setter
    def command(self, value: _warnings._Command | None) -> None:
        self.__dict__["_command"] = value


def test_two_commands_starting_at_once_leave_one_the_process_command_until_it_ends() -> None:
    process = _SlowToAsk()
    process.owned = True
    commands = [_warnings._Command(), _warnings._Command()]
    inside = threading.Barrier(2, timeout=10)
    seen: dict[int, tuple[bool, bool]] = {}

    def run(index: int) -> None:
        command = commands[index]
        with process.running(command):
            took = process.command is command
            inside.wait()
            seen[index] = (took, process.command is command)
            inside.wait()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(seen) == [0, 1]
    took = [index for index, (first, _) in seen.items() if first]
    assert len(took) == 1, seen
    assert seen[took[0]] == (True, True)
    assert process.command is None
