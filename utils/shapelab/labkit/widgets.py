"""Lab-bench building blocks: controls, a Run button, and panes that show what happened.

The bench is a thin view: ``run(**control_values)`` is a plain function (usually over
``observe``) that returns ``{pane name: content}``. The bench shows a busy state while it
runs, turns any error into a message in the status line, and keeps the kernel alive.
Tests drive it with ``bench.set(...)`` and ``bench.click()`` and read ``bench.panes``.

What a learner sees (checked by tests/test_browser.py in a 1280 x 800 window):
- no glyph the usual fonts lack: the title's icon is a small inline SVG, the status line is words;
- after an error the panes keep the last successful run, marked "not updated" with the inputs
  of that run (or stay empty when nothing ran yet);
- a whole-number control (``int_slider``) is a box to type in beside a slider track (at least 150 px):
  a typed value outside its range is clamped and named in the status line ("Adjusted: ...", only when
  a value was changed), typed text that is not a whole number is refused with a note ("Note: ...");
  ``run`` may add its own line under the key ``"_note"``;
- when the inputs change after a run, the panes are marked "Not updated" until Run is pressed;
- text wraps at spaces (never inside a word), figures shrink to their pane, long per-call counts
  are a small step plot (``Steps``), and tick labels that would overlap are thinned out.
"""
from __future__ import annotations

import base64
import html
import io
import math
import re
from typing import Any, Callable, Sequence

import ipywidgets as W
import traitlets

from ..instruments.display import fmt_shape, html_table
from ..instruments.observe import Record, short_reason

BUSY = "Running… (a compile can take a few seconds)"
DONE = "Done: the panes show this run."
NOTE_KEY = "_note"  # run() may return {"_note": "..."}: said in the status line ("Note: ..."), not a pane
STEPS_FROM = 25  # per-call counts longer than this are drawn as a step plot, not printed

# Wrap at spaces, break a word only when it alone is wider than the pane; never scroll sideways.
STYLE = """<style>
.shapelab-bench .shapelab-pane { min-width: 0; overflow-x: hidden; }
.shapelab-bench .shapelab-panes { gap: 0 8px; }  /* between panes only: a margin after a full-width pane overflowed */
.shapelab-bench .shapelab-pane .widget-html-content, .shapelab-bench .shapelab-status .widget-html-content {
  white-space: normal; word-break: normal; overflow-wrap: break-word; line-height: 1.35; }
.shapelab-bench pre { margin: 0; white-space: pre-wrap; word-break: normal; overflow-wrap: break-word;
  font-size: 12px; }
.shapelab-bench .shapelab-pane pre { max-height: 24em; overflow-y: auto; }  /* a long log scrolls in its pane */
.shapelab-bench img, .shapelab-bench svg.shapelab-steps { max-width: 100%; height: auto; display: block; }
.shapelab-bench table { max-width: 100%; table-layout: auto; }
.shapelab-bench td, .shapelab-bench th { word-break: normal; overflow-wrap: break-word; padding: 2px 12px 2px 0; }
.shapelab-bench .shapelab-stale { color: #7a4100; background: #fff3e0; border-left: 3px solid #e08a00;
  padding: 2px 6px; margin-bottom: 4px; font-size: 12px; }
.shapelab-bench .widget-dropdown { width: auto; max-width: 100%; }
.shapelab-bench .shapelab-int .widget-text { width: auto; }
.shapelab-bench .shapelab-int .widget-text input { width: 64px; flex: 0 0 64px; }
.shapelab-bench .widget-dropdown > select { width: auto; min-width: 148px; max-width: 640px; padding-right: 24px; }
</style>"""

ICON = ("<svg width='16' height='16' viewBox='0 0 16 16' style='vertical-align:-2px;margin-right:6px' "
        "aria-hidden='true'><path d='M6 1h4v1H9.5v4.2l4.3 7.3A1 1 0 0 1 13 15H3a1 1 0 0 1-.8-1.5l4.3-7.3V2H6z' "
        "fill='#1976d2'/><path d='M4.2 11h7.6l1.3 2.5H2.9z' fill='#90caf9'/></svg>")


