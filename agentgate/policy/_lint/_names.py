"""Lint rules on how a policy names things (authority_chain_opacity): two names of one section
that differ only in case, or that read alike otherwise (Unicode's confusables: ``rn`` and ``m``,
``l`` and ``1``), and an argument name holding a character a reader cannot see or may take for
another.

Loading compares every name exactly, so neither changes a decision; both make the policy read
as something it is not. A tenant ``acme`` beside ``Acme`` is two tenants a quota on one counts
apart; an argument declared ``amo\\u200bunt`` is one no call names, so every call naming
``amount`` is denied as undeclared, and the author is not told why.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Iterator

from agentgate import _confusables
from agentgate._shown import character_named, not_printable
from agentgate.findings import Finding, Severity
from agentgate.policy._lint._common import OPAQUE, LintRule
from agentgate.policy._load import Policy

_NAMED_SECTIONS = (
    "trust_anchors",
    "tenants",
    "models",
    "priority_classes",
    "roles",
    "quotas",
    "approvals",
)
"""The sections whose names may hold upper-case letters (tool and GPU names are lower case), but
principals: two that differ only in case are refused at load (review R67)."""


class NamesDifferOnlyInCase(LintRule):
    code = "names_differ_only_in_case"
    kind = OPAQUE
    hint = "rename one of them: people, and tools that ignore case, read the two names as one"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for section, name, (earlier, *_) in _taken_for_earlier(policy, _NAMED_SECTIONS, _case_folded):
            yield self.finding(
                policy,
                f"{section} {name} and {earlier} differ only in case: every reference names "
                "one of them exactly, where a reader takes them for one",
                policy.line_of(section, name, key=True),
            )


def _case_folded(name: str) -> tuple[str]:
    return (name.casefold(),)


def _taken_for_earlier(
    policy: Policy, sections: Iterable[str], keys: Callable[[str], Iterable[str]]
) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """Each ``(section, name, earlier)``: a name of one of ``sections`` that shares one of its
    ``keys`` (how a reader takes it) with earlier names of that section, ``earlier``, in code
    point order (``bobI`` reads as ``bobi`` and as ``bobl``, which read apart). Until review R91's
    second reading only one was told, the first in the order of a set of readings, which each
    process's hash seed set: ``names_read_alike`` reported ``bobI`` as reading as ``bobl`` in some
    processes and nothing in others (``bobi``, which differs only in case, being the other rule's)."""
    for section in sections:
        first: dict[str, str] = {}
        for name in getattr(policy.document, section):
            held = tuple(keys(name))
            earlier = sorted({first[key] for key in held if key in first})
            for key in held:
                first.setdefault(key, name)
            if earlier:
                yield section, name, tuple(earlier)


_READ_SECTIONS = (*_NAMED_SECTIONS, "tools", "gpus")
"""The sections ``NamesReadAlike`` reads: all but principals, which are refused at load when two
read alike (review R68)."""


class NamesReadAlike(LintRule):
    code = "names_read_alike"
    kind = OPAQUE
    hint = "rename one of them: people read the two names as one"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for section, name, alike in _taken_for_earlier(policy, _READ_SECTIONS, _confusables.readings):
            # One that differs only in case is ``names_differ_only_in_case``'s.
            earlier = next((e for e in alike if e.casefold() != name.casefold()), None)
            if earlier is not None:
                yield self.finding(
                    policy,
                    f"{section} {name} and {earlier} read alike (Unicode's confusables): every "
                    "reference names one of them exactly, where a reader takes them for one",
                    policy.line_of(section, name, key=True),
                )


class UnclearArgumentName(LintRule):
    code = "unclear_argument_name"
    kind = OPAQUE
    hint = "write the name in plain ASCII, as the tool's calls name the argument"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, tool in policy.document.tools.items():
            for arg in tool.args:
                line = policy.line_of("tools", name, "args", arg, key=True)
                yield from self._name(policy, f"tool {name}: argument name", arg, line)
            for i, arg in enumerate(tool.loggable):
                line = policy.line_of("tools", name, "loggable", i)
                yield from self._name(policy, f"tool {name}: loggable argument name", arg, line)
        for gate_name, gate in policy.document.approvals.items():
            for arg in gate.when:
                line = policy.line_of("approvals", gate_name, "when", arg, key=True)
                yield from self._name(policy, f"approval gate {gate_name}: argument name", arg, line)

    def _name(self, policy: Policy, what: str, arg: str, line: int | None) -> Iterator[Finding]:
        """An error for the first character of ``arg`` that cannot be seen (a control, a format
        character, a space), else a warning for its first that is not ASCII (``о``, U+043E, reads
        as ``o``); nothing for a plain name."""
        hidden = next((c for c in arg if not_printable(c) or c.isspace()), None)
        if hidden is not None:
            said = character_named(hidden) if not_printable(hidden) else f"a space U+{ord(hidden):04X}"
            yield self.finding(policy, f"{what} {arg!r} holds {said}", line)
            return
        foreign = next((c for c in arg if not c.isascii()), None)
        if foreign is not None:
            letter = unicodedata.name(foreign, "an unnamed character")
            yield self.finding(
                policy,
                f"{what} {arg!r} holds U+{ord(foreign):04X} {letter}, not ASCII: it may read as another letter",
                line,
                severity=Severity.WARNING,
            )
