"""A still picture of the timeline: the PNG a notebook keeps for wherever the widget cannot run.

A notebook executed by nbclient/CI, opened untrusted, exported by nbconvert or rendered on GitHub
shows no widget; before this, its fallback was a second full Bokeh document (4-5 MB per output)
whose scripts an untrusted notebook does not even run. A PNG is shown by every one of them, and
drawn from the :class:`~.layout.Layout` the widget already made it costs tens of milliseconds and
tens of KB.

It is drawn the honest way: a pixel is as dark as its time is busy. Spans a pixel or more wide
fill their pixels; narrower ones add their duration to the pixel they fall in, so a row busy 1 %
of the time looks 1 % busy, not solid. Colours are the timeline's role colours; the image is
palette-coded (a role and one of eight busy levels per pixel), which keeps the file small.
"""

from __future__ import annotations

import io

import numpy as np

from ..trace.text import fmt_us
from .figure import ROLE_COLORS
from .layout import LANE_GAP, ROLE_NAMES, Layout, process_starts

__all__ = ["LEVELS", "busy_raster", "timeline_png"]

LEVELS = 8  # busy levels per role: 1/8 steps are as many as the eye tells apart in a pale tint
_MARGIN = 150  # px for lane labels, left of the plot
_HEADER = 34  # px for the two header lines
_MAX_PLOT_H = 420  # px: a tall picture of hundreds of threads would only be scrolled past
_ROW_PX = 10  # px per row when there is room
_MIN_ALPHA = 0.15  # a 1 %-busy pixel must still be seen
_AXIS = 16  # px under the plot for the time ticks
_TICKS = 5


