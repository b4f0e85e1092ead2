"""Lab-bench building blocks: controls, a Run button, and panes that show what happened.

The bench is a thin view: ``run(**control_values)`` is a plain function (usually over
``observe``) that returns ``{pane name: content}``. The bench shows a busy state while it
runs, turns any error into a message in the status line, and keeps the kernel alive.
Tests drive it with ``bench.set(...)`` and ``bench.click()`` and read ``bench.panes``.
"""
from __future__ import annotations

import base64
import html
import io
from typing import Any, Callable, Sequence

import ipywidgets as W

from ..instruments.display import html_table
from ..instruments.observe import Record, short_reason

BUSY = "⏳ running… (a compile can take a few seconds)"
DONE = "✅ done"


def to_html(content: Any) -> str:
    """Render pane content: HTML-capable objects, matplotlib figures, lists of dicts, or text."""
    if hasattr(content, "savefig"):
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        content.savefig(buf, format="png", bbox_inches="tight", dpi=80)
        plt.close(content)
        return f"<img src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'/>"
    if hasattr(content, "_repr_html_"):
        return content._repr_html_()
    if isinstance(content, list) and content and all(isinstance(r, dict) for r in content):
        return html_table(content)
    if isinstance(content, (list, tuple)):
        content = "\n".join(map(str, content)) or "(none)"
    return f"<pre style='margin:0;white-space:pre-wrap'>{html.escape(str(content))}</pre>"


class LabBench:
    """Controls + Run + panes. Display it as the last expression of a cell."""

    def __init__(self, title: str, controls: dict[str, W.ValueWidget], run: Callable[..., dict],
                 panes: Sequence[str], wide: Sequence[str] = ()):
        """``panes`` are shown side by side, wrapping; those named in ``wide`` take a full row (tables)."""
        self.title = title
        self.controls = dict(controls)
        self.run_fn = run
        self.button = W.Button(description="Run", button_style="primary", icon="play")
        self.status = W.HTML(value="Set the controls, then press Run.")
        self.panes = {name: W.HTML(value="<i>(press Run)</i>") for name in panes}
        self.last_error: BaseException | None = None
        self.button.on_click(lambda _button: self.click())
        boxes = [W.VBox([W.HTML(f"<b>{html.escape(n)}</b>"), p],
                        layout=W.Layout(min_width="100%" if n in wide else "280px", flex="1 1 0"))
                 for n, p in self.panes.items()]
        self.widget = W.VBox([
            W.HTML(f"<h4 style='margin:4px 0'>🧪 {html.escape(title)}</h4>"),
            W.HBox(list(self.controls.values()), layout=W.Layout(flex_flow="row wrap")),
            W.HBox([self.button, self.status]),
            W.HBox(boxes, layout=W.Layout(flex_flow="row wrap")),
        ])

    def values(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    def set(self, **values) -> "LabBench":
        """Set controls by name, as a person would; an unknown name raises KeyError."""
        for k, v in values.items():
            if k not in self.controls:
                raise KeyError(f"no control {k!r}; controls are {', '.join(self.controls)}")
            self.controls[k].value = v
        return self

    def click(self) -> bool:
        """Run once with the current control values; True on success."""
        self.button.disabled = True
        self.status.value = BUSY
        try:
            result = self.run_fn(**self.values())
        except Exception as e:  # shown to the learner; the kernel and the bench stay usable
            self.last_error = e
            first = (str(e).strip().splitlines() or [""])[0]
            self.status.value = f"<span style='color:#b00020'>❌ {html.escape(type(e).__name__)}: {html.escape(first)}</span>"
            return False
        finally:
            self.button.disabled = False
        self.last_error = None
        for name, content in result.items():
            if name not in self.panes:
                raise KeyError(f"run() returned pane {name!r}; panes are {', '.join(self.panes)}")
            self.panes[name].value = to_html(content)
        self.status.value = DONE
        return True

    def pane_text(self, name: str) -> str:
        """A pane's content as plain text (tags removed), for tests and assertions."""
        import re

        return html.unescape(re.sub(r"<[^>]+>", " ", self.panes[name].value))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def record_panes(record: Record) -> dict:
    """The standard panes for one observed run: compiles, reasons, guards, shapes."""
    last = record.compiles[-1] if record.compiles else None
    compiles = f"{record.count} compile(s) over {len(record.calls)} call(s)\ncounts after each call: {record.counts}"
    if record.limit_hit:
        compiles += f"\nrecompile limit hit: calls {record.fell_back} ran eagerly"
    return {
        "compiles": compiles,
        "reasons": [f"#{e.number} (call {e.call}): {short_reason(e.reason)}" for e in record.compiles if e.reason] or "(no recompiles)",
        "guards": (last.guards if last and last.guards else "(no size guards)"),
        "shapes": [f"#{e.number}: " + ", ".join(str(s) for s in e.shapes) for e in record.compiles] or "(nothing compiled)",
    }


def dropdown(description: str, options, value=None) -> W.Dropdown:
    """A labelled dropdown; ``options`` as a list or as ``[(label, value), ...]``."""
    return W.Dropdown(description=description, options=options, value=value if value is not None else _first(options),
                      style={"description_width": "initial"})


def int_slider(description: str, value: int, min: int, max: int, step: int = 1) -> W.IntSlider:
    """A labelled integer slider whose readout can be typed into."""
    return W.IntSlider(description=description, value=value, min=min, max=max, step=step,
                       continuous_update=False, style={"description_width": "initial"})


def text(description: str, value: str) -> W.Text:
    """A labelled text box, e.g. for a list of sizes."""
    return W.Text(description=description, value=value, style={"description_width": "initial"})


def _first(options):
    first = list(options)[0]
    return first[1] if isinstance(first, tuple) else first
