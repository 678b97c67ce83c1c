"""A self-contained HTML page about the audit log, for a person who would rather look than read.

One file, no external assets (inline CSS and SVG, no scripts): whether the log verified, the
checkpoint it was made at, the delegation picture the entries hold (which principals acted on
which grant chain tips), a decision timeline, the budget burn-down per principal (cumulative
committed spend, from the ``spend`` and ``outcome`` entries, in minor units, one series per
principal and unit: ``spent_unit``, one chart per unit on its own scale; the first 200 series drawn), and the allowed
tool and model calls that have no outcome (still running, or their outcome was lost: their
reservations are held, each in the unit the outcomes of its resource on its grant record). Made in one pass over the entries: charts keep at most one point per pixel, the table the
newest 500 entries.
"""

from __future__ import annotations

import html
import itertools
import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from agentgate._shown import not_printable
from agentgate.audit.entry import AuditEntry
from agentgate.audit.note import Checkpoint

_COLOURS = {
    "allow": "#2e7d32",
    "deny": "#c62828",
    "approval_required": "#ef6c00",
    "approval_given": "#1565c0",
    "revoke": "#6a1b9a",
    "spend": "#00838f",
    "outcome": "#616161",
}
_PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#4e342e"]
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em}td,th{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left}
code{font-size:.85em}.k{display:inline-block;width:.8em;height:.8em;margin-right:.3em;border-radius:50%}
ul.tree{list-style:none;padding-left:1em}ul.tree li{margin:.2em 0}
"""


def _e(text: object) -> str:
    """``text`` for the page: each ``not_printable`` character (a control character, a bidi
    override, a line separator) and each backslash as its Python escape (``\\x1b``, ``\\u202e``,
    ``\\\\``), as the CLI prints entries, then HTML-escaped. Until review R66 an entry's text went
    in as it was: a bidi override reordered its cell, and ``cat`` of the page sent its escape
    sequences to the terminal."""
    return _escaped(str(text), backslashes=True)


def _escaped(text: str, *, backslashes: bool) -> str:
    """``text`` with each ``not_printable`` character (and, with ``backslashes``, each backslash)
    as its Python escape, then HTML-escaped. Without ``backslashes`` for what verification
    reports, which quotes an entry's text escaped already (as the CLI's ``escaped_once``)."""
    shown = "".join(
        c.encode("unicode_escape").decode("ascii") if (backslashes and c == "\\") or not_printable(c) else c
        for c in text
    )
    return html.escape(shown, quote=True)


def _amount(total: int) -> str:
    """``total`` in decimal, or, beyond the 4300 digits Python writes (a sum of entries'
    ``budget_delta``, each within them), as its order of magnitude."""
    try:
        return str(total)
    except ValueError:
        return f"{'-' if total < 0 else ''}about 10^{int(math.log10(abs(total)))}"


def each_charge(entry: AuditEntry) -> Iterator[tuple[str, int, str]]:
    """``(grant id, amount, unit)`` for each charge of the outcome ``entry`` (its ``charges``),
    by grant id then unit; none for an entry without them. ``charged_text`` writes them on one
    line, ``audit explain`` one per line of its tree."""
    for grant_id, by_unit in sorted((entry.charges or {}).items()):
        for unit, n in sorted(by_unit.items()):
            yield grant_id, n, unit


def charged_text(entry: AuditEntry, quote: Callable[[str], str]) -> str:
    """``GRANT: N UNIT; ...``: what each grant was charged by the outcome ``entry``
    (``each_charge``, grant ids cut to 12 characters, each text through ``quote`` for where it
    is shown), or ``""`` for an entry without them. The report's table, ``audit show`` and
    ``audit explain``'s related entries show it (until review R61 ``budget_delta`` alone)."""
    return "; ".join(f"{quote(grant_id[:12])}: {n} {quote(unit)}" for grant_id, n, unit in each_charge(entry))


def budget_figure(entry: AuditEntry, allow_unit: str | None, quote: Callable[[str], str]) -> str:
    """``entry``'s ``budget_delta`` with its unit (through ``quote``) where the log records it,
    ``300000 usd_micros``: an outcome's from its ``charges`` (``spent_unit``), an allow's as
    ``allow_unit``, the unit its call's outcomes record (the caller follows the allow to them);
    bare where neither says it, and for 0. The report's table, ``audit show`` and ``audit
    explain`` write their figures with it (until review R63 the last two wrote them bare)."""
    unit = spent_unit(entry) if entry.kind == "outcome" else allow_unit if entry.kind == "allow" else None
    return (
        str(entry.budget_delta)
        if unit is None or not entry.budget_delta
        else f"{entry.budget_delta} {quote(unit)}"
    )


