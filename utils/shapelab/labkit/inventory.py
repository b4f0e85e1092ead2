"""The course's concept inventory: two parallel forms, A and B, that measure learning (DESIGN.md, issue 35).

Each item is a short case in code (a function and the calls made on it, or a setting), a question, four options
and "I don't know" (``e``). The distractors are misconceptions, each with the idea it reveals (``Item.ideas``).
Forms A and B are isomorphic item by item: items ``A07`` and ``B07`` share a pair (``Item.pair``), a concept and
an idea, on another surface (another function, other sizes or order), never the same case. A learner takes one
form before lesson 01 and the other after lesson 07; in a room, half take A first (the service assigns the form).

Every case is executable as written, after ``import torch`` and ``cnt = CompileCounter()`` (a backend from
``torch._dynamo.testing`` that counts the graphs it is given); ``measure(item)`` runs it from a clean compile state
with cheap backends and returns the value the options stand for. The tests run it on every release and check that
the keyed option is what torch did and that no distractor is. The notebooks never run a case and never print a key.
The keys sit in this module, on the learner's machine: the inventory measures honest answers and cannot stop a
learner who reads them, or runs a case, from scoring what they like; nothing here claims more.

Answers: ``answer(number, choice)`` in the inventory notebooks (notebooks/inventory_before.ipynb and
inventory_after.ipynb), after ``begin(phase)``; the learner sees item numbers, not ids. The first answer of an
item counts; a later one is kept as a change and not scored. They go to the learner's own file (inventory.jsonl
beside labkit.learning's file: ``~/.shapelab/``, or ``$SHAPELAB_INVENTORY_FILE``; the folder 0700, the file
0600) and, in a room, to the room service. Outside a room the first form is drawn at random once and kept there.
Scoring (one scorer for the learner and the room) is ``shapelab.labkit.inventory_score``.
"""
from __future__ import annotations

import json
import os
import random
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

FORMS = ("A", "B")
LETTERS = ("a", "b", "c", "d")
DONT_KNOW = "e"
CHOICES = LETTERS + (DONT_KNOW,)
IDEAS = {  # the source's five core ideas
    "guards": "symbolic guards and the default policy",
    "zero-one": "0/1 specialisation",
    "limit": "the recompile limit and its fall-back",
    "buckets": "bucketing arithmetic",
    "data-dependent": "data-dependent shapes",
}
PREAMBLE = "import torch\nfrom torch._dynamo.testing import CompileCounter\ncnt = CompileCounter()"


@dataclass(frozen=True)
class Item:
    """One item of one form. ``values[i]`` is what option ``LETTERS[i]`` stands for, in the terms ``measure``
    returns (a count, a list, a word); ``answer`` is the expression, evaluated after the case ran, that measures it
    (names: ``cnt``, ``raised``: the exception's class name or None, ``failures``: the failed guards of each
    recompile, and the case's own names)."""

    id: str
    form: str
    pair: str
    concept: str
    idea: str
    case: str
    question: str
    options: tuple[str, ...]
    values: tuple
    key: str
    ideas: dict = field(default_factory=dict)  # {letter: the misconception that option reveals}
    answer: str = "cnt.frame_count"

    @property
    def choices(self) -> dict[str, str]:
        """Letter -> option text, "I don't know" as ``e``."""
        return dict(zip(LETTERS, self.options)) | {DONT_KNOW: "I don't know"}

    def markdown(self, label: str | None = None) -> str:
        """The item as a notebook shows it: its label (the id unless given), case, question and options a-e; no
        key, nothing run."""
        opts = "\n".join(f"- **{k}**: {v}" for k, v in self.choices.items())
        return f"**{label or self.id}.**\n```python\n{self.case}\n```\n{self.question}\n\n{opts}"


def _item(form: str, n: int, concept: str, idea: str, spec: dict) -> Item:
    options = spec["options"]  # [(value, text or None, misconception or None)] in letter order
    key = [LETTERS[i] for i, (_, _, why) in enumerate(options) if why is None]
    assert len(options) == 4 and len(key) == 1, (form, n)
    return Item(id=f"{form}{n:02d}", form=form, pair=f"P{n:02d}", concept=concept, idea=idea,
                case=textwrap.dedent(spec["case"]).strip(), question=spec["question"],
                options=tuple(text if text is not None else str(value) for value, text, _ in options),
                values=tuple(value for value, _, _ in options), key=key[0],
                ideas={LETTERS[i]: why for i, (_, _, why) in enumerate(options) if why is not None},
                answer=spec.get("answer", "cnt.frame_count"))


# Misconceptions shared by several items (the lessons' wrong_answers are where they come from).
EVERY_SHAPE = ("expects every new shape to compile; "
               "a dimension that changed once becomes a symbol and serves later sizes")
FIRST_DYNAMIC = "expects the first call to compile a dynamic graph; the default specialises the first shape"
ALL_SYMBOLIC = ("expects the first recompile to make every dimension symbolic; "
                "only the dimension that changed becomes one")
SYMBOL_SERVES_01 = ("expects a symbolic graph to serve sizes 0 and 1; "
                    "a size symbol starts at 2, so 0 and 1 get graphs of their own")
DYNAMIC_TRUE_01 = "expects dynamic=True to cover size 1; it still specialises sizes 0 and 1, a graph each"
LIMIT_RAISES = "expects the recompile limit to raise; the call past it logs a warning and runs eagerly"
LIMIT_IGNORED = "expects every new shape to compile whatever the limit; past it the function runs eagerly"
ONE_GRAPH_BREAK = ("expects an output whose size depends on the data to stay in one graph; "
                   "the default breaks the graph there")
BREAK_NO_AFTER = ("counts the break but not the graph after it; "
                  "a break splits the function into a graph before and one after")

