"""Inline SVG charts for the report, written as text (no plotting library, no scripts).

Every label passes through :func:`markupsafe.escape`; numbers are formatted
by Python. The charts are static; the page's script only toggles series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from confide.metrics import ReliabilityDiagram

__all__ = ["PALETTE", "Series", "colour", "line_chart", "reliability_chart"]

#: Colour-blind-safe palette (Okabe–Ito, then Tol's muted); the length baseline is grey.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#882255",
           "#117733", "#999933", "#332288", "#AA4499", "#44AA99")
BASELINE_COLOUR = "#777777"

_W, _H = 360, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 46, 12, 12, 40


@dataclass
class Series:
    """One line: ``points`` in data units; ``key`` names it for the legend toggles."""

    label: str
    key: str
    colour: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False


def colour(index: int, *, baseline: bool = False) -> str:
    return BASELINE_COLOUR if baseline else PALETTE[index % len(PALETTE)]


def _sx(x: float, x0: float, x1: float) -> float:
    return _LEFT + (x - x0) / (x1 - x0) * (_W - _LEFT - _RIGHT)


def _sy(y: float, y0: float, y1: float) -> float:
    return _H - _BOTTOM - (y - y0) / (y1 - y0) * (_H - _TOP - _BOTTOM)


def _axes(x_label: str, y_label: str, x_range: tuple[float, float],
          y_range: tuple[float, float]) -> list[str]:
    (x0, x1), (y0, y1) = x_range, y_range
    parts = [f'<rect x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
             f'height="{_H - _TOP - _BOTTOM}" fill="#fff" stroke="#bbb"/>']
    for k in range(6):
        fx, fy = x0 + (x1 - x0) * k / 5, y0 + (y1 - y0) * k / 5
        px, py = _sx(fx, x0, x1), _sy(fy, y0, y1)
        parts.append(f'<line x1="{px:.1f}" y1="{_TOP}" x2="{px:.1f}" y2="{_H - _BOTTOM}" '
                     f'stroke="#eee"/>')
        parts.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{_W - _RIGHT}" y2="{py:.1f}" '
                     f'stroke="#eee"/>')
        parts.append(f'<text x="{px:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle" '
                     f'class="tick">{fx:.1f}</text>')
        parts.append(f'<text x="{_LEFT - 5}" y="{py + 4:.1f}" text-anchor="end" '
                     f'class="tick">{fy:.1f}</text>')
    parts.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2:.0f}" y="{_H - 6}" '
                 f'text-anchor="middle" class="axis">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(12 {(_TOP + _H - _BOTTOM) / 2:.0f}) rotate(-90)" '
                 f'text-anchor="middle" class="axis">{escape(y_label)}</text>')
    return parts


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               x_range: tuple[float, float] = (0.0, 1.0),
               y_range: tuple[float, float] = (0.0, 1.0),
               reference: Sequence[tuple[float, float]] | None = None) -> Markup:
    """A line chart; ``reference`` is a dotted guide line (the diagonal, the base rate)."""
    (x0, x1), (y0, y1) = x_range, y_range
    parts = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>", *_axes(x_label, y_label, x_range, y_range)]
    if reference:
        pts = " ".join(f"{_sx(x, x0, x1):.1f},{_sy(y, y0, y1):.1f}" for x, y in reference)
        parts.append(f'<polyline points="{pts}" fill="none" stroke="#999" '
                     f'stroke-dasharray="2 3"/>')
    for s in series:
        pts = " ".join(f"{_sx(x, x0, x1):.1f},{_sy(min(max(y, y0), y1), y0, y1):.1f}"
                       for x, y in s.points)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        parts.append(f'<polyline class="series" data-series="{escape(s.key)}" points="{pts}" '
                     f'fill="none" stroke="{escape(s.colour)}" stroke-width="1.8"{dash}>'
                     f"<title>{escape(s.label)}</title></polyline>")
    parts.append("</svg>")
    return Markup("".join(parts))


def reliability_chart(diagram: ReliabilityDiagram, *, title: str, colour: str,
                      x_label: str = "calibrated confidence") -> Markup:
    """Reliability diagram: accuracy per bin as bars, mean confidence as dots, the diagonal.

    Empty bins are not drawn."""
    parts = [f'<svg class="chart small" viewBox="0 0 {_W} {_H}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>",
             *_axes(x_label, "accuracy", (0, 1), (0, 1))]
    parts.append(f'<line x1="{_sx(0, 0, 1)}" y1="{_sy(0, 0, 1)}" x2="{_sx(1, 0, 1)}" '
                 f'y2="{_sy(1, 0, 1)}" stroke="#999" stroke-dasharray="2 3"/>')
    used = [b for b in range(diagram.counts.size) if diagram.counts[b] > 0]
    total = int(diagram.counts.sum()) or 1
    for b in used:
        low, high = float(diagram.lower[b]), float(diagram.upper[b])
        count, acc = int(diagram.counts[b]), float(diagram.accuracy[b])
        mean_conf = float(diagram.mean_confidence[b])
        left, right = _sx(low, 0, 1) + 1, _sx(high, 0, 1) - 1
        top = _sy(acc, 0, 1)
        tip = (f"{low:.1f}–{high:.1f}: {count} item(s), mean confidence "
               f"{mean_conf:.3f}, accuracy {acc:.3f}")
        parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" '
                     f'height="{_sy(0, 0, 1) - top:.1f}" fill="{escape(colour)}" '
                     f'fill-opacity="0.35" stroke="{escape(colour)}"><title>{escape(tip)}</title>'
                     f"</rect>")
        # share of items in the bin, as a strip under the axis
        strip = 6 * count / total * len(used)
        parts.append(f'<rect x="{left:.1f}" y="{_sy(0, 0, 1) - min(strip, 30):.1f}" '
                     f'width="{right - left:.1f}" height="{min(strip, 30):.1f}" fill="#333" '
                     f'fill-opacity="0.25"/>')
        parts.append(f'<circle cx="{_sx(mean_conf, 0, 1):.1f}" '
                     f'cy="{_sy(acc, 0, 1):.1f}" r="3" fill="{escape(colour)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
