"""Views of a trace: where each span goes (:mod:`.layout`) and what is drawn there (:mod:`.columns`),
both plain NumPy, the Bokeh figure made of them (:mod:`.figure`) and the ipywidgets timeline around
it (:mod:`.widget`).

They read only the trace model, so an imported PyTorch or MXNet trace draws like one of ours.
Importing this package imports Bokeh and ipywidgets; ``import opprof`` does not.
"""

from .diff import diff_figure
from .figure import Timeline, build_timeline, save_html
from .layout import Layout, build_layout
from .widget import TimelineWidget

__all__ = ["Layout", "Timeline", "TimelineWidget", "build_layout", "build_timeline", "diff_figure", "save_html"]
