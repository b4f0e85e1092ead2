"""Prescriptions: the change for each cause, as code for the installed PyTorch, and a plan the
doctor can apply by itself (marks, input transforms, config, padding to buckets)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...instruments import compat
from .classify import Cause


@dataclass
class Prescription:
    """What to change for one cause: code to paste, whether the doctor applies it in the proof, why not."""

    kind: str
    where: str
    code: str
    applied: bool
    note: str = ""

    def row(self, proved: bool = True) -> dict:
        status = ("yes" if proved else "not proven (no proof run)") if self.applied else "no: " + self.note
        return {"for": self.where, "change": self.code.splitlines()[0] + (" ..." if "\n" in self.code else ""),
                "applied in the proof": status}


@dataclass
class Plan:
    """What a proof replay applies, kept as the code it prints: the proof runs exactly this code.

    ``marks``: (argument name, dim, kind) with kind "dynamic", "maybe_dynamic", "unbacked" or "static";
    ``prep``: lines run on each call's arguments before the marks (``x = x.contiguous()``);
    ``config``: ``torch._dynamo.config`` values set once; ``setup``: lines run once on the model, named
    ``model``, before it is compiled; ``pad``: (name, dim) -> bucket sizes.
    """

    label: str
    marks: list[tuple[str, int, str]] = field(default_factory=list)
    prep: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    pad: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    predicted: int | None = None
    notes: list[str] = field(default_factory=list)
    partial: set = field(default_factory=set)  # paths that are tensors in some calls only (an empty cache)
    setup: list[str] = field(default_factory=list)
    spec: dict[str, tuple[int, list[int]]] = field(default_factory=dict)  # name -> (rank, dims) of a declarative spec
    spec_keyword: str | None = None  # torch.compile's keyword for it on this release

    @property
    def empty(self) -> bool:
        return not (self.marks or self.prep or self.config or self.pad or self.setup or self.spec)

    def spec_expr(self) -> str:
        """The declarative spec as a dict expression (``TensorSpec`` per argument, a ``ShapeVar`` per dimension)."""
        items = []
        for name, (rank, dims) in self.spec.items():
            ds = ", ".join(f'ShapeVar("{name}_{d}")' if d in dims else "None" for d in range(rank))
            items.append(f'"{name}": TensorSpec([{ds}])')
        return "{" + ", ".join(items) + "}"

    def spec_code(self) -> str:
        """Compiling with the spec: what replaces the per-call marks."""
        return ("from torch.fx.experimental.dynamic_spec import ShapeVar, TensorSpec\n"
                f"compiled = torch.compile(model, {self.spec_keyword}={self.spec_expr()})  # unbacked: sizes 0, 1 "
                "and N share a graph\n")

    def once_code(self) -> str:
        """What to run once, before the first call (config)."""
        return "".join(f"torch._dynamo.config.{k} = {v!r}\n" for k, v in self.config.items())

    def model_code(self) -> str:
        """What to run once on the model (``model``), before compiling it."""
        return "".join(line + "\n" for line in self.setup)

    def mark_line(self, name: str, dim: int, kind: str) -> str:
        """One mark as pasted: guarded where the argument is not a tensor in every call (None, an empty cache)."""
        line = mark_code(name, dim, kind)
        if name in self.partial:
            return f"if isinstance({name}, torch.Tensor):  # not a tensor in every call\n    {line}"
        return line

    def call_code(self) -> str:
        """What to run on every call's arguments, by their names in your code, before calling the model."""
        lines = list(self.prep)
        for (name, dim), buckets in self.pad.items():
            lines.append(f"{name} = torch.nn.functional.pad({name}, [0, 0] * ({name}.dim() - {dim} - 1)"
                         f" + [0, next((b for b in {list(buckets)} if b >= {name}.shape[{dim}]), {name}.shape[{dim}])"
                         f" - {name}.shape[{dim}]])  # mask the padding in the model")
        lines += [self.mark_line(name, dim, kind) for name, dim, kind in self.marks]
        return "".join(line + "\n" for line in lines)

    def code(self) -> str:
        """The whole change, as printed and as the proof ran it."""
        out = ""
        if self.spec:
            out += f"# compile with the declarative spec ({self.spec_keyword}=) instead of per-call marks:\n" + self.spec_code()
        if self.setup:
            out += "# once, on your model, before compiling it:\n" + self.model_code()
        if self.config:
            out += "# once, before the first call:\n" + self.once_code()
        if self.prep or self.marks or self.pad:
            out += "# before every call, on its arguments (they keep your names):\n" + self.call_code()
        return out or "# nothing to apply automatically\n"