class Steps:
    """A small step plot of a per-call series (e.g. graphs compiled after each call), as inline SVG.

    ``caption`` (text) is shown above the plot. Use it as pane content instead of 200 numbers.
    """

    def __init__(self, values: Sequence[float], ylabel: str = "graphs so far", xlabel: str = "call",
                 caption: str = "", width: int = 300, height: int = 120):
        self.values = [float(v) for v in values]
        self.ylabel, self.xlabel, self.caption = ylabel, xlabel, caption
        self.width, self.height = width, height

    def _repr_html_(self) -> str:
        cap = f"<pre>{html.escape(self.caption)}</pre>" if self.caption else ""
        if not self.values:
            return cap + "<pre>(no calls)</pre>"
        w, h, left, bottom, top, right = self.width, self.height, 34, 22, 18, 8
        n, lo, hi = len(self.values), min(0.0, min(self.values)), max(self.values)
        hi = hi if hi > lo else lo + 1
        x = lambda i: left + (w - left - right) * i / max(n, 1)  # noqa: E731
        y = lambda v: top + (h - top - bottom) * (1 - (v - lo) / (hi - lo))  # noqa: E731
        pts = []
        for i, v in enumerate(self.values):
            pts += [f"{x(i):.1f},{y(v):.1f}", f"{x(i + 1):.1f},{y(v):.1f}"]
        fmt = lambda v: f"{v:g}"  # noqa: E731
        axis = (f"<line x1='{left}' y1='{h - bottom}' x2='{w - right}' y2='{h - bottom}' stroke='#888'/>"
                f"<line x1='{left}' y1='{top}' x2='{left}' y2='{h - bottom}' stroke='#888'/>"
                f"<text x='{left - 4}' y='{y(hi) + 4:.1f}' text-anchor='end'>{fmt(hi)}</text>"
                f"<text x='{left - 4}' y='{y(lo) + 4:.1f}' text-anchor='end'>{fmt(lo)}</text>"
                f"<text x='{left}' y='{h - 6}'>1</text>"
                f"<text x='{w - right}' y='{h - 6}' text-anchor='end'>{n}</text>"
                f"<text x='{(left + w - right) / 2:.0f}' y='{h - 6}' text-anchor='middle'>{html.escape(self.xlabel)}</text>"
                f"<text x='{left}' y='11' fill='#555'>{html.escape(self.ylabel)}</text>")
        svg = (f"<svg class='shapelab-steps' viewBox='0 0 {w} {h}' width='{w}' height='{h}' "
               f"style='font:10px sans-serif' role='img' aria-label='{html.escape(self.ylabel)} per {self.xlabel}'>"
               f"{axis}<polyline fill='none' stroke='#1976d2' stroke-width='1.5' points='{' '.join(pts)}'/></svg>")
        return cap + svg


def _declutter_ticks(fig) -> None:
    """Thin out x tick labels that would print over each other (keep every k-th)."""
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
    except Exception:
        return
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        if len(labels) < 2:
            continue
        boxes = [t.get_window_extent(renderer) for t in labels]
        overlap = any(a.x1 + 2 > b.x0 for a, b in zip(boxes, boxes[1:]))
        if not overlap:
            continue
        widest = max(b.width for b in boxes) + 4
        span = boxes[-1].x1 - boxes[0].x0
        keep = max(2, math.ceil(widest * len(labels) / max(span, 1)))
        for i, t in enumerate(labels):
            t.set_visible(i % keep == 0)


def to_html(content: Any) -> str:
    """Render pane content: HTML-capable objects, matplotlib figures, lists of dicts, or text."""
    if hasattr(content, "savefig"):
        import matplotlib.pyplot as plt

        _declutter_ticks(content)
        buf = io.BytesIO()
        content.savefig(buf, format="png", bbox_inches="tight", dpi=80)
        plt.close(content)
        return (f"<img style='max-width:100%;height:auto' "
                f"src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'/>")
    if hasattr(content, "_repr_html_"):
        return content._repr_html_()
    if isinstance(content, list) and content and all(isinstance(r, dict) for r in content):
        return html_table(content)
    if isinstance(content, (list, tuple)):
        content = "\n".join(map(str, content)) or "(none)"
    return f"<pre style='margin:0;white-space:pre-wrap;word-break:normal;overflow-wrap:break-word'>{html.escape(str(content))}</pre>"