def _rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def busy_raster(layout: Layout, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per layout row and pixel column: how busy (0..1) and the role drawn there.

    Rows do not overlap in time within themselves (a row is one nesting depth of one thread, or
    one band row of the custom-op group), so a span's pixels ``[floor(l/px), floor(r/px))`` are
    disjoint from its row neighbours' and can be filled with a difference array: no loop per span.
    """
    rows = int(layout.row.max()) + 1 if len(layout) else 1
    busy = np.zeros((rows, width), dtype=np.float64)
    role = np.zeros((rows, width), dtype=np.int16)
    if not len(layout):
        return busy, role
    x0, x1 = layout.extent
    px = max(x1 - x0, 1e-9) / width
    c0 = np.clip(np.floor((layout.left - x0) / px).astype(np.int64), 0, width - 1)
    c1 = np.clip(np.floor((layout.right - x0) / px).astype(np.int64), 0, width)
    r = layout.row.astype(np.int64)
    wide = c1 > c0
    # Wide spans: +1 at the first pixel, -1 past the last, per row; the running sum is coverage.
    # (bincount, not np.add.at: 15x faster at 1M spans.)
    size = rows * (width + 1)
    start_key = r[wide] * (width + 1) + c0[wide]
    end_key = r[wide] * (width + 1) + c1[wide]
    diff = np.bincount(start_key, minlength=size) - np.bincount(end_key, minlength=size)
    covered = np.cumsum(diff.reshape(rows, width + 1), axis=1)[:, :width] > 0
    code = layout.role[wide].astype(np.float64) + 1
    rdiff = np.bincount(start_key, weights=code, minlength=size) - np.bincount(end_key, weights=code, minlength=size)
    wide_role = np.rint(np.cumsum(rdiff.reshape(rows, width + 1), axis=1)[:, :width]).astype(np.int64) - 1
    # Narrow spans: their share of the pixel they start in.
    small = ~wide
    key = r[small] * width + c0[small]
    frac = np.bincount(key, weights=(layout.right[small] - layout.left[small]) / px, minlength=rows * width)
    busy = np.minimum(frac.reshape(rows, width), 1.0)
    small_role = np.zeros(rows * width, dtype=np.int16)
    small_role[key] = layout.role[small]  # any of the roles that share the pixel: the last listed
    role = small_role.reshape(rows, width)
    busy[covered] = 1.0
    role[covered] = np.clip(wide_role[covered], 0, len(ROLE_NAMES) - 1)
    return busy, role


def _row_pixels(layout: Layout, rows: int, plot_h: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Each row's first and end pixel line in the plot, and pixels per unit of y."""
    top = np.zeros(rows)
    top[layout.row] = layout.top  # every rectangle of a row has the row's top: any one will do
    scale = min(float(_ROW_PX), plot_h / max(layout.height, 1e-9))
    y0 = np.floor(top * scale).astype(np.int64)
    y1 = np.maximum(y0 + 1, np.floor((top + 1.0) * scale).astype(np.int64))
    return y0, y1, scale


def timeline_png(layout: Layout, header: str, width: int = 1000, note: str = "") -> bytes:
    """The timeline of ``layout`` as a PNG of about ``width`` px: a header line, lanes, busy pixels."""
    from PIL import Image, ImageDraw  # Pillow comes with Bokeh

    plot_w = max(100, width - _MARGIN)
    busy, role = busy_raster(layout, plot_w)
    rows = busy.shape[0]
    plot_h = min(_MAX_PLOT_H, max(20, int(np.ceil(layout.height * _ROW_PX))))
    y0, y1, scale = _row_pixels(layout, rows, plot_h)
    plot_h = int(max(y1.max(initial=1), 1))
    # Palette: 0 white, 1 text grey, 2 lane stripe, then LEVELS tints per role.
    palette = [(255, 255, 255), (60, 60, 60), (246, 246, 246)]
    for name in ROLE_NAMES:
        rgb = np.array(_rgb(ROLE_COLORS[name]), dtype=np.float64)
        for k in range(1, LEVELS + 1):
            a = _MIN_ALPHA + (1 - _MIN_ALPHA) * (k - 1) / (LEVELS - 1)  # the faintest level: the floor
            r, g, b = (round(255 * (1 - a) + c * a) for c in rgb)
            palette.append((r, g, b))
    separator = len(palette)  # between one process's lanes and the next's
    palette.append((200, 200, 200))
    level = np.where(busy > 0, np.clip(np.ceil(busy * LEVELS), 1, LEVELS), 0).astype(np.int64)
    index = np.where(level > 0, 3 + role.astype(np.int64) * LEVELS + level - 1, 0).astype(np.uint8)

    img = np.zeros((_HEADER + plot_h + _AXIS + 2, _MARGIN + plot_w), dtype=np.uint8)
    for k, lane in enumerate(layout.lanes):  # alternate lane stripes, so lanes read apart
        if k % 2:
            a = _HEADER + int(np.floor(lane.top * scale))
            b = _HEADER + int(np.floor((lane.top + lane.rows) * scale))
            img[a:b, _MARGIN:] = 2
    for k in process_starts(layout):  # a faint line across the gap above each process's first lane
        y = _HEADER + int(np.floor((layout.lanes[k].top - LANE_GAP / 2) * scale))
        img[y, :] = separator
    for r in range(rows):  # a few hundred rows at most: a row of pixels at a time
        a, b = _HEADER + int(y0[r]), _HEADER + int(y1[r])
        line = index[r]
        painted = line > 0
        if painted.any():
            block = img[a:b, _MARGIN:]
            block[:, painted] = np.maximum(block[:, painted], line[painted])
    im = Image.fromarray(img, mode="P")
    flat = [c for rgb in palette for c in rgb]
    im.putpalette(flat + [0] * (768 - len(flat)))
    draw = ImageDraw.Draw(im)
    draw.text((6, 4), header, fill=1)
    if note:
        draw.text((6, 18), note, fill=1)
    for lane in layout.lanes:
        a = _HEADER + int(np.floor(lane.top * scale))
        if (lane.rows * scale) >= 9:  # the default font is 11 px tall; thinner lanes go unlabelled
            label = lane.label if len(lane.label) <= 22 else lane.label[:20] + "..."
            draw.text((6, a), label, fill=1)
    x0, x1 = layout.extent
    axis_y = _HEADER + plot_h + 1
    draw.line([(_MARGIN, axis_y), (_MARGIN + plot_w - 1, axis_y)], fill=1)
    for k in range(_TICKS):
        x = _MARGIN + round(k * (plot_w - 1) / (_TICKS - 1))
        draw.line([(x, axis_y), (x, axis_y + 3)], fill=1)
        label = fmt_us(x0 + k * (x1 - x0) / (_TICKS - 1))
        text_w = 6 * len(label)  # the default font's ~6 px per character
        left = x if k == 0 else x - text_w if k == _TICKS - 1 else x - text_w // 2  # centred, ends inside
        draw.text((left, axis_y + 4), label, fill=1)
    out = io.BytesIO()
    im.save(out, format="PNG", optimize=True)
    return out.getvalue()
