"""A self-contained HTML page about the audit log, for a person who would rather look than read.

One file, no external assets (inline CSS and SVG, no scripts): the checkpoint it was made at,
the delegation picture the entries hold (which principals acted on which grant chain tips), a
decision timeline, and the budget burn-down per principal (cumulative committed spend, from the
``spend`` entries, in minor units).
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence

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
    return html.escape(str(text), quote=True)


def _timeline(entries: Sequence[AuditEntry]) -> str:
    kinds = [k for k in _COLOURS if any(e.kind == k for e in entries)]
    width, row = 900, 22
    height = row * max(len(kinds), 1) + 30
    n = max(len(entries) - 1, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 160}" height="{height}">']
    for r, kind in enumerate(kinds):
        y = 15 + r * row
        parts.append(f'<text x="0" y="{y + 4}" font-size="12">{_e(kind)}</text>')
        parts.append(f'<line x1="150" y1="{y}" x2="{150 + width}" y2="{y}" stroke="#eee"/>')
        for entry in entries:
            if entry.kind == kind:
                x = 150 + width * entry.index / n
                parts.append(
                    f'<circle cx="{x:.1f}" cy="{y}" r="4" fill="{_COLOURS[kind]}">'
                    f"<title>#{entry.index} {_e(entry.time)} {_e(entry.principal)} {_e(entry.resource or '')}"
                    "</title></circle>"
                )
    parts.append(f'<text x="150" y="{height - 4}" font-size="11">entry 0</text>')
    parts.append(f'<text x="{width + 100}" y="{height - 4}" font-size="11">entry {n}</text></svg>')
    return "".join(parts)


def _burn_down(entries: Sequence[AuditEntry]) -> str:
    series: dict[str, list[tuple[int, int]]] = defaultdict(list)
    totals: dict[str, int] = defaultdict(int)
    for entry in entries:
        if entry.kind in ("spend", "outcome") and entry.budget_delta:
            totals[entry.principal] += entry.budget_delta
            series[entry.principal].append((entry.index, totals[entry.principal]))
    if not series:
        return "<p>No committed spend in the log.</p>"
    width, height = 900, 260
    last = max(e.index for e in entries) or 1
    top = max(max(v for _i, v in points) for points in series.values()) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 20}" height="{height + 30}">']
    parts.append(f'<rect x="10" y="10" width="{width}" height="{height}" fill="none" stroke="#ccc"/>')
    legend = []
    for n, (principal, points) in enumerate(sorted(series.items())):
        colour = _PALETTE[n % len(_PALETTE)]
        coords = " ".join(
            f"{10 + width * i / last:.1f},{10 + height - height * v / top:.1f}" for i, v in [(0, 0), *points]
        )
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        legend.append(
            f'<li><span class="k" style="background:{colour}"></span><code>{_e(principal)}</code>: '
            f"{totals[principal]} spent</li>"
        )
    parts.append(
        f'<text x="12" y="{height + 25}" font-size="11">cumulative spend (max {top}) by entry index</text>'
    )
    parts.append("</svg>")
    return "".join(parts) + "<ul>" + "".join(legend) + "</ul>"


def _delegation(entries: Sequence[AuditEntry]) -> str:
    by_tip: dict[str, set[str]] = defaultdict(set)
    for entry in entries:
        by_tip[entry.chain_hash or "(no chain recorded)"].add(entry.principal)
    items = []
    for tip, principals in sorted(by_tip.items()):
        inner = "".join(f"<li>acted as <code>{_e(p)}</code></li>" for p in sorted(principals))
        items.append(f'<li>grant chain tip <code>{_e(tip)}</code><ul class="tree">{inner}</ul></li>')
    return (
        "<p>The log records each decision's grant chain tip; the grants themselves live in the "
        "grant store.</p>"
        f'<ul class="tree">{"".join(items)}</ul>'
    )


def render_report(entries: Sequence[AuditEntry], checkpoint: Checkpoint | None) -> str:
    """The whole HTML page for ``entries`` (and the checkpoint they were verified against)."""
    head = (
        f"signed checkpoint: <code>{_e(checkpoint.origin)}</code>, size {checkpoint.size}, "
        f"root <code>{checkpoint.root.hex()}</code>"
        if checkpoint
        else "no signed checkpoint yet (run <code>agentgate audit checkpoint</code>)"
    )
    counts: dict[str, int] = defaultdict(int)
    for entry in entries:
        counts[entry.kind] += 1
    summary = "".join(
        f'<li><span class="k" style="background:{_COLOURS[k]}"></span>{_e(k)}: {counts[k]}</li>'
        for k in _COLOURS
        if counts[k]
    )
    rows = "".join(
        f"<tr><td>{e.index}</td><td>{_e(e.time)}</td><td>{_e(e.kind)}</td><td><code>{_e(e.principal)}</code></td>"
        f"<td>{_e(e.resource or '')}</td><td>{e.budget_delta}</td><td>{_e('; '.join(e.reasons))}</td></tr>"
        for e in entries[-500:]
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>agentgate audit report</title>'
        f"<style>{_STYLE}</style></head><body><h1>agentgate audit report</h1>"
        f"<p>{len(entries)} entries; {head}</p><ul>{summary}</ul>"
        f"<h2>Delegation</h2>{_delegation(entries)}"
        f"<h2>Decision timeline</h2>{_timeline(entries)}"
        f"<h2>Budget burn-down per principal</h2>{_burn_down(entries)}"
        "<h2>Latest entries</h2><table><tr><th>#</th><th>time</th><th>kind</th><th>principal</th>"
        f"<th>resource</th><th>budget</th><th>reasons</th></tr>{rows}</table></body></html>\n"
    )
