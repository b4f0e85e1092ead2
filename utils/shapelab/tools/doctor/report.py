"""The diagnosis as Markdown (shell), HTML (notebook, shell) and a plot."""
from __future__ import annotations

import html as _html

from ...instruments.display import html_table, text_table


ONE_GUARD = ("The cause of each recompile is the failed guard(s) of the cached graph that would have served the "
             "call: the one whose guards fail least. A trace keeps only the first failed guard of each graph.")


def _status(d, p) -> str:
    if not p.applied:
        return "not applied: " + p.note
    return "applied in the proof" if d.proved else "not proven: the proof was not run"


def _md_table(rows) -> str:
    rows = list(rows)
    if not rows:
        return "_(none)_\n"
    cols = list(rows[0])
    esc = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(esc(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _notes(d) -> list[str]:
    return [f"{r.label}: {n}" for r in d.runs[1:] for n in r.notes]


def markdown(d) -> str:
    """The whole diagnosis as Markdown: summary, causes, prescriptions as code, proof."""
    parts = [f"# Recompile doctor: {d.name}\n", d.summary() + "\n", f"Source: {d.evidence.source}. {ONE_GUARD}\n",
             "## Causes\n", _md_table(d.table())]
    if d.causes:
        parts.append("## Prescriptions (code for this PyTorch)\n")
        for p in d.prescriptions:
            parts.append(f"**{p.where}** ({_status(d, p)})\n")
            parts.append("```python\n" + p.code.rstrip("\n") + "\n```\n")
    if d.buckets:
        b = d.buckets
        parts.append(f"Buckets for input '{b['input']}', dim {b['dim']}: {b['boundaries']} "
                     f"(at most {b['budget']} graphs; mean padding {b['mean padding']:.1f} per call, "
                     f"{100 * b['padded share']:.1f}% of the computed size).\n")
    if len(d.runs) > 1:
        parts += ["## Proof: replayed before and after\n", _md_table(d.proof_table())]
        parts += [f"- {n}\n" for n in _notes(d)]
    return "\n".join(parts)


def html(d) -> str:
    """The diagnosis as one HTML fragment (a full page from the shell wraps it)."""
    parts = [f"<h3>Recompile doctor: {_html.escape(d.name)}</h3>", f"<p>{_html.escape(d.summary())}</p>",
             f"<p><small>{_html.escape(ONE_GUARD)}</small></p>",
             html_table(d.table())]
    if d.causes:
        for p in d.prescriptions:
            parts.append(f"<p><b>{_html.escape(p.where)}</b> ({_html.escape(_status(d, p))})</p>"
                         f"<pre>{_html.escape(p.code)}</pre>")
    if len(d.runs) > 1:
        parts.append("<h4>Proof: replayed before and after</h4>" + html_table(d.proof_table()))
        notes = _notes(d)
        if notes:
            parts.append("<ul>" + "".join(f"<li>{_html.escape(n)}</li>" for n in notes) + "</ul>")
    return "\n".join(parts)


def text(d) -> str:
    """Plain text for a terminal: summary, causes, prescriptions (code), proof and its notes."""
    out = [d.summary(), "", text_table(d.table())]
    if d.causes:
        out.append("")
        for p in d.prescriptions:
            out += [f"== {p.where} ({_status(d, p)})", p.code.rstrip("\n"), ""]
    if len(d.runs) > 1:
        out += [text_table(d.proof_table())] + [f"- {n}" for n in _notes(d)]
    return "\n".join(out)


def plot(d, ax=None):
    """Cumulative graphs per call, before and after each fix; returns the figure."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3))
    else:
        fig = ax.figure
    for r in d.runs:
        ax.step(range(len(r.counts)), r.counts, where="post", label=f"{r.label} ({r.compiles})")
    ax.set_xlabel("call")
    ax.set_ylabel("graphs compiled so far")
    ax.set_title(d.name)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