def _charged(entry: AuditEntry) -> str:
    """``charged_text`` below the table's budget figure."""
    charged = charged_text(entry, _e)
    return f"<br><small>charged {charged}</small>" if charged else ""


_WIDTH = 900
"""Horizontal pixels of the charts: at most about this many points per series are drawn."""
_TABLE_ROWS = 500
"""The newest entries listed in the table."""
_MAX_TIPS = 200
"""Grant chain tips shown in the delegation picture; entries on others are counted."""
_MAX_PRINCIPALS = 50
"""Principals listed under one grant chain tip; entries by others on it are counted."""
_MAX_SERIES = 200
"""Burn-down series (principal and unit) drawn; spend entries of other series are counted.
Until review R66 every principal and unit seen was kept: a log of 40,000 principals held 78 MB
and wrote an 18 MB page."""
_MAX_OPEN = 10_000
"""Allowed calls without an outcome followed at once (each a few hundred bytes); past that the
oldest is no longer followed, and counted."""


@dataclass
class _Summary:
    """What the page shows, gathered in one pass over the entries in memory that does not grow
    with the log: points are kept per bucket of ``stride`` consecutive indexes (at most
    ``_WIDTH`` buckets; when an index passes them, ``stride`` doubles and neighbours merge)."""

    count: int = 0
    last_index: int = 0
    stride: int = 1
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # kind -> bucket -> (index and title of the bucket's first entry, entries in the bucket)
    timeline: dict[str, dict[int, tuple[int, str, int]]] = field(default_factory=lambda: defaultdict(dict))
    totals: dict[tuple[str, str | None], int] = field(default_factory=lambda: defaultdict(int))
    # unit -> the largest cumulative spend of any series in it: the top of its chart's scale
    tops: dict[str | None, int] = field(default_factory=lambda: defaultdict(int))
    # (principal, unit) -> bucket -> (index, cumulative spend) of the bucket's last spend
    spend: dict[tuple[str, str | None], dict[int, tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    tips: dict[str, set[str]] = field(default_factory=dict)
    other_tips: int = 0
    other_principals: int = 0  # entries by a principal not listed under their tip
    other_series: int = 0  # spend entries of a series not drawn
    newest: deque[AuditEntry] = field(default_factory=lambda: deque(maxlen=_TABLE_ROWS))
    # allow index -> (time, principal, resource, reserved, chain tip) of allowed calls with no
    # outcome yet
    open_calls: dict[int, tuple[str, str, str, int, str]] = field(default_factory=dict)
    unfollowed: int = 0
    # (chain tip, resource) -> the unit its outcomes record (``spent_unit``): an allowed call's
    # reservation is in it (one chain's tool and model calls may cost in different units: a tool
    # nothing in a tokens budget); the newest ``_MAX_OPEN`` kept
    units: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, entry: AuditEntry) -> None:
        self.count += 1
        self.last_index = max(self.last_index, entry.index)
        while entry.index // self.stride >= _WIDTH:
            self._widen()
        bucket = entry.index // self.stride
        self.counts[entry.kind] += 1
        points = self.timeline[entry.kind]
        if bucket in points:
            index, title, seen = points[bucket]
            points[bucket] = (index, title, seen + 1)
        else:
            title = f"#{entry.index} {_e(entry.time)} {_e(entry.principal)} {_e(entry.resource or '')}"
            points[bucket] = (entry.index, title, 1)
        unit = spent_unit(entry) if entry.kind == "outcome" else None
        if unit is not None and entry.chain_hash:
            call = (entry.chain_hash, entry.resource or "")
            self.units.pop(call, None)  # re-inserted: the newest are kept
            self.units[call] = unit
            if len(self.units) > _MAX_OPEN:
                del self.units[next(iter(self.units))]
        if entry.kind in ("spend", "outcome") and entry.budget_delta:
            self._add_spend((entry.principal, unit), entry, bucket)
        tip = entry.chain_hash or "(no chain recorded)"
        if tip in self.tips:
            principals = self.tips[tip]
            if entry.principal in principals or len(principals) < _MAX_PRINCIPALS:
                principals.add(entry.principal)
            else:
                self.other_principals += 1
        elif len(self.tips) < _MAX_TIPS:
            self.tips[tip] = {entry.principal}
        else:
            self.other_tips += 1
        self.newest.append(entry)
        # Grants have no outcome, and neither has a GPU lease's renewal (its lease's outcomes
        # refer to the lease's first decision), which the entry does not tell from a request.
        if entry.kind == "allow" and not (entry.resource or "").startswith(("agent:", "gpu:")):
            self.open_calls[entry.index] = (
                entry.time,
                entry.principal,
                entry.resource or "",
                entry.budget_delta,
                entry.chain_hash or "",
            )
            if len(self.open_calls) > _MAX_OPEN:
                del self.open_calls[next(iter(self.open_calls))]
                self.unfollowed += 1
        elif entry.kind == "outcome" and entry.ref is not None:
            self.open_calls.pop(entry.ref, None)

    def _add_spend(self, series: tuple[str, str | None], entry: AuditEntry, bucket: int) -> None:
        """Add ``entry``'s spend to its ``series``; one not drawn yet, past ``_MAX_SERIES``, is counted."""
        if series not in self.totals and len(self.totals) >= _MAX_SERIES:
            self.other_series += 1
            return
        self.totals[series] += entry.budget_delta
        total = self.totals[series]
        self.tops[series[1]] = max(self.tops[series[1]], total)
        self.spend[series][bucket] = (entry.index, total)

    def _widen(self) -> None:
        self.stride *= 2
        for kind, buckets in self.timeline.items():
            merged: dict[int, tuple[int, str, int]] = {}
            for bucket, (index, title, seen) in sorted(buckets.items()):
                kept = merged.get(bucket // 2)
                merged[bucket // 2] = (kept[0], kept[1], kept[2] + seen) if kept else (index, title, seen)
            self.timeline[kind] = merged
        for principal, points in self.spend.items():
            # sorted: the later bucket's point (the last spend) wins
            self.spend[principal] = {bucket // 2: point for bucket, point in sorted(points.items())}


def _timeline(summary: _Summary) -> str:
    kinds = [k for k in _COLOURS if summary.counts[k]]
    width, row = _WIDTH, 22
    height = row * max(len(kinds), 1) + 30
    n = max(summary.last_index, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 160}" height="{height}">']
    for r, kind in enumerate(kinds):
        y = 15 + r * row
        parts.append(f'<text x="0" y="{y + 4}" font-size="12">{_e(kind)}</text>')
        parts.append(f'<line x1="150" y1="{y}" x2="{150 + width}" y2="{y}" stroke="#eee"/>')
        for _bucket, (index, title, seen) in sorted(summary.timeline[kind].items()):
            x = 150 + width * index / n
            more = f" (and {seen - 1} more)" if seen > 1 else ""
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y}" r="4" fill="{_COLOURS[kind]}"><title>{title}{more}</title></circle>'
            )
    parts.append(f'<text x="150" y="{height - 4}" font-size="11">entry 0</text>')
    parts.append(f'<text x="{width + 100}" y="{height - 4}" font-size="11">entry {n}</text></svg>')
    return "".join(parts)


def _burn_down(summary: _Summary) -> str:
    """One chart per unit, each on its own scale (until review R62 every series was drawn on the
    scale of the largest, 2 calls flat at the foot of a 500000 micro-dollar chart)."""
    if not summary.spend:
        return "<p>No committed spend in the log.</p>"
    by_unit: dict[str | None, list[tuple[str, dict[int, tuple[int, int]]]]] = defaultdict(list)
    for (principal, unit), buckets in sorted(summary.spend.items(), key=_by_series):
        by_unit[unit].append((principal, buckets))
    others = (
        f"<p>{summary.other_series} more spend entries, by other principals or in other units, "
        f"are not drawn (the first {_MAX_SERIES} series are).</p>"
        if summary.other_series
        else ""
    )
    return "".join(_unit_chart(summary, unit, series) for unit, series in by_unit.items()) + others


def _unit_chart(
    summary: _Summary, unit: str | None, series: list[tuple[str, dict[int, tuple[int, int]]]]
) -> str:
    """The burn-down of the principals' ``series`` in ``unit``, scaled to the largest of them."""
    width, height = _WIDTH, 260
    last = summary.last_index or 1
    top = summary.tops[unit] or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 20}" height="{height + 30}">']
    parts.append(f'<rect x="10" y="10" width="{width}" height="{height}" fill="none" stroke="#ccc"/>')
    legend = []
    for n, (principal, buckets) in enumerate(series):
        colour = _PALETTE[n % len(_PALETTE)]
        points = [(0, 0), *(point for _bucket, point in sorted(buckets.items()))]
        # A spend below -top is drawn at -top, under the chart already: v / top would overflow a
        # float for one beyond a double's range (budget_delta is any integer).
        coords = " ".join(
            f"{10 + width * i / last:.1f},{10 + height - height * max(v, -top) / top:.1f}" for i, v in points
        )
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        legend.append(
            f'<li><span class="k" style="background:{colour}"></span><code>{_e(principal)}</code>: '
            f"{_amount(summary.totals[principal, unit])} {_spent(unit)}</li>"
        )
    spend = "spend (unit not recorded)" if unit is None else f"spend in {_e(unit)}"
    parts.append(
        f'<text x="12" y="{height + 25}" font-size="11">cumulative {spend} (max {_amount(top)}) by entry index</text>'
    )
    parts.append("</svg>")
    return "".join(parts) + "<ul>" + "".join(legend) + "</ul>"


def spent_unit(entry: AuditEntry) -> str | None:
    """The unit of ``entry``'s ``budget_delta`` where its ``charges`` say it: the one unit its
    own grant (the chain's tip) was charged in, else the one unit the whole chain was charged
    in; ``None`` where they do not say (no ``charges``: a ``spend`` entry, an outcome written
    before review R61; or several units and none the tip's alone). Until review R62 every figure
    of a principal was summed into one, ``1`` call and ``500000`` micro-dollars read ``500001``."""
    charges = entry.charges or {}
    own = charges.get(entry.chain_hash or "", {})
    units = set(own) if own else {unit for by_unit in charges.values() for unit in by_unit}
    return next(iter(units)) if len(units) == 1 else None


def _by_series(item: tuple[tuple[str, str | None], object]) -> tuple[str, str]:
    """A burn-down series' sort key: by principal, then unit, the unrecorded unit last."""
    (principal, unit), _points = item
    return principal, "\uffff" if unit is None else unit


def _spent(unit: str | None) -> str:
    """What follows a burn-down total in its legend: ``UNIT spent``, or ``spent (unit not
    recorded)`` for the figures whose entries do not say their unit (``spent_unit``)."""
    return "spent (unit not recorded)" if unit is None else f"{_e(unit)} spent"


def _delegation(summary: _Summary) -> str:
    items = []
    for tip, principals in sorted(summary.tips.items()):
        inner = "".join(f"<li>acted as <code>{_e(p)}</code></li>" for p in sorted(principals))
        items.append(f'<li>grant chain tip <code>{_e(tip)}</code><ul class="tree">{inner}</ul></li>')
    others = (
        f"<p>{summary.other_tips} more entries act on other grant chain tips (not shown).</p>"
        if summary.other_tips
        else ""
    )
    if summary.other_principals:
        others += (
            f"<p>{summary.other_principals} more entries act as other principals on the tips shown "
            f"(the first {_MAX_PRINCIPALS} of each tip are listed).</p>"
        )
    return (
        "<p>The log records each decision's grant chain tip; the grants themselves live in the "
        "grant store.</p>"
        f'<ul class="tree">{"".join(items)}</ul>{others}'
    )


def _open_calls(summary: _Summary) -> str:
    if not summary.open_calls and not summary.unfollowed:
        return "<p>Every allowed call has its outcome.</p>"
    held: dict[str | None, int] = defaultdict(int)
    for _time, _principal, resource, reserved, tip in summary.open_calls.values():
        held[summary.units.get((tip, resource))] += reserved
    in_all = "; ".join(
        f"{_amount(total)} in all, " + ("in a unit no outcome records" if unit is None else f"in {_e(unit)}")
        for unit, total in sorted(held.items(), key=lambda item: "\uffff" if item[0] is None else item[0])
    )
    unfollowed = (
        f" ({summary.unfollowed} older allowed calls were not followed to their outcome: "
        "the page follows the newest 10,000 without one)"
        if summary.unfollowed
        else ""
    )
    rows = "".join(
        f"<tr><td>{index}</td><td>{_e(time)}</td><td><code>{_e(principal)}</code></td>"
        f"<td>{_e(resource)}</td><td>{_reserved(reserved, summary.units.get((tip, resource)))}</td></tr>"
        for index, (time, principal, resource, reserved, tip) in itertools.islice(
            summary.open_calls.items(), _TABLE_ROWS
        )
    )
    more = (
        f"<p>and {len(summary.open_calls) - _TABLE_ROWS} more.</p>"
        if len(summary.open_calls) > _TABLE_ROWS
        else ""
    )
    return (
        f"<p>{len(summary.open_calls)} allowed calls have no outcome{unfollowed}: still running when "
        "the page was made, or their outcome was lost (their process stopped before it was written). "
        f"Each holds its reservation ({in_all or 'nothing held'}) until it is settled; "
        "<code>agentgate audit explain INDEX</code> shows one, <code>agentgate tasks "
        "unsettled</code> lists those of tools that must run once. GPU lease decisions are not "
        "followed here (a renewal's decision has no outcome of its own).</p>"
        "<table><tr><th>#</th><th>time</th><th>principal</th><th>resource</th><th>reserved</th></tr>"
        f"{rows}</table>{more}"
    )


def _figure(entry: AuditEntry, summary: _Summary) -> str:
    """The table's budget figure of ``entry`` (``budget_figure``), an allow's unit from the
    outcomes of its resource on its grant (until review R62 always bare, micro-dollars or calls
    alike)."""
    return budget_figure(entry, summary.units.get((entry.chain_hash or "", entry.resource or "")), _e)


def _reserved(amount: int, unit: str | None) -> str:
    """An open call's reservation with its unit, as the outcomes of its resource on its grant
    record it."""
    return f"{amount} (unit not recorded)" if unit is None else f"{amount} {_e(unit)}"


def _verification(problems: Sequence[str] | None) -> str:
    if problems is None:
        return "<p>The log was not verified for this page (run <code>agentgate audit verify</code>).</p>"
    if not problems:
        return "<p><strong>Verified intact</strong> when this page was made (<code>agentgate audit verify</code>).</p>"
    listed = "".join(f"<li>{_escaped(problem, backslashes=False)}</li>" for problem in problems[:50])
    more = f"<li>and {len(problems) - 50} more</li>" if len(problems) > 50 else ""
    return (
        f'<p style="color:#c62828"><strong>TAMPERED: the log failed verification</strong> '
        f"({len(problems)} problem(s)); what follows shows the entries as they are stored.</p>"
        f"<ul>{listed}{more}</ul>"
    )


PAGE_START = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>agentgate audit report</title>'
)
"""How every page ``render_report`` writes begins: ``audit report --out`` replaces a file that
begins so (an earlier report), and refuses to replace any other that is not empty."""


