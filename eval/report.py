"""`memsift eval --report FILE.html`: the figures as one HTML page with inline SVG bar charts,
per conversation (memsift next to the origin baseline) and per stage of the cascade (how
each recall turn ended). Standard library only: the page opens anywhere, offline."""

from __future__ import annotations

import html
from pathlib import Path

from .figures import Figures

_COLORS = {"memsift": "#2b6cb0", "origin": "#a0aec0"}


def _bars(title: str, rows: list[tuple[str, list[tuple[str, float, str]]]], unit: str = "%") -> str:
    """A horizontal bar chart: rows of (label, [(series, value, text)])."""
    height = 22
    n = sum(len(series) for _, series in rows) + len(rows)
    out = [f'<h2>{html.escape(title)}</h2><svg width="760" height="{n * height + 10}" font-family="sans-serif" font-size="12">']
    y = 5
    top = max([v for _, series in rows for _, v, _ in series] + [1e-9])
    for label, series in rows:
        out.append(f'<text x="0" y="{y + 14}" font-weight="bold">{html.escape(label)}</text>')
        y += height
        for name, value, text in series:
            width = 480 * value / top
            out.append(f'<text x="10" y="{y + 14}">{html.escape(name)}</text>'
                       f'<rect x="130" y="{y + 3}" width="{width:.1f}" height="15" fill="{_COLORS.get(name, "#4a5568")}"/>'
                       f'<text x="{136 + width:.1f}" y="{y + 14}">{html.escape(text)}</text>')
            y += height
    out.append("</svg>")
    return "".join(out)


def write_report(path: Path, per_conversation: dict[str, dict[str, Figures]], outcomes: dict[str, int]) -> None:
    """Write the page. `per_conversation` maps a conversation id to its figures per pipeline."""
    def pct(a: int, b: int) -> float:
        return 100.0 * a / b if b else 0.0

    charts = [
        _bars("Recall turns found (a right item pasted)", [
            (conv, [(name, pct(f.found, f.recall_turns), f"{f.found}/{f.recall_turns}") for name, f in figs.items()])
            for conv, figs in per_conversation.items()]),
        _bars("Turns that needed nothing but got a paste", [
            (conv, [(name, pct(f.pasted_for_nothing, f.quiet), f"{f.pasted_for_nothing}/{f.quiet}") for name, f in figs.items()])
            for conv, figs in per_conversation.items()]),
        _bars("Characters pasted", [
            (conv, [(name, float(f.chars), f"{f.chars:,}") for name, f in figs.items()])
            for conv, figs in per_conversation.items()]),
        _bars("Recall turns by the stage that decided them (memsift)", [
            ("all conversations", [(why, float(n), str(n)) for why, n in sorted(outcomes.items(), key=lambda kv: -kv[1])])]),
    ]
    page = ("<!doctype html><meta charset='utf-8'><title>memsift eval</title>"
            "<body style='font-family:sans-serif;max-width:800px;margin:2em auto'><h1>memsift eval</h1>"
            + "".join(charts) + "</body>\n")
    Path(path).write_text(page, encoding="utf-8")