def mark_code(name: str, dim: int, kind: str) -> str:
    """One mark as code for the installed PyTorch."""
    if kind == "unbacked":
        return mark_unbacked_code(name, dim)
    fn = {"dynamic": "mark_dynamic", "maybe_dynamic": "maybe_mark_dynamic", "static": "mark_static"}[kind]
    return f"torch._dynamo.{fn}({name}, {dim})"


def mark_unbacked_code(var: str, dim: int) -> str:
    """``mark_unbacked`` spelt where this release has it."""
    where = "torch._dynamo.mark_unbacked" if hasattr(torch._dynamo, "mark_unbacked") else "torch._dynamo.decorators.mark_unbacked"
    return f"{where}({var}, {dim})"


def stance_code() -> str:
    """The stance advice for after warm-up, for this release."""
    if not compat.has_set_stance():
        return "# torch.compiler.set_stance is not in this release: watch the recompile-limit warning instead"
    return ('torch.compiler.set_stance("fail_on_recompile")   # in tests, after warm-up: a new graph is a bug\n'
            'torch.compiler.set_stance("eager_on_recompile")  # in production, after warm-up: run a rare shape eagerly')


def limit_code(n: int) -> str:
    """Raising the recompile limit to ``n``, spelt for this release (per function where it can be)."""
    if compat.supports_compile_kwarg("recompile_limit"):
        return f"torch.compile(model, recompile_limit={n})  # only when {n} graphs is what the traffic needs"
    return f"torch._dynamo.config.{compat.recompile_limit_name()} = {n}  # only when {n} graphs is what the traffic needs"