_PAIRS: list[tuple[str, str, dict, dict]] = [
    # ---------------------------------------------------------------- guards: symbolic guards, the default policy
    ("automatic-dynamic", "guards", dict(
        case="""
        f = torch.compile(lambda x: x.sin() - 1, backend=cnt)
        for shape in [(2, 3, 4), (5, 3, 4), (5, 6, 4), (5, 6, 7), (8, 9, 10)]:
            f(torch.randn(shape))""",
        question="How many graphs does `cnt` count?",
        options=[(2, None, ALL_SYMBOLIC), (3, None, "expects two recompiles to cover the tensor; each dimension "
                  "becomes a symbol only when it changes, one recompile per dimension that varies"),
                 (4, None, None), (5, None, EVERY_SHAPE)]), dict(
        case="""
        g = torch.compile(lambda x: x.tanh() * 3, backend=cnt)
        for shape in [(4, 2, 6), (4, 2, 9), (7, 2, 9), (7, 5, 9), (3, 8, 11)]:
            g(torch.randn(shape))""",
        question="How many graphs does `cnt` count?",
        options=[(5, None, EVERY_SHAPE), (4, None, None), (3, None, "expects two recompiles to cover the tensor; each "
                  "dimension becomes a symbol only when it changes, one recompile per dimension that varies"),
                 (2, None, ALL_SYMBOLIC)])),
    ("marks", "guards", dict(
        case="""
        f = torch.compile(lambda x: x.exp() * 2, backend=cnt, dynamic=False)
        for batch in [2, 4, 2, 6, 4, 8]:
            f(torch.randn(batch, 3))""",
        question="What happens over the six calls?",
        answer="raised or cnt.frame_count",
        options=[(1, "1 graph serves every batch", "expects dynamic=False to share one graph across sizes; it "
                  "compiles a static graph per size"),
                 (4, "4 graphs, one per batch size", None),
                 (6, "6 graphs, one per call", "expects a size seen before to compile again; its static graph is "
                  "cached and serves it"),
                 ("Unsupported", "the second call raises: dynamic=False refuses a new size", "expects dynamic=False to "
                  "refuse a new shape; it compiles a static graph per size")]), dict(
        case="""
        g = torch.compile(lambda x: x.log1p() + 2, backend=cnt, dynamic=False)
        for length in [9, 7, 9, 5, 7, 3]:
            g(torch.rand(length))""",
        question="What happens over the six calls?",
        answer="raised or cnt.frame_count",
        options=[("Unsupported", "the second call raises: dynamic=False refuses a new size", "expects dynamic=False to "
                  "refuse a new shape; it compiles a static graph per size"),
                 (6, "6 graphs, one per call", "expects a size seen before to compile again; its static graph is "
                  "cached and serves it"),
                 (1, "1 graph serves every length", "expects dynamic=False to share one graph across sizes; it "
                  "compiles a static graph per size"),
                 (4, "4 graphs, one per length", None)])),
    ("guards-record-facts", "guards", dict(
        case="""
        @torch.compile(backend=cnt)
        def f(x):
            if x.shape[0] > 10:
                return x * 2
            elif x.shape[0] > 5:
                return x - 2
            return x + 1
        for batch in [4, 6, 12, 8, 16, 3]:
            f(torch.randn(batch, 2))""",
        question="How many graphs does `cnt` count?",
        options=[(2, None, "expects one symbolic graph to serve every side of the branch; Python needs a real True "
                  "or False, so each graph's guard records the side it took"),
                 (3, None, "expects a later size on the first graph's side to reuse it; that graph was compiled "
                  "static, for the first size alone"),
                 (4, None, None),
                 (6, None, "expects every new size to compile; a graph's guard records a fact that serves every "
                  "size for which it holds")]), dict(
        case="""
        @torch.compile(backend=cnt)
        def g(x):
            if x.shape[1] % 3 == 0:
                return x.sum(1)
            elif x.shape[1] % 3 == 1:
                return x.mean(1)
            return x.amax(1)
        for width in [3, 4, 5, 7, 6, 8]:
            g(torch.randn(2, width))""",
        question="How many graphs does `cnt` count?",
        options=[(6, None, "expects every new size to compile; a graph's guard records a fact that serves every "
                  "size for which it holds"),
                 (4, None, None),
                 (3, None, "expects a later size on the first graph's side to reuse it; that graph was compiled "
                  "static, for the first size alone"),
                 (2, None, "expects one symbolic graph to serve every side of the branch; Python needs a real True "
                  "or False, so each graph's guard records the side it took")])),
    ("marks", "guards", dict(
        case="""
        f = torch.compile(lambda x: x * torch.arange(6.0), backend=cnt)
        x = torch.randn(4, 6)
        torch._dynamo.mark_dynamic(x, 1)
        f(x)""",
        question="What does the call do?",
        answer="'raise' if raised else ('dynamic' if cnt.dynamic[-1] else 'static')",
        options=[("dynamic", "compiles a graph with dimension 1 symbolic", "expects a mark to keep the dimension "
                  "symbolic whatever the code does; the multiplication ties it to 6"),
                 ("static", "compiles a static graph with dimension 1 as 6", "expects mark_dynamic to give way like "
                  "maybe_mark_dynamic; a marked dimension the code fixes to a constant raises"),
                 ("raise", "raises an error", None),
                 ("eager", "runs eagerly without compiling", "expects a failed mark to fall back to eager; it is a "
                  "promise the code broke, and torch says so")]), dict(
        case="""
        g = torch.compile(lambda x: x + torch.ones(5, 1), backend=cnt)
        x = torch.randn(5, 3)
        torch._dynamo.mark_dynamic(x, 0)
        g(x)""",
        question="What does the call do?",
        answer="'raise' if raised else ('dynamic' if cnt.dynamic[-1] else 'static')",
        options=[("static", "compiles a static graph with dimension 0 as 5", "expects mark_dynamic to give way like "
                  "maybe_mark_dynamic; a marked dimension the code fixes to a constant raises"),
                 ("raise", "raises an error", None),
                 ("eager", "runs eagerly without compiling", "expects a failed mark to fall back to eager; it is a "
                  "promise the code broke, and torch says so"),
                 ("dynamic", "compiles a graph with dimension 0 symbolic", "expects a mark to keep the dimension "
                  "symbolic whatever the code does; the addition ties it to 5")])),
    ("python-scalars", "guards", dict(
        case="""
        class Scale(torch.nn.Module):
            k = 2
            def forward(self, x):
                return x * self.k
        m = Scale()
        cm = torch.compile(m, backend=cnt)
        for k in [2, 3, 4, 5]:
            m.k = k
            cm(torch.randn(3))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, "expects an int attribute to be traced as data; it is a constant guarded by its value"),
                 (2, None, "expects automatic dynamic to make a module's int attribute a symbol, as it does an int "
                  "argument; the attribute stays a constant, a graph per value"),
                 (4, None, None),
                 ("Unsupported", "the second call raises", "expects a changed attribute to be an error; it fails a "
                  "guard and recompiles")]), dict(
        case="""
        class Shift(torch.nn.Module):
            offset = 3
            def forward(self, x):
                return x + self.offset
        m = Shift()
        cm = torch.compile(m, backend=cnt)
        for offset in [3, 5, 9]:
            m.offset = offset
            cm(torch.randn(4))""",
        question="How many graphs does `cnt` count?",
        options=[(2, None, "expects automatic dynamic to make a module's int attribute a symbol, as it does an int "
                  "argument; the attribute stays a constant, a graph per value"),
                 (3, None, None),
                 ("Unsupported", "the second call raises", "expects a changed attribute to be an error; it fails a "
                  "guard and recompiles"),
                 (1, None, "expects an int attribute to be traced as data; it is a constant guarded by its value")])),
    ("ragged-batch", "guards", dict(
        case="""
        layer = torch.compile(torch.nn.Linear(5, 2), backend=cnt)
        for batch in [8, 8, 3, 1] * 2:          # two epochs, each ending in short batches
            layer(torch.randn(batch, 5))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, "expects the short batches to reuse the full batches' graph; a new size fails the static "
                  "graph's size guard and recompiles"),
                 (2, None, "expects the symbolic graph to serve the batch of 1; sizes 0 and 1 are specialised, a "
                  "graph of their own"),
                 (3, None, None),
                 (6, None, "expects each epoch to compile its short batches anew; the cache keeps the graphs across "
                  "epochs")]), dict(
        case="""
        layer = torch.compile(torch.nn.Linear(3, 4), backend=cnt)
        for batch in [6, 6, 2, 1] * 3:          # three epochs, each ending in short batches
            layer(torch.randn(batch, 3))""",
        question="How many graphs does `cnt` count?",
        options=[(9, None, "expects each epoch to compile its short batches anew; the cache keeps the graphs across "
                  "epochs"),
                 (3, None, None),
                 (1, None, "expects the short batches to reuse the full batches' graph; a new size fails the static "
                  "graph's size guard and recompiles"),
                 (2, None, "expects the symbolic graph to serve the batch of 1; sizes 0 and 1 are specialised, a "
                  "graph of their own")])),
    # ---------------------------------------------------------------- 0/1 specialisation
    ("zero-one", "zero-one", dict(
        case="""
        f = torch.compile(lambda x: x.exp() + 2, backend=cnt)
        for batch in [5, 1, 8, 0, 11, 1]:
            f(torch.randn(batch, 3))""",
        question="How many graphs does `cnt` count?",
        options=[(2, None, SYMBOL_SERVES_01), (3, None, "expects sizes 0 and 1 to share one static graph; each is a "
                  "constant of its own, with a guard of its own"),
                 (4, None, None), (5, None, "expects the second batch 1 to compile again; the static graph for 1 is "
                  "cached and serves it")]), dict(
        case="""
        g = torch.compile(lambda x: x.abs() * 4, backend=cnt)
        for batch in [7, 1, 4, 0, 10, 1]:
            g(torch.randn(batch, 2))""",
        question="How many graphs does `cnt` count?",
        options=[(5, None, "expects the second batch 1 to compile again; the static graph for 1 is cached and serves "
                  "it"),
                 (4, None, None), (3, None, "expects sizes 0 and 1 to share one static graph; each is a constant of "
                  "its own, with a guard of its own"),
                 (2, None, SYMBOL_SERVES_01)])),
    ("hatches", "zero-one", dict(
        case="""
        f = torch.compile(lambda x: x.mean(0) + 1, backend=cnt)
        for batch in [1, 0, 5, 1]:
            x = torch.randn(batch, 4)
            torch._dynamo.decorators.mark_unbacked(x, 0)
            f(x)""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, None),
                 (2, None, "expects 0 and 1 to keep one static graph under mark_unbacked; an unbacked size has no "
                  "value to specialise on"),
                 (3, None, "expects mark_unbacked to keep the 0/1 rule; an unbacked size has no value to specialise "
                  "on, so one graph serves 1, 0 and 5"),
                 (4, None, "expects each call to compile; an unbacked size serves every value")]), dict(
        case="""
        g = torch.compile(lambda x: x.prod(0) - 1, backend=cnt)
        for batch in [0, 6, 1, 0]:
            x = torch.randn(batch, 2)
            torch._dynamo.decorators.mark_unbacked(x, 0)
            g(x)""",
        question="How many graphs does `cnt` count?",
        options=[(4, None, "expects each call to compile; an unbacked size serves every value"),
                 (3, None, "expects mark_unbacked to keep the 0/1 rule; an unbacked size has no value to specialise "
                  "on, so one graph serves 0, 6 and 1"),
                 (1, None, None),
                 (2, None, "expects 0 and 1 to keep one static graph under mark_unbacked; an unbacked size has no "
                  "value to specialise on")])),
    ("zero-one", "zero-one", dict(
        case="""
        f = torch.compile(lambda x: x.cosh() - 2, backend=cnt, dynamic=True)
        for batch in [4, 1, 6, 1]:
            f(torch.randn(batch, 3))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, DYNAMIC_TRUE_01), (2, None, None),
                 (3, None, "expects dynamic=True to compile a static graph first; it compiles a symbolic one at once"),
                 (4, None, "expects dynamic=True to compile per size; one symbolic graph serves every size of 2 or "
                  "more")]), dict(
        case="""
        g = torch.compile(lambda x: x.sinh() + 5, backend=cnt, dynamic=True)
        for length in [1, 9, 1, 3]:
            g(torch.randn(length))""",
        question="How many graphs does `cnt` count?",
        options=[(3, None, "expects dynamic=True to compile a static graph first; it compiles a symbolic one at once"),
                 (4, None, "expects dynamic=True to compile per size; one symbolic graph serves every size of 2 or "
                  "more"),
                 (2, None, None), (1, None, DYNAMIC_TRUE_01)])),
    ("prefill-decode", "zero-one", dict(
        case="""
        step = torch.compile(lambda q, k: (q @ k.T).softmax(-1), backend=cnt)
        step(torch.randn(6, 16), torch.randn(6, 16))       # prefill: 6 tokens
        for cached in [7, 8, 9]:                          # decode: 1 token each
            step(torch.randn(1, 16), torch.randn(cached, 16))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, "expects one graph to serve prefill and decode; the token count of 1 is specialised, "
                  "so the first decode step recompiles"),
                 (2, None, None),
                 (3, None, "expects the decode steps to need a graph for the token count and another for the cache; "
                  "both change at the same call, one recompile"),
                 (4, None, "expects every new cache length to compile; a length that changed once becomes a symbol")]),
        dict(
        case="""
        step = torch.compile(lambda q, kv: q.mm(kv.t()).sum(-1), backend=cnt)
        step(torch.randn(3, 8), torch.randn(3, 8))         # prefill: 3 tokens
        for cached in [4, 5, 6, 7]:                       # decode: 1 token each
            step(torch.randn(1, 8), torch.randn(cached, 8))""",
        question="How many graphs does `cnt` count?",
        options=[(5, None, "expects every new cache length to compile; a length that changed once becomes a symbol"),
                 (3, None, "expects the decode steps to need a graph for the token count and another for the cache; "
                  "both change at the same call, one recompile"),
                 (2, None, None),
                 (1, None, "expects one graph to serve prefill and decode; the token count of 1 is specialised, "
                  "so the first decode step recompiles")])),
    # ---------------------------------------------------------------- the recompile limit and its fall-back
    ("limit-fallback", "limit", dict(
        case="""
        torch._dynamo.config.recompile_limit = 2
        f = torch.compile(lambda x: x.sin() * 2, backend=cnt, dynamic=False)
        for length in [4, 5, 6, 4, 7]:
            f(torch.randn(length))""",
        question="How many graphs does `cnt` count, and what does the call on length 6 do?",
        answer="(cnt.frame_count, raised or ('compiled' if cnt.served(6) else 'eager'))",
        options=[((2, "eager"), "2 graphs; length 6 runs eagerly", None),
                 ((3, "compiled"), "3 graphs; length 6 compiles its own", LIMIT_IGNORED),
                 ((2, "RecompileLimitExceeded"), "2 graphs; the call on length 6 raises an error", LIMIT_RAISES),
                 ((4, "compiled"), "4 graphs; each new length compiles", LIMIT_IGNORED)]), dict(
        case="""
        torch._dynamo.config.recompile_limit = 3
        g = torch.compile(lambda x: x.cos() + 4, backend=cnt, dynamic=False)
        for length in [8, 9, 10, 11, 9]:
            g(torch.randn(length))""",
        question="How many graphs does `cnt` count, and what does the call on length 11 do?",
        answer="(cnt.frame_count, raised or ('compiled' if cnt.served(11) else 'eager'))",
        options=[((4, "compiled"), "4 graphs; length 11 compiles its own", LIMIT_IGNORED),
                 ((3, "RecompileLimitExceeded"), "3 graphs; the call on length 11 raises an error", LIMIT_RAISES),
                 ((3, "eager"), "3 graphs; length 11 runs eagerly", None),
                 ((5, "compiled"), "5 graphs; every call compiles", "expects a length seen before to compile again; "
                  "its graph is cached and serves it")])),
    ("limit-fallback", "limit", dict(
        case="""
        torch._dynamo.config.recompile_limit = 2
        f = torch.compile(lambda x: x.sigmoid() + 1, backend=cnt, dynamic=False)
        for length in [3, 4, 5, 3]:
            f(torch.randn(length))""",
        question="What runs the last call, on length 3, a length seen before?",
        answer="cnt.again(3)",
        options=[("graph 1", "the graph compiled for length 3 at the first call", None),
                 ("eager", "eager PyTorch: once the limit is hit, every call runs eagerly", "expects the limit to turn "
                  "off the compiled graphs; they stay cached and serve the shapes they were compiled for"),
                 ("new", "a new graph: the limit counts per shape", "expects the limit to count per shape; it counts "
                  "the graphs of the function"),
                 ("graph 2", "the graph compiled for length 4", "expects a static graph to serve another length; its "
                  "size guard fails")]), dict(
        case="""
        torch._dynamo.config.recompile_limit = 3
        g = torch.compile(lambda x: x.tan() - 1, backend=cnt, dynamic=False)
        for length in [5, 6, 7, 8, 6]:
            g(torch.randn(length))""",
        question="What runs the last call, on length 6, a length seen before?",
        answer="cnt.again(6)",
        options=[("new", "a new graph: the limit counts per shape", "expects the limit to count per shape; it counts "
                  "the graphs of the function"),
                 ("graph 1", "the graph compiled for length 5", "expects a static graph to serve another length; its "
                  "size guard fails"),
                 ("eager", "eager PyTorch: once the limit is hit, every call runs eagerly", "expects the limit to turn "
                  "off the compiled graphs; they stay cached and serve the shapes they were compiled for"),
                 ("graph 2", "the graph compiled for length 6 at the second call", None)])),
    ("failed-guards", "limit", dict(
        case="""
        f = torch.compile(lambda x: x.neg() + 1, backend=cnt, dynamic=False)
        for length in [6, 7, 8, 10, 6, 9]:
            f(torch.randn(length))""",
        question="The call on length 9 recompiles. How many failed guards does its recompile message list "
                 "(`TORCH_LOGS=recompiles`)?",
        answer="len(failures[-1])",
        options=[(1, None, "expects the message to name one failed guard; it lists one per cached graph"),
                 (4, None, None),
                 (5, None, "expects the repeated length to add a graph; 6 came back to a graph already cached"),
                 (6, None, "counts the calls; the message lists one failed guard per cached graph")]), dict(
        case="""
        g = torch.compile(lambda x: x.square() - 3, backend=cnt, dynamic=False)
        for length in [10, 11, 10, 12, 13, 11, 15, 14]:
            g(torch.randn(length, 2))""",
        question="The call on length 14 recompiles. How many failed guards does its recompile message list "
                 "(`TORCH_LOGS=recompiles`)?",
        answer="len(failures[-1])",
        options=[(7, None, "expects the repeated lengths to add graphs; 10 and 11 came back to graphs already cached"),
                 (5, None, None),
                 (8, None, "counts the calls; the message lists one failed guard per cached graph"),
                 (1, None, "expects the message to name one failed guard; it lists one per cached graph")])),
    # ---------------------------------------------------------------- bucketing arithmetic
    ("bucket-graphs", "buckets", dict(
        case="""
        f = torch.compile(lambda x: x.log_softmax(-1), backend=cnt, dynamic=False)
        for n in range(1, 31):                    # every length 1 to 30
            padded = -(-n // 8) * 8                # up to the next multiple of 8
            f(torch.randn(1, padded))""",
        question="How many graphs does `cnt` count?",
        options=[(3, None, "forgets the last bucket; 25 to 30 pad up to 32"), (4, None, None),
                 (30, None, "expects padding not to matter under dynamic=False; it maps the lengths onto a few sizes, "
                  "one static graph each"),
                 (8, None, "expects the recompile limit to stop the count; 4 buckets stay under it")]), dict(
        case="""
        g = torch.compile(lambda x: x.cumsum(-1), backend=cnt, dynamic=False)
        for n in range(1, 23):                    # every length 1 to 22
            padded = -(-n // 5) * 5                # up to the next multiple of 5
            g(torch.randn(2, padded))""",
        question="How many graphs does `cnt` count?",
        options=[(8, None, "expects the recompile limit to stop the count; 5 buckets stay under it"),
                 (22, None, "expects padding not to matter under dynamic=False; it maps the lengths onto a few sizes, "
                  "one static graph each"),
                 (5, None, None), (4, None, "forgets the last bucket; 21 and 22 pad up to 25")])),
    ("default-policy-buckets", "buckets", dict(
        case="""
        f = torch.compile(lambda x: x.relu().sum(-1), backend=cnt)      # the default policy
        for n in [3, 1, 6, 12, 20, 40]:
            padded = 1 << (n - 1).bit_length()        # the next power of two
            f(torch.randn(1, padded))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, FIRST_DYNAMIC),
                 (2, None, "forgets that a length of 1 pads to 1, a size the default specialises: a graph of its own"),
                 (3, None, None),
                 (6, None, "expects one graph per power-of-two bucket under the default; dynamic=None makes the padded "
                  "length a symbol after its first change")]), dict(
        case="""
        g = torch.compile(lambda x: x.exp().amax(-1), backend=cnt)      # the default policy
        for n in [2, 1, 7, 9, 30, 33]:
            padded = 1 << (n - 1).bit_length()        # the next power of two
            g(torch.randn(2, padded))""",
        question="How many graphs does `cnt` count?",
        options=[(6, None, "expects one graph per power-of-two bucket under the default; dynamic=None makes the padded "
                  "length a symbol after its first change"),
                 (2, None, "forgets that a length of 1 pads to 1, a size the default specialises: a graph of its own"),
                 (3, None, None), (1, None, FIRST_DYNAMIC)])),
    ("bucket-graphs", "buckets", dict(
        case="""
        torch._dynamo.config.recompile_limit = 16
        f = torch.compile(lambda x: x.flip(-1), backend=cnt, dynamic=False)
        for n in range(1, 61):                    # every length 1 to 60
            padded = 1 << (n - 1).bit_length()   # the next power of two
            f(torch.randn(padded))""",
        question="How many graphs does `cnt` count?",
        options=[(16, None, "expects the limit to be reached; 7 buckets stay under 16"),
                 (6, None, "counts log2 of the largest bucket; the powers of two from 1 to 64 are 7"),
                 (7, None, None),
                 (60, None, "expects padding not to matter under dynamic=False; it maps the lengths onto a few sizes, "
                  "one static graph each")]), dict(
        case="""
        torch._dynamo.config.recompile_limit = 16
        g = torch.compile(lambda x: x.roll(1, -1), backend=cnt, dynamic=False)
        for n in range(1, 101):                   # every length 1 to 100
            padded = 1 << (n - 1).bit_length()   # the next power of two
            g(torch.randn(padded))""",
        question="How many graphs does `cnt` count?",
        options=[(100, None, "expects padding not to matter under dynamic=False; it maps the lengths onto a few "
                  "sizes, one static graph each"),
                 (8, None, None),
                 (7, None, "counts log2 of the largest bucket; the powers of two from 1 to 128 are 8"),
                 (16, None, "expects the limit to be reached; 8 buckets stay under 16")])),
    # ---------------------------------------------------------------- data-dependent shapes
    ("data-dependent-break", "data-dependent", dict(
        case="""
        def f(x):
            y = x * 3
            return y[y > 1].sum() + y[y < 0].sum() + y[y > 2].sum()
        e = torch._dynamo.explain(f)(torch.randn(16))""",
        question="What are `e.graph_count` and `e.graph_break_count`?",
        answer="(e.graph_count, e.graph_break_count)",
        options=[((1, 0), "1 graph, 0 breaks", ONE_GRAPH_BREAK),
                 ((2, 1), "2 graphs, 1 break", "expects the first break to end what Dynamo compiles; it resumes "
                  "after each break, so every later data-dependent index breaks again"),
                 ((4, 3), "4 graphs, 3 breaks", None),
                 ((3, 3), "3 graphs, 3 breaks", BREAK_NO_AFTER)]), dict(
        case="""
        def g(x):
            z = x.exp()
            return z[z < 2].mean() - z[z > 3].mean() * z[z > 1].sum()
        e = torch._dynamo.explain(g)(torch.randn(32))""",
        question="What are `e.graph_count` and `e.graph_break_count`?",
        answer="(e.graph_count, e.graph_break_count)",
        options=[((3, 3), "3 graphs, 3 breaks", BREAK_NO_AFTER),
                 ((4, 3), "4 graphs, 3 breaks", None),
                 ((2, 1), "2 graphs, 1 break", "expects the first break to end what Dynamo compiles; it resumes "
                  "after each break, so every later data-dependent index breaks again"),
                 ((1, 0), "1 graph, 0 breaks", ONE_GRAPH_BREAK)])),
    ("unbacked-capture", "data-dependent", dict(
        case="""
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        torch._dynamo.config.capture_scalar_outputs = True
        @torch.compile(backend=cnt)
        def f(x):
            y = x * 3
            return y[y > 1].sum()
        for call in range(4):                    # random values: each keeps another number
            f(torch.randn(16))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, None),
                 (2, None, "expects the first new count of kept elements to recompile, as a new input length does; "
                  "the count is an unbacked symbol from the first call, with no guard on its value"),
                 (4, None, "expects each new count of kept elements to recompile; with both flags the count is an "
                  "unbacked symbol inside one graph"),
                 (8, None, "expects the flags to keep the break; with both on the indexing stays in the graph")]), dict(
        case="""
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        torch._dynamo.config.capture_scalar_outputs = True
        @torch.compile(backend=cnt)
        def g(x):
            z = x.exp()
            return z[z < 2].mean()
        for call in range(5):                    # random values: each keeps another number
            g(torch.randn(20))""",
        question="How many graphs does `cnt` count?",
        options=[(10, None, "expects the flags to keep the break; with both on the indexing stays in the graph"),
                 (5, None, "expects each new count of kept elements to recompile; with both flags the count is an "
                  "unbacked symbol inside one graph"),
                 (1, None, None),
                 (2, None, "expects the first new count of kept elements to recompile, as a new input length does; "
                  "the count is an unbacked symbol from the first call, with no guard on its value")])),
    ("data-dependent-break", "data-dependent", dict(
        case="""
        @torch.compile(backend=cnt)
        def f(x):
            n, m = int(x.sum().item()), int(x.amax().item())
            return x * n + m
        for v in [1.0, 2.0, 3.0, 4.0]:
            f(torch.full((4,), v))""",
        question="How many graphs does `cnt` count?",
        options=[(1, None, "expects `.item()` to be traced; by default a Python number read from a tensor breaks "
                  "the graph"),
                 (3, None, "expects the code after each break to take `n` and `m` as data; a Python int is a "
                  "constant at first and becomes a symbol at its first change"),
                 (5, None, None),
                 (9, None, "expects a graph per value of `n` and `m`; automatic dynamic makes an int a symbol after "
                  "its first change")]), dict(
        case="""
        @torch.compile(backend=cnt)
        def g(x):
            m, k = int(x.amax().item()), int(x.sum().item())
            return x + m - k
        for v in [2.0, 5.0, 7.0, 9.0, 5.0]:
            g(torch.full((3,), v))""",
        question="How many graphs does `cnt` count?",
        options=[(9, None, "expects a graph per value of `m` and `k`; automatic dynamic makes an int a symbol after "
                  "its first change"),
                 (5, None, None),
                 (3, None, "expects the code after each break to take `m` and `k` as data; a Python int is a "
                  "constant at first and becomes a symbol at its first change"),
                 (1, None, "expects `.item()` to be traced; by default a Python number read from a tensor breaks "
                  "the graph")])),
    ("loop-break", "data-dependent", dict(
        case="""
        @torch.compile(backend=cnt)
        def f(x):
            total = x.new_zeros(())
            for part in x.split(4):
                total = total + part[part < 0].sum()
            return total
        f(torch.randn(12))""",
        question="How many graphs does `cnt` count?",
        options=[(0, None, None),
                 (1, None, "expects the break to leave one graph, as outside a loop; inside a loop Dynamo gives up on "
                  "the whole function and runs it eagerly"),
                 (2, None, "expects a graph before the break and one after; inside a loop Dynamo skips the frame "
                  "instead"),
                 (4, None, "expects a graph per part of the loop; a break inside a loop makes Dynamo skip the frame")]),
        dict(
        case="""
        @torch.compile(backend=cnt)
        def g(x):
            acc = x.new_zeros(())
            for row in x.unbind(0):
                acc = acc + row[row > 1].mean()
            return acc
        g(torch.randn(3, 5))""",
        question="How many graphs does `cnt` count?",
        options=[(3, None, "expects a graph per row of the loop; a break inside a loop makes Dynamo skip the frame"),
                 (2, None, "expects a graph before the break and one after; inside a loop Dynamo skips the frame "
                  "instead"),
                 (0, None, None),
                 (1, None, "expects the break to leave one graph, as outside a loop; inside a loop Dynamo gives up on "
                  "the whole function and runs it eagerly")])),
]

ITEMS: dict[str, Item] = {}
for _n, (_concept, _idea, _a, _b) in enumerate(_PAIRS, start=1):
    for _form, _spec in zip(FORMS, (_a, _b)):
        _it = _item(_form, _n, _concept, _idea, _spec)
        ITEMS[_it.id] = _it
del _n, _concept, _idea, _a, _b, _form, _spec, _it


def items(form: str) -> list[Item]:
    """The items of ``form`` ("A" or "B"), in order."""
    if form not in FORMS:
        raise ValueError(f"no form {form!r}: the forms are {', '.join(FORMS)}")
    return [it for it in ITEMS.values() if it.form == form]


def item(item_id: str) -> Item:
    """One item by its id ("A07")."""
    try:
        return ITEMS[str(item_id).strip().upper()]
    except KeyError:
        raise KeyError(f"no item {item_id!r}: the ids are A01-A{len(_PAIRS):02d} and B01-B{len(_PAIRS):02d}") from None


def concepts() -> list[str]:
    """The concepts the inventory measures, in the order of the items."""
    return list(dict.fromkeys(it.concept for it in ITEMS.values()))


def other(form: str) -> str:
    """The form taken after ``form``."""
    return FORMS[1 - FORMS.index(form)]


# ---------------------------------------------------------------- measuring an item's case with torch (tests only)

def _counter():
    """A ``CompileCounter`` that also keeps, per graph, whether a size is symbolic, the first sizes of its inputs
    and the calls it served: what the items' answers read."""
    import torch
    from torch._dynamo.testing import CompileCounter

    class Counter(CompileCounter):
        def __init__(self):
            super().__init__()
            self.dynamic, self.sizes, self.runs = [], [], []

        def __call__(self, gm, example_inputs):
            forward = super().__call__(gm, example_inputs)
            values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            self.dynamic.append(any(isinstance(v, torch.SymInt) for v in values)
                                or any(isinstance(d, torch.SymInt) for t in tensors for d in t.shape))
            self.sizes.append(tuple(t.shape[0] for t in tensors if t.dim()))
            self.runs.append(0)
            number = len(self.runs)

            def run(*args):
                self.runs[number - 1] += 1
                return forward(*args)
            return run

        def served(self, size: int) -> bool:
            """Whether a graph was compiled for a first input of leading size ``size``."""
            return any(s and s[0] == size for s in self.sizes)

        def again(self, size: int) -> str:
            """What ran a second call on leading size ``size``: "graph N" (the N-th compiled, which served both
            calls), "new" (a second graph compiled for it) or "eager" (its graph served one call only)."""
            mine = [i for i, s in enumerate(self.sizes) if s and s[0] == size]
            if len(mine) > 1:
                return "new"
            if not mine:
                return "eager"
            return f"graph {mine[0] + 1}" if self.runs[mine[0]] >= 2 else "eager"

    return Counter()


def measure(it: Item):
    """Execute ``it``'s case from a clean compile state (every setting restored afterwards) and return the value
    its options stand for. Cheap: the cases count graphs with ``CompileCounter`` or ``explain``."""
    import logging

    import torch

    from ..instruments import compat
    from ..instruments.isolation import isolated

    failures: list[list[str]] = []
    with isolated():
        cnt = _counter()
        ns = {"torch": torch, "cnt": cnt, "CompileCounter": type(cnt).__mro__[1]}
        # the recompile-limit warning and a broken mark's error are the answers of some items, not noise to show
        quiet = [logging.getLogger(name) for name in ("torch._dynamo", "torch._guards")]
        levels = [q.level for q in quiet]
        for q in quiet:
            q.setLevel(logging.CRITICAL)
        raised = None
        try:
            with compat.recompile_failures(lambda _id, reasons: failures.append(list(reasons))):
                try:
                    exec(compile(it.case, f"<{it.id}>", "exec"), ns)
                except Exception as e:  # the case's own error is what some items ask about; others show it
                    if "raised" not in it.answer:
                        raise
                    raised = type(e).__name__
                value = eval(it.answer, ns, {"raised": raised, "failures": failures})
        finally:
            for q, level in zip(quiet, levels):
                q.setLevel(level)
    return value


# ---------------------------------------------------------------- the learner's side: forms, answers, their file

FILE_ENV = "SHAPELAB_INVENTORY_FILE"
PHASE_NAMES = {"pre": "before the lessons", "post": "after the lessons"}
KERNEL = uuid.uuid4().hex
_state: dict = {}          # this kernel's phase and form, set by begin()
_kept: list[dict] = []     # this kernel's records, when the file could not be written


def path() -> Path:
    """The learner's file: ``$SHAPELAB_INVENTORY_FILE``, else inventory.jsonl beside the learning file
    (``labkit.learning.path()``: ~/.shapelab/, or a test kernel's temp dir)."""
    from . import learning

    return Path(os.environ.get(FILE_ENV) or learning.path().parent / "inventory.jsonl")


def _write(record: dict) -> bool:
    from .learning import append_private

    file = path()
    try:
        append_private(file, record)
        return True
    except OSError as e:
        _kept.append(record)
        print(f"(your inventory record was not saved to {file}: {e.strerror or e}; this kernel keeps it; go on)")
        return False


def records() -> list[dict]:
    """Every record of the learner's file (lines that are not a record skipped), then this kernel's unsaved ones."""
    file = path()
    try:
        lines = file.read_text().splitlines() if file.exists() else []
    except (OSError, UnicodeDecodeError) as e:
        print(f"(your inventory file {file} could not be read: {getattr(e, 'strerror', None) or e})")
        lines = []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("kind") in ("form", "answer"):
            out.append(rec)
    return out + list(_kept)


def responses() -> list[dict]:
    """The learner's answers as the scorer reads them (``inventory_score``), changes included (the scorer keeps
    the first of each item and phase)."""
    return [{"user": None, "form": r.get("form"), "item": r.get("item"), "phase": r.get("phase"),
             "choice": r.get("choice"), "at": r.get("at")} for r in records() if r.get("kind") == "answer"]


def first_form() -> str:
    """The form this learner takes before the lessons: in a room, the one the service assigns; elsewhere the one
    in their file, else one chosen at random now and kept there (the other form comes after)."""
    from ..room import client

    assigned = client.assigned_form()
    if assigned in FORMS:
        return assigned
    kept = [r.get("first") for r in records() if r.get("kind") == "form" and r.get("first") in FORMS]
    if kept:
        return kept[0]
    chosen = random.SystemRandom().choice(FORMS)
    _write({"kind": "form", "first": chosen, "at": time.time(), "kernel": KERNEL})
    return chosen


def begin(phase: str) -> str:
    """Start taking the inventory ``phase`` ("pre" before lesson 01, "post" after lesson 07); return the form."""
    if phase not in PHASE_NAMES:
        raise ValueError(f"phase must be 'pre' or 'post', not {phase!r}")
    first = first_form()
    form = first if phase == "pre" else other(first)
    _state.update(phase=phase, form=form)
    done = {r["item"] for r in responses() if r["phase"] == phase}
    print(f"Form {form}, {PHASE_NAMES[phase]}: {len(items(form))} items. Your answers go to {path()} (yours alone)."
          + (f" You answered {len(done)} already; those first answers count." if done else ""))
    return form


def _which(number) -> Item | None:
    if not _state:
        print("Run the first cell (inventory.begin) first: it says which form is yours.")
        return None
    mine = items(_state["form"])
    if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= len(mine):
        return mine[number - 1]
    print(f"There is no item {number!r} here: the items are numbered 1 to {len(mine)}.")
    return None


def show(number: int) -> None:
    """Show item ``number`` of this learner's form: its case, question and options (nothing is run)."""
    it = _which(number)
    if it is None:
        return
    text = it.markdown(str(number))  # a number, not the id: the id would say which form is which
    try:
        from IPython.display import Markdown, display
        display(Markdown(text))
    except ImportError:
        print(text)


def answer(number: int, choice=...) -> str | None:
    """Show item ``number`` of this learner's form, and record their ``choice`` ("a" to "d", "e" for I don't
    know) when there is one. The first answer counts; a later one is kept as a change. Returns the choice
    recorded, None when none was."""
    from ..room import client

    it = _which(number)
    if it is None:
        return None
    show(number)
    if choice is Ellipsis or choice is None or (isinstance(choice, str) and not choice.strip()):
        print("Your answer: put your letter in place of ... in this cell and run it again.")
        return None
    letter = str(choice).strip().lower().rstrip(").")
    if letter not in CHOICES:
        print(f"{choice!r} is not one of the letters a, b, c, d or e: nothing recorded for item {number}.")
        return None
    phase = _state["phase"]
    earlier = [r for r in responses() if r["item"] == it.id and r["phase"] == phase]
    record = {"kind": "answer", "form": it.form, "item": it.id, "phase": phase, "choice": letter, "at": time.time(),
              "kernel": KERNEL, "change": bool(earlier)}
    _write(record)
    client.record_inventory(it.form, it.id, phase, letter)
    if earlier:
        print(f"Item {number}: your first answer ({earlier[0]['choice']}) is the one that counts; this one is kept "
              "as a change.")
    else:
        print(f"Item {number}: {letter} recorded.")
    return letter


def answered(phase: str) -> int:
    """How many items this learner answered in ``phase``."""
    return len({r["item"] for r in responses() if r["phase"] == phase})


def complete(phase: str) -> bool:
    """Whether every item of a form was answered in ``phase`` (a before/after table waits for it: before it,
    right or wrong per concept would tell which answers were right)."""
    return answered(phase) >= len(items(FORMS[0]))


def summary() -> None:
    """The learner's before/after table per concept (the scorer's, over their first answers), for the end of the
    after notebook; nothing is shown of the keys beyond right or not per concept."""
    from ..instruments.display import Table
    from . import inventory_score

    if not complete("post"):
        print(f"{answered('post')} of {len(items(FORMS[0]))} items answered after the lessons: the table before and "
              "after comes once every item has an answer (e, I don't know, is one).")
        return
    rows = inventory_score.learner(responses())

    def share(v):
        return f"{v[0]} of {v[1]}" if v else "not answered"
    table = Table({"concept": r["concept"], "right before": share(r["pre"]), "right after": share(r["post"]),
                   "g": "" if r["g"] is None else f"{r['g']:+.2f}"} for r in rows)
    print("Your inventory, before and after, per concept (first answers; g = (after - before) / (1 - before)):")
    try:
        from IPython.display import display
        display(table)
    except ImportError:
        print(table)
    _shown_to_room()


def _shown_to_room() -> None:
    """In a room, tell the service the learner has seen how their answers scored: any answer sent after this is
    "after seeing" and left out of g (issue 37). Outside a room nothing is sent."""
    from ..room import client as room_client

    if room_client._room() is None:
        return
    seen = {(r["form"], r["item"]) for r in responses() if r["phase"] == "post"}  # the service marks each pair too
    for form, item in sorted(seen):
        room_client.record_inventory(form, item, "post", None)


# ---------------------------------------------------------------- how long taking it takes (the notebooks state it)

# An item's seconds beyond reading its words and lines at readtime's rates (thinking it out, typing the letter):
# fitted to the totals of one timed read of both sittings, item by item (an AI's judgement of a careful taker,
# 2026-12-05, as the lessons' reads are): about 19 minutes before the lessons, 16 after them.
ANSWER_SECONDS = {"pre": 28, "post": 19}
# What a sitting may take. DESIGN.md (and issue 35) say at most 10 minutes; 20 items (one per tagged concept, five
# of them twice) measure 19 before and 16 after (the old estimate, 10 s an answer, said 13). Ten minutes would take
# about half the items a sitting (fewer items, or each learner answering half of each form): not decided; this
# ceiling only stops the form from growing meanwhile.
LIMIT_MINUTES = 19


def taking_time(cells, phase: str) -> tuple[int, str]:
    """(minutes, the sentence a notebook states) for a sitting (``phase`` "pre" or "post"): the notebook's prose and
    code as ``readtime`` counts them, plus the longer form's items as they are shown (question and options at its
    words a minute, the case at its code lines a minute) and the phase's ``ANSWER_SECONDS`` an item."""
    import math

    from . import readtime as rt

    words = sum(rt._words(c.source) for c in cells if c.cell_type == "markdown")
    lines = sum(rt._code_lines(c.source) for c in cells if c.cell_type == "code")
    shown = max((sum(rt._words(f"{it.question} " + " ".join(it.choices.values())) for it in items(f)),
                 sum(rt._code_lines(it.case) for it in items(f))) for f in FORMS)
    n = len(items(FORMS[0]))
    minutes = math.ceil((words + shown[0]) / rt.WORDS_PER_MINUTE + (lines + shown[1]) / rt.CODE_LINES_PER_MINUTE
                        + n * ANSWER_SECONDS[phase] / 60)
    return minutes, (f"{minutes} minutes, measured: {words + shown[0]:,} words, {lines + shown[1]} lines of code, "
                     f"{ANSWER_SECONDS[phase]} s to think out and answer each of {n} items")