def render_report(
    entries: Iterable[AuditEntry], checkpoint: Checkpoint | None, problems: Sequence[str] | None = None
) -> str:
    """The whole HTML page for ``entries`` (in index order), read once; memory does not grow with
    their number. ``checkpoint`` is the latest signed one (``None``: none, or none shown for a log
    that failed verification); ``problems`` what verification found (empty: intact; ``None``: not
    verified), shown at the top."""
    summary = _Summary()
    for entry in entries:
        summary.add(entry)
    head = (
        f"signed checkpoint: <code>{_e(checkpoint.origin)}</code>, size {checkpoint.size}, "
        f"root <code>{checkpoint.root.hex()}</code>"
        if checkpoint
        else "no checkpoint shown: the log failed verification"
        if problems
        else "no signed checkpoint yet (run <code>agentgate audit checkpoint</code>)"
    )
    kinds = "".join(
        f'<li><span class="k" style="background:{_COLOURS[k]}"></span>{_e(k)}: {summary.counts[k]}</li>'
        for k in _COLOURS
        if summary.counts[k]
    )
    rows = "".join(
        f"<tr><td>{e.index}</td><td>{_e(e.time)}</td><td>{_e(e.kind)}</td><td><code>{_e(e.principal)}</code></td>"
        f"<td>{_e(e.resource or '')}</td><td>{_figure(e, summary)}{_charged(e)}</td><td>{_e('; '.join(e.reasons))}</td></tr>"
        for e in summary.newest
    )
    return (
        f"{PAGE_START}<style>{_STYLE}</style></head><body><h1>agentgate audit report</h1>"
        f"{_verification(problems)}"
        f"<p>{summary.count} entries; {head}</p><ul>{kinds}</ul>"
        f"<p>{len(summary.open_calls)} allowed calls without an outcome (below).</p>"
        f"<h2>Delegation</h2>{_delegation(summary)}"
        f"<h2>Decision timeline</h2>{_timeline(summary)}"
        f"<h2>Budget burn-down per principal</h2>{_burn_down(summary)}"
        f"<h2>Allowed calls without an outcome</h2>{_open_calls(summary)}"
        "<h2>Latest entries</h2><table><tr><th>#</th><th>time</th><th>kind</th><th>principal</th>"
        f"<th>resource</th><th>budget</th><th>reasons</th></tr>{rows}</table></body></html>\n"
    )