def for_cause(c: Cause, var: str | None, *, unbacked: bool, is_module: bool, scalar_arg: bool,
              tensor_form: str | None = None, flag: bool = False, branched: bool = False) -> Prescription:
    """The prescription for one cause; ``var`` is the argument's name in the user's code (if known);
    ``tensor_form``: for a type change, the expression that makes a number the tensor it is in other calls (None:
    no such form)."""
    v = var or c.input or "x"
    if c.input and c.input.startswith("___"):
        return Prescription(c.kind, c.where, "# fix the graph break first: this value exists only because of it",
                            False, "it is not one of your inputs")
    if c.kind == "type_change":
        if tensor_form is not None:
            return Prescription(c.kind, c.where, f"{v} = {tensor_form}  # keep the type "
                                "stable: a tensor every call (or a Python number every call)", var is not None,
                                "" if var is not None else "the input is not an argument of the call")
        return Prescription(c.kind, c.where, f"# keep the type of {v} stable: pass a tensor every call, or a Python "
                            "number every call; each type keeps its own graph (counted in the prediction)", False,
                            "its tensors differ in dtype or shape: which tensor a number stands for is the model's")
    if c.kind == "parameter_tensor":
        return Prescription(c.kind, c.where, f"{v} = {v}.detach()  # one kind of tensor every call: a plain one "
                            "(inference; when training, pass the nn.Parameter every call)", var is not None,
                            "" if var is not None else "the input is not an argument of the call")
    if c.kind == "rank":
        return Prescription(c.kind, c.where, f"# {v} has a different number of dimensions in some calls: each rank "
                            "keeps its own graph (counted in the prediction); no mark can join them", False,
                            "a rank cannot be made dynamic")
    if c.kind == "value_branch":
        return Prescription(c.kind, c.where, f"# `{c.detail}`: the model's code branches on {v}'s value; once {v} is "
                            "symbolic, each outcome of the branch keeps its own graph (counted in the prediction); a "
                            "tensor for the value would turn the branch into a data-dependent one (a graph break)",
                            False, "the branch is in the model's code")
    if c.kind == "library_range":
        return Prescription(c.kind, c.where, f"# `{c.detail}`: torch's own code specialises this range of "
                            f"{v}.shape[{c.dim}]; sizes outside it get their own graph (counted in the prediction): "
                            "accept it, or keep the sizes inside the range", False, "the guard is in torch's code")
    if c.kind == "dimension":
        if unbacked:
            return Prescription(c.kind, c.where, f"{mark_unbacked_code(v, c.dim)}  # before the call; sizes 0, 1 and N share one graph\n"
                                f"torch._check({v}.shape[{c.dim}] >= 1)  # inside the model, if it branches on the size",
                                var is not None)
        return Prescription(c.kind, c.where, f"torch._dynamo.mark_dynamic({v}, {c.dim})  # before the first call"
                            f" (maybe_mark_dynamic if the model may specialise it)", var is not None,
                            "" if var is not None else "the input is not an argument of the call")
    if c.kind == "zero_one":
        return Prescription(c.kind, c.where, f"{mark_unbacked_code(v, c.dim)}  # one graph for sizes 0, 1 and N\n"
                            f"torch._check({v}.shape[{c.dim}] >= 1)  # where the model branches on it",
                            var is not None, "" if var is not None else "the input is not an argument of the call")
    if c.kind == "optional":
        return Prescription(c.kind, c.where, f"# {v} is None in some calls and a tensor in others: each case keeps its own "
                            f"graph (counted in the prediction);\n# pass a tensor in every call (a neutral one, as "
                            f"the model reads it) for one graph", False, "which tensor is neutral is the model's")
    if c.kind == "set_by_call" and c.shown and c.values:
        return Prescription(c.kind, c.where, f"{c.shown} = {c.values[0]}  # once, before compiling: the value the "
                            "model's first call sets (the first graph guarded the value before it)", True)
    if c.kind == "set_by_call":
        return Prescription(c.kind, c.where, f"# set `{c.detail}` once, before compiling, to the value the model's first "
                            "call gives it", False, "the value cannot be written as code")
    if c.kind == "call_signature":
        return Prescription(c.kind, c.where, "# pass the same arguments the same way in every call: the same keywords "
                            "(attention_mask always, say), each by keyword or each by position", False,
                            "how you call the model is yours to change")
    if c.kind == "size_branch":
        return Prescription(c.kind, c.where, f"# `{c.detail}`: the model's code branches on {v}.shape[{c.dim}];\n"
                            "# each side of the branch keeps its own graph whatever you mark: remove the branch "
                            "(torch.cond) or accept the graphs", False, "the branch is in the model's code")
    if c.kind == "stride":
        return Prescription(c.kind, c.where, f"{v} = {v}.contiguous()  # before the call: one layout, one graph",
                            var is not None, "" if var is not None else "the input is not an argument of the call")
    if c.kind == "dtype_device":
        return Prescription(c.kind, c.where, f"{v} = {v}.to(dtype=..., device=...)  # one dtype and device at the boundary"
                            " (or accept one graph per combination)", False, "changing dtype or device changes results")
    if c.kind == "global_state":
        return Prescription(c.kind, c.where, "with torch.no_grad():  # the same grad mode for every call of this model\n"
                            "    out = model(x)\n# or compile one function for training and one for inference;"
                            " set torch.set_num_threads once, at start-up", False, "global state is the caller's")
    if c.kind == "python_value" and c.detail.endswith(".training"):
        return Prescription(c.kind, c.where, "# model.train() / model.eval() switches self.training: each mode keeps "
                            "its own graph (counted in the prediction);\n# compile one model per mode, or keep one "
                            "mode for the compiled calls", False, "the mode is the caller's")
    if c.kind == "python_value" and branched:
        return Prescription(c.kind, c.where, f"# `{c.detail}`: the model's code branches on {v}'s value (see its branch "
                            "row): it stays a Python number; a 0-d tensor would make that branch data-dependent (a graph "
                            "break); its first value keeps its own graph until it changes, then it is symbolic "
                            "(counted in the prediction)", False,
                            "the model branches on it")
    if c.kind == "python_value" and flag:
        return Prescription(c.kind, c.where, f"# `{c.detail}`: {v} is a bool, which decides control flow (model.train({v}), "
                            "say): each value keeps its own graph (counted in the prediction);\n# keep it fixed for the "
                            "compiled function, or compile one function per value", False, "a bool is control flow")
    if c.kind == "python_value":
        if "." in c.detail and is_module:
            return Prescription(c.kind, c.where, "torch._dynamo.config.allow_unspec_int_on_nn_module = True\n"
                                f"# or keep it as a tensor: self.register_buffer('{c.detail.split('.')[-1]}', torch.tensor(0))",
                                True)
        if scalar_arg:
            return Prescription(c.kind, c.where, f"{v} = torch.tensor({v})  # a 0-d tensor: its value is data, not a guard",
                                True)
        return Prescription(c.kind, c.where, f"# `{c.detail}` is a Python value read from an object: each value keeps "
                            "its own graph (counted in the prediction);\n# where it is a number the model computes "
                            "with, hold it as a tensor (a buffer), not a Python number", False,
                            "the value is read from an object the doctor does not own")
    if c.kind == "identity" and "aliasing" in c.detail:
        names = c.detail.split(" are the same")[0].split(" and ")
        return Prescription(c.kind, c.where, f"{names[-1]} = {names[0]}.clone()  # or build each with its own torch.zeros(...):"
                            " aliased inputs get their own graph", False, "which tensors you pass is the caller's choice")
    if c.kind == "identity":
        return Prescription(c.kind, c.where, "define the function/object once (module level) and pass the same one each call",
                            False, "which object to keep is the caller's choice")
    if c.kind == "data_dependent":
        return Prescription(c.kind, c.where, "torch._dynamo.config.capture_dynamic_output_shape_ops = True  # nonzero, x[mask]\n"
                            "torch._dynamo.config.capture_scalar_outputs = True  # .item()\n"
                            "torch._check(n > 0)  # where the model branches on a data-dependent size\n"
                            "# or the dense rewrite: torch.where(mask[:, None], x, 0).sum(0)", True)
    if c.kind == "graph_break":
        return Prescription(c.kind, c.where, "# rewrite the line torch names (torch._dynamo.explain(model)(x) lists them)",
                            False, "the doctor does not rewrite code")
    if c.kind == "limit":
        return Prescription(c.kind, "the limit", "# fix the causes above rather than raise the limit\n"
                            + limit_code(16) + "\n" + stance_code(), False, "a stance is for after warm-up")
    return Prescription(c.kind, c.where, "# read the guard: it names what changed", False, "not recognised")


def show_as_run(cs: list[Cause], rx: list[Prescription], plan: Plan, own: list[list[str]]) -> None:
    """Each applied prescription shows the lines of the plan that serve its cause, as pasted (a mark keeps
    the ``isinstance`` guard of the whole change); ``own[i]``: the other lines cause i put in the plan."""
    for c, p, lines in zip(cs, rx, own):
        if not p.applied:
            continue
        if c.kind in ("dimension", "zero_one", "size_branch") and not lines:
            lines = [plan.mark_line(n, d, k) for n, d, k in plan.marks if (n, d) == (c.shown, c.dim)]
        if lines:
            p.code = "\n".join(lines)