def _fmt_values(values: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


class LabBench:
    """Controls + Run + panes. Display it as the last expression of a cell."""

    def __init__(self, title: str, controls: dict[str, W.ValueWidget], run: Callable[..., dict],
                 panes: Sequence[str], wide: Sequence[str] = ()):
        """``panes`` are shown side by side, wrapping; those named in ``wide`` take a full row (tables, plots)."""
        self.title = title
        self.controls = dict(controls)
        self.run_fn = run
        self.button = W.Button(description="Run", button_style="primary", icon="play")
        self.status = W.HTML(value="Set the controls, then press Run.")
        self.status.add_class("shapelab-status")
        self.panes = {name: W.HTML(value="<i>(press Run)</i>") for name in panes}
        self.last_error: BaseException | None = None
        self.last_ok: dict | None = None  # control values of the last successful run
        self._ok_html: dict[str, str] = {}
        self._adjusted: list[str] = []  # what set() had to change
        self._running = False
        self.button.on_click(lambda _button: self.click())
        for w in self.controls.values():
            w.observe(lambda _change: self._inputs_changed(), ["value", "said"] if isinstance(w, IntControl) else "value")
        boxes = []
        self._boxes: dict[str, W.VBox] = {}
        for n, p in self.panes.items():
            p.add_class("shapelab-pane-body")
            box = W.VBox([W.HTML(f"<b>{html.escape(n)}</b>"), p],
                         layout=W.Layout(min_width="100%" if n in wide else "300px", flex="1 1 300px",
                                         margin="0 0 8px 0"))
            box.add_class("shapelab-pane")
            boxes.append(box)
            self._boxes[n] = box
        self.widget = W.VBox([
            W.HTML(STYLE),
            W.HTML(f"<h4 class='shapelab-bench-title' style='margin:4px 0'>{ICON}{html.escape(title)}</h4>"),
            W.HBox(list(self.controls.values()), layout=W.Layout(flex_flow="row wrap")),
            W.HBox([self.button, self.status], layout=W.Layout(align_items="center")),
            W.HBox(boxes, layout=W.Layout(flex_flow="row wrap", width="100%")).add_class("shapelab-panes"),
        ], layout=W.Layout(width="100%"))
        self.widget.add_class("shapelab-bench")

    def values(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    def set(self, **values) -> "LabBench":
        """Set controls by name, as a person would; an unknown name raises KeyError.

        A value the control cannot hold is clamped by it (a slider's min/max); the next run's
        status line says so.
        """
        for k, v in values.items():
            if k not in self.controls:
                raise KeyError(f"no control {k!r}; controls are {', '.join(self.controls)}")
            w = self.controls[k]
            if isinstance(w, IntControl):  # typed text or a number, as a person would type it: it notes itself
                w.type(str(v))
                continue
            w.value = v
            if isinstance(v, (int, float)) and not isinstance(v, bool) and w.value != v:
                self._adjusted.append(f"{_label(w, k)}: {v!r} is outside {w.min}..{w.max}, so it was set to {w.value!r}")
        return self

    def _control_notes(self, take: bool) -> tuple[list[str], list[str]]:
        """(adjusted, refused): what the controls changed or refused since the last Run."""
        adjusted, refused = list(self._adjusted), []
        for w in self.controls.values():
            if isinstance(w, IntControl):
                adjusted += w.adjusted
                refused += w.refused
                if take:
                    w.adjusted, w.refused = [], []
        return adjusted, refused

    def _inputs_changed(self) -> None:
        """Inputs changed without Run: say so in the status line and mark the panes as an earlier run's."""
        if self._running:
            return
        adjusted, refused = self._control_notes(take=False)
        notes = _notes_html(adjusted) + _notes_html(refused, "Note")
        if self.last_ok is None:
            self.status.value = "Set the controls, then press Run." + notes
            return
        if self.values() == self.last_ok:
            self._show_ok()
            self.status.value = DONE + notes
            return
        self._mark_stale("the inputs changed since this run; press Run")
        self.status.value = (f"<b>Inputs changed</b> since the run shown ({html.escape(_fmt_values(self.last_ok))}): "
                             "press Run to update the panes." + notes)

    def click(self) -> bool:
        """Run once with the current control values; True on success."""
        self.button.disabled = True
        self._running = True
        self.status.value = BUSY
        values = self.values()
        notes, refused = self._control_notes(take=True)
        self._adjusted = []
        try:
            result = dict(self.run_fn(**values))
        except Exception as e:  # shown to the learner; the kernel and the bench stay usable
            self.last_error = e
            first = (str(e).strip().splitlines() or [""])[0]
            if self.last_ok is not None:
                self._mark_stale("the last successful run; the current inputs raised an error")
            kept = (f"The panes below still show the last successful run ({html.escape(_fmt_values(self.last_ok))})."
                    if self.last_ok is not None else "Nothing has run yet, so the panes are empty.")
            self.status.value = (f"<span style='color:#b00020'><b>Error</b>, not run: {html.escape(type(e).__name__)}: "
                                 f"{html.escape(first)}</span> {kept}" + _notes_html(notes) + _notes_html(refused, "Note"))
            return False
        finally:
            self.button.disabled = False
            self._running = False
        self.last_error = None
        note = result.pop(NOTE_KEY, None)
        for name in result:
            if name not in self.panes:
                raise KeyError(f"run() returned pane {name!r}; panes are {', '.join(self.panes)}")
        for name, content in result.items():
            self._ok_html[name] = to_html(content)
            self.panes[name].value = self._ok_html[name]
            if "<table" in self._ok_html[name]:  # a table needs the full row, or it would scroll sideways
                self._boxes[name].layout.min_width = "100%"
        self.last_ok = values
        self.status.value = DONE + _notes_html(notes) + _notes_html(refused + ([str(note)] if note else []), "Note")
        return True

    def _mark_stale(self, why: str) -> None:
        banner = f"<div class='shapelab-stale'>Not updated: {html.escape(why)}.</div>"
        for name, pane in self.panes.items():
            if name in self._ok_html:
                pane.value = banner + self._ok_html[name]

    def _show_ok(self) -> None:
        for name, pane in self.panes.items():
            if name in self._ok_html:
                pane.value = self._ok_html[name]

    def is_stale(self, name: str) -> bool:
        """True when pane ``name`` shows an earlier run: the latest one failed, or the inputs changed since."""
        return "shapelab-stale" in self.panes[name].value

    def pane_text(self, name: str) -> str:
        """A pane's content as plain text (tags removed), for tests and assertions."""
        no_style = re.sub(r"<style.*?</style>", " ", self.panes[name].value, flags=re.S)
        return html.unescape(re.sub(r"<[^>]+>", " ", no_style))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _label(w, key: str) -> str:
    return f"'{getattr(w, 'description', '') or key}'"


def _notes_html(notes: Sequence[str], kind: str = "Adjusted") -> str:
    if not notes:
        return ""
    text = "; ".join(html.escape(n, quote=False) for n in notes)
    return f"<br><span style='color:#7a4100'>{kind}: {text}{'' if text.endswith('.') else '.'}</span>"


def record_panes(record: Record) -> dict:
    """The standard panes for one observed run: compiles, reasons, guards, shapes.

    Up to ``STEPS_FROM`` calls the counts after each call are printed; beyond, they are a step plot.
    """
    last = record.compiles[-1] if record.compiles else None
    compiles = f"{record.count} compile(s) over {len(record.calls)} call(s)"
    if record.limit_hit:
        compiles += f"\nrecompile limit hit: calls {record.fell_back} ran eagerly"
    if len(record.counts) <= STEPS_FROM:
        compiles_pane: Any = compiles + f"\ncounts after each call: {record.counts}"
    else:
        compiles_pane = Steps(record.counts, ylabel="graphs compiled so far", xlabel="call",
                              caption=compiles + "\ncounts after each call:")
    return {
        "compiles": compiles_pane,
        "reasons": failed_guard_lines(record) or "(no recompiles)",
        "guards": (last.guards if last and last.guards else "(no size guards)"),
        "shapes": [f"#{e.number}: {fmt_shape(*e.shapes)}" for e in record.compiles] or "(nothing compiled)",
    }


def failed_guard_lines(record: Record) -> list[str]:
    """Each recompile with every cached graph's failed guard, in the order Dynamo checked them, as
    ``TORCH_LOGS=recompiles`` prints them; the one the course names the cause (``observe.cause_of``) is marked."""
    lines = []
    for e in record.compiles:
        lines += recompile_lines(e.number, e.call, e.failures, e.reason)
    return lines


def recompile_lines(number: int, call: int, failures: Sequence[str], cause: str | None) -> list[str]:
    """One recompile: a heading, then every cached graph's failed guard labelled by its graph (``0/1``), in
    Dynamo's order; the failure named the cause is marked. Nothing for a first compile (no failures)."""
    if not failures:
        return []
    named = cause.split(":", 1)[0].strip() if cause else None  # the cause's graph id ("0/1"), however it is worded

    def is_cause(f: str) -> bool:
        return f == cause or f.split(":", 1)[0].strip() == named

    return [f"#{number} (call {call}), {len(failures)} cached graph(s) failed:"] + [
        f"    graph {short_reason(f, keep_id=True)}" + ("   <- the cause" if is_cause(f) else "") for f in failures]


def _same(a, b) -> bool:
    """Option equality that keeps None, True, 1 and 1.0 apart."""
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        return bool(a == b)
    except Exception:
        return a is b


def dropdown(description: str, options, value=None) -> W.Dropdown:
    """A labelled dropdown; ``options`` as a list or as ``[(label, value), ...]``.

    Every option gets a visible label (``None`` reads "None"), and the selection is made by
    position, so an option whose value is None shows as selected instead of as an empty box.
    ``value`` None (the default) selects the first option, or the option whose value is None if there is one.
    """
    pairs = [o if isinstance(o, tuple) and len(o) == 2 else (str(o), o) for o in options]
    if not pairs:
        raise ValueError(f"dropdown {description!r} needs at least one option")
    index = next((i for i, (_, v) in enumerate(pairs) if _same(v, value)), 0)
    return W.Dropdown(description=description, options=pairs, index=index, style={"description_width": "initial"})


TRACK_PX = 180  # a slider's track: wide enough to aim at a value (at least 150 px, tests/test_browser.py)


class IntControl(W.HBox):
    """A whole number in ``min..max``: a labelled box to type it in, and a slider track beside it.

    ``value`` is a plain trait (what the bench reads and observes). Typed text goes through ``type``: a whole
    number outside the range is clamped and recorded in ``adjusted``; anything else (``'abc'``, ``'2.5'``) is
    refused, the value stays, and ``refused`` says why. A slider's own readout would drop such text silently.
    """

    value = traitlets.Int()
    said = traitlets.Int(0)  # bumped on every new note, so that the bench can show it before Run

    def __init__(self, description: str, value: int, min: int, max: int, step: int = 1):
        if not min <= value <= max:
            raise ValueError(f"{description!r}: {value} is outside {min}..{max}")
        self.description, self.min, self.max = description, min, max
        self.adjusted: list[str] = []
        self.refused: list[str] = []
        self.box = W.Text(description=description, value=str(value), continuous_update=False,
                          style={"description_width": "initial"})
        self.slider = W.IntSlider(value=value, min=min, max=max, step=step, readout=False, continuous_update=False,
                                  layout=W.Layout(width=f"{TRACK_PX}px"))
        super().__init__([self.box, self.slider], value=value, layout=W.Layout(align_items="center", margin="0 12px 0 0"))
        self.add_class("shapelab-int")
        self.box.observe(lambda change: self.type(change["new"]), "value")
        self.slider.observe(lambda change: setattr(self, "value", change["new"]), "value")
        self.observe(self._show, "value")

    @traitlets.validate("value")
    def _clamp(self, proposal):
        v = proposal["value"]
        clamped = min(max(v, self.min), self.max)
        if clamped != v:
            self.adjusted.append(f"'{self.description}': {v!r} is outside {self.min}..{self.max}, so it was set to {clamped!r}")
            self.said += 1
        return clamped

    def type(self, text: str) -> None:
        """What typing ``text`` and pressing Enter does."""
        t = str(text).strip()
        if t == str(self.value):  # nothing new (also the box being reset to the value after a refusal)
            return
        try:
            number = int(t)
        except ValueError:
            self.refused.append(f"'{self.description}': {t!r} is not a whole number, so it stays at {self.value}")
            self.box.value = str(self.value)
            self.said += 1
            return
        self.refused = []  # a number typed after a refused text: the earlier note no longer holds
        self.value = number
        self.box.value = str(self.value)  # the clamped value, when it was clamped

    def _show(self, change) -> None:
        self.slider.value = change["new"]
        self.box.value = str(change["new"])


def int_slider(description: str, value: int, min: int, max: int, step: int = 1) -> IntControl:
    """A labelled whole-number control: a box to type in and a slider track (see ``IntControl``)."""
    return IntControl(description, value, min, max, step)


def text(description: str, value: str) -> W.Text:
    """A labelled text box, e.g. for a list of sizes; its value is sent on Enter or when it loses focus."""
    return W.Text(description=description, value=value, continuous_update=False, style={"description_width": "initial"})
