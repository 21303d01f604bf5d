"""How an installed SGLang reads an EAGLE-3 draft, read statically from its files (issue 44, point 3).

Three facts, each read from the release's own code with :mod:`ast` (SGLang is never imported), each with its
``file:line``; where the code is not in the shape described here, the fact is "not checked" with the reason:

1. **Which draft field gives the ids** (:func:`runner_read`): the model runner reads
   ``getattr(draft_model_config.hf_config, "eagle_config", None)``, then ``eagle_config["use_aux_hidden_state"]``
   (default True) and ``eagle_config["eagle_aux_hidden_state_layer_ids"]`` in a ``try`` whose ``except`` sets the
   ids to None (0.5.14: ``model_executor/model_runner.py``, ``ModelRunner.__init__`` path; 0.5.16 and 0.5.23:
   ``model_executor/model_runner_components/spec_aux_hidden_state.py``). A top-level
   ``eagle_aux_hidden_state_layer_ids`` is not read there. The runner then calls the target's
   ``set_eagle3_layers_to_capture(ids)`` (0.5.14: ``init_aux_hidden_state_capture``; 0.5.16, 0.5.23:
   ``attention_backend_setup.py``, ``configure_aux_hidden_state_capture``).
2. **What the target's setter makes of them** (:func:`captured`): the body of the class's own
   ``set_eagle3_layers_to_capture`` is evaluated on the ids (or None) and the target's ``num_hidden_layers``,
   following calls into the inner model's setter (``self.model.set_eagle3_layers_to_capture(...)``), until a
   ``layers_to_capture`` is assigned. Most classes add 1 (``[val + 1 for val in layer_ids]``) and default to
   ``[2, n // 2, n - 3]``; some keep the ids as they are (0.5.23 ``deepseek_v2.py``: unless the first id is 1;
   ``gpt_oss.py``: when the largest id is ``n``). No list of classes is kept: each body is read.
3. **How the draft sizes its input** (:func:`fc_read`): ``sglang/srt/models/llama_eagle3.py``, ``LlamaModel.__init__``
   (the model of ``LlamaForCausalLMEagle3``): ``fc`` takes ``(target_hidden_size or hidden_size) x
   (num_aux_hidden_states, else len(eagle_config ids), else 3)``; ``LlamaForCausalLMEagle3.__init__``: the
   ``lm_head`` has ``draft_vocab_size`` rows (``vocab_size`` when None), the embedding ``vocab_size``.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any

from patchkit.sglang import contract as c
from patchkit.sglang.classes import ClassRef, Package

RUNNER_PACKAGE = "sglang.srt.model_executor"
"""Where the model runner's files are (``model_runner.py`` and, from 0.5.16, ``model_runner_components/``)."""
DRAFT_MODULE = "sglang.srt.models.llama_eagle3"
"""The EAGLE-3 draft model's module (``LlamaForCausalLMEagle3``, 0.5.14 to 0.5.23)."""
DRAFT_CLASS = "LlamaForCausalLMEagle3"
DRAFT_MODEL = "LlamaModel"
"""The draft's inner model class in :data:`DRAFT_MODULE`, whose ``__init__`` builds ``fc``."""
EAGLE_CONFIG = "eagle_config"
IDS_KEY = "eagle_aux_hidden_state_layer_ids"
USE_AUX_KEY = "use_aux_hidden_state"
COUNT_FIELD = "num_aux_hidden_states"
WIDTH_FIELD = "target_hidden_size"


class Unread(Exception):
    """The code is not in the shape this module reads; the message says what was found."""


@dataclass(frozen=True)
class Where:
    """A fact's place: the file (relative to site-packages), the line, and the function or class read."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class RunnerRead:
    """How the runner reads the draft's ids (fact 1).

    Attributes:
        read: where ``eagle_config["eagle_aux_hidden_state_layer_ids"]`` is read.
        call: where the target's ``set_eagle3_layers_to_capture`` is called, or None when not found.
        top_level: the function also reads a top-level ``eagle_aux_hidden_state_layer_ids``.
    """

    read: Where
    call: Where | None
    top_level: bool


@dataclass(frozen=True)
class Capture:
    """The layer ids the target's setter captures (fact 2).

    Attributes:
        ids: the ``layers_to_capture`` it assigns; None when not checked.
        where: where that assignment is (the decisive line), or the setter's ``def``.
        setter: the class whose ``set_eagle3_layers_to_capture`` was read first.
        reason: why not checked (empty when checked).
    """

    ids: tuple[int, ...] | None
    where: Where | None
    setter: str
    reason: str = ""


@dataclass(frozen=True)
class FcRead:
    """How the draft model sizes ``fc`` and its vocabulary (fact 3): where each was read."""

    fc: Where
    lm_head: Where | None


def rel_file(package: Package, module: str) -> str:
    """A module's file relative to site-packages (``sglang/srt/models/llama.py``), or ``?``."""
    path = package.path(module)
    return "?" if path is None else path.relative_to(package.root).as_posix()


def _modules_below(package: Package, dotted: str) -> list[str]:
    folder = package.root.joinpath(*dotted.split("."))
    if not folder.is_dir():
        return []
    return sorted(
        ".".join(p.relative_to(package.root).with_suffix("").parts) for p in folder.rglob("*.py") if p.is_file()
    )


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _is_key(node: ast.AST, key: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == key


def runner_read(package: Package) -> RunnerRead:
    """Fact 1, from the runner's files (module docstring).

    Raises:
        Unread: no function of :data:`RUNNER_PACKAGE` reads ``eagle_config[...ids]`` from an ``eagle_config``
            taken with ``getattr(..., "eagle_config", None)``.
    """
    read = call = None
    top_level = False
    for module in _modules_below(package, RUNNER_PACKAGE):
        tree = package.tree(module)
        for fn in _functions(tree) if tree is not None else ():
            nodes = list(ast.walk(fn))
            hit = next(
                (
                    n
                    for n in nodes
                    if isinstance(n, ast.Subscript)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == EAGLE_CONFIG
                    and _is_key(n.slice, IDS_KEY)
                ),
                None,
            )
            takes = any(
                isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "getattr"
                and _is_key(n.args[1], EAGLE_CONFIG)
                for n in nodes
                if isinstance(n, ast.Call) and len(getattr(n, "args", ())) >= 2
            )
            if hit is not None and takes and read is None:
                read = Where(rel_file(package, module), hit.lineno, fn.name)
                top_level = any(
                    isinstance(n, ast.Call) and len(n.args) >= 2 and _is_key(n.args[1], IDS_KEY) for n in nodes
                )
            for n in nodes:
                if (
                    call is None
                    and isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == c.CAPTURE_SETTER
                ):
                    call = Where(rel_file(package, module), n.lineno, fn.name)
    if read is None:
        raise Unread(f"no function of {RUNNER_PACKAGE} reads eagle_config[{IDS_KEY!r}] as this patchkit knows it")
    return RunnerRead(read, call, top_level)


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_CMP = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_CALLS = {"len": len, "list": list, "max": max, "min": min, "sorted": sorted, "int": int}
_RETURN = object()


class _Setter:
    """One evaluation of ``set_eagle3_layers_to_capture`` bodies (module docstring, fact 2)."""

    def __init__(self, package: Package, num_layers: int) -> None:
        self.package = package
        self.n = num_layers
        self.found: tuple[list[int], Where] | None = None
        self.depth = 0

    def run(self, cls: ClassRef, value: Any) -> None:
        """Run ``cls``'s nearest setter on ``value``; the first ``layers_to_capture`` assigned ends the run."""
        self.depth += 1
        here = self.package.definer(cls, c.CAPTURE_SETTER)
        fn = (
            None
            if here is None
            else next(
                (n for n in here.node.body if isinstance(n, ast.FunctionDef) and n.name == c.CAPTURE_SETTER), None
            )
        )
        if fn is None or self.depth > 4:
            raise Unread(f"{cls.name} has no def {c.CAPTURE_SETTER} this reader can follow")
        params = [a.arg for a in fn.args.args[1:]]
        env = {params[0]: value} if params else {}
        self._block(fn.body, env, here)

    def _block(self, body: list[ast.stmt], env: dict, cls: ClassRef) -> object | None:
        for stmt in body:
            if self.found is not None:
                return _RETURN
            if self._stmt(stmt, env, cls) is _RETURN:
                return _RETURN
        return None

    def _stmt(self, stmt: ast.stmt, env: dict, cls: ClassRef) -> object | None:
        where = Where(rel_file(self.package, cls.module), stmt.lineno, f"{cls.name}.{c.CAPTURE_SETTER}")
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return None
        if isinstance(stmt, ast.If):
            return self._block(stmt.body if self._eval(stmt.test, env, cls) else stmt.orelse, env, cls)
        if isinstance(stmt, ast.Return):
            return _RETURN
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                env[target.id] = self._eval(stmt.value, env, cls)
            elif isinstance(target, ast.Attribute) and target.attr == c.LAYERS_TO_CAPTURE:
                self.found = ([int(v) for v in self._eval(stmt.value, env, cls)], where)
            elif not isinstance(target, ast.Attribute):
                raise Unread(f"{where}: an assignment this reader does not follow")
            return None
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return self._call(stmt.value, env, cls, where)
        if isinstance(stmt, ast.For) and not any(
            (isinstance(n, ast.Attribute) and n.attr == c.LAYERS_TO_CAPTURE and isinstance(n.ctx, ast.Store))
            or (isinstance(n, ast.Attribute) and n.attr == c.CAPTURE_SETTER)
            for n in ast.walk(stmt)
        ):
            return None  # a loop that marks layers (per-layer flags) and sets no ids
        raise Unread(f"{where}: a {type(stmt).__name__.lower()} statement this reader does not follow")

    def _call(self, call: ast.Call, env: dict, cls: ClassRef, where: Where) -> None:
        func = call.func
        if isinstance(func, ast.Name) and func.id == "setattr":
            return None
        if isinstance(func, ast.Attribute) and func.attr == c.CAPTURE_SETTER and len(call.args) == 1:
            inner = self._member(func.value, cls, where)
            self.run(inner, self._eval(call.args[0], env, cls))
            return None
        raise Unread(f"{where}: a call this reader does not follow ({ast.unparse(func)})")

    def _member(self, node: ast.expr, cls: ClassRef, where: Where) -> ClassRef:
        """The one class ``self.<name>`` is built as in ``cls``'s lineage (``self.model = Qwen3MoeModel(...)``)."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
            raise Unread(f"{where}: the setter is called on {ast.unparse(node)}, not on an attribute of self")
        built = set()
        for here in self.package.lineage(cls):
            for n in ast.walk(here.node):
                if (
                    isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Attribute) and t.attr == node.attr for t in n.targets)
                    and isinstance(n.value, ast.Call)
                ):
                    ref = self.package.expression(here.module, n.value.func)
                    built.add(ref if ref is not None else ast.unparse(n.value.func))
        refs = [b for b in built if isinstance(b, ClassRef)]
        if len(built) != 1 or not refs:
            names = ", ".join(sorted(b.name if isinstance(b, ClassRef) else b for b in built)) or "nothing"
            raise Unread(f"{where}: self.{node.attr} is built as {names}, not one class of the package")
        return refs[0]

    def _eval(self, node: ast.expr, env: dict, cls: ClassRef) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        text = ast.unparse(node)
        if text == "self.config.num_hidden_layers":
            return self.n
        if isinstance(node, ast.Attribute) and text.endswith("pp_group.is_last_rank"):
            return True  # the draft runs on the last pipeline stage: the ids it gets are the last rank's
        if isinstance(node, ast.List | ast.Tuple):
            return [self._eval(e, env, cls) for e in node.elts]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](self._eval(node.left, env, cls), self._eval(node.right, env, cls))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self._eval(node.operand, env, cls)
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            value = None
            for part in node.values:
                value = self._eval(part, env, cls)
                if bool(value) != is_and:
                    return value
            return value
        if isinstance(node, ast.Compare) and all(type(o) in _CMP for o in node.ops):
            left = self._eval(node.left, env, cls)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, env, cls)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Subscript):
            return self._eval(node.value, env, cls)[self._eval(node.slice, env, cls)]
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs:
            gen = node.generators[0]
            if isinstance(gen.target, ast.Name):
                return [self._eval(node.elt, {**env, gen.target.id: v}, cls) for v in self._eval(gen.iter, env, cls)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            return _CALLS[node.func.id](*(self._eval(a, env, cls) for a in node.args))
        raise Unread(f"{rel_file(self.package, cls.module)}:{node.lineno}: {cls.name} reads {text}, not followed here")


def captured(package: Package, cls: ClassRef, ids: list[int] | None, num_layers: int) -> Capture:
    """Fact 2: the ids ``cls``'s ``set_eagle3_layers_to_capture`` captures for ``ids`` on a target of
    ``num_layers`` layers (the module docstring). Never raises: a body not in the shape read is "not checked"."""
    here = package.definer(cls, c.CAPTURE_SETTER)
    setter = here.name if here is not None else cls.name
    reader = _Setter(package, num_layers)
    try:
        reader.run(cls, None if ids is None else list(ids))
    except Unread as exc:
        return Capture(None, None, setter, str(exc))
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError) as exc:
        return Capture(None, None, setter, f"{setter}.{c.CAPTURE_SETTER} fails on these ids ({exc})")
    if reader.found is None:
        return Capture(None, None, setter, f"{setter}.{c.CAPTURE_SETTER} assigns no {c.LAYERS_TO_CAPTURE}")
    found, where = reader.found
    return Capture(tuple(found), where, setter)


def reference_shift(package: Package) -> str:
    """ "" when the reference wrapper's setter (:data:`~patchkit.sglang.contract.REFERENCE_CLASSES`' first) maps the
    ids ``[1, 2, 3]`` on a 10-layer target to each id plus :data:`~patchkit.sglang.contract.ID_SHIFT`, as on the
    releases the SGLang patch was qualified on; otherwise why not (a "not checked" reason). The body is evaluated
    (:func:`captured`), not matched by its text, so a refactor that keeps the shift passes and one that changes it
    does not. Never raises."""
    cls = package.resolve(c.REFERENCE_MODULE, c.REFERENCE_CLASSES[0])
    if cls is None:
        return f"not checked: no {c.REFERENCE_CLASSES[0]} in {c.REFERENCE_MODULE} to read the id convention from"
    ids = [1, 2, 3]
    got = captured(package, cls, ids, 10)
    want = tuple(i + c.ID_SHIFT for i in ids)
    if got.ids == want:
        return ""
    read = f"maps ids {ids} to {list(got.ids)} ({got.where})" if got.ids is not None else f"was not read ({got.reason})"
    return (
        f"not checked: {c.REFERENCE_CLASSES[0]}.{c.CAPTURE_SETTER} {read}; patchkit was qualified on ids + "
        f"{c.ID_SHIFT} ({', '.join(c.QUALIFIED)})"
    )


def _init(cls: ClassRef) -> ast.FunctionDef | None:
    return next((n for n in cls.node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)


def fc_read(package: Package) -> FcRead:
    """Fact 3, from :data:`DRAFT_MODULE` (module docstring).

    Raises:
        Unread: the draft model's ``__init__`` does not build ``self.fc`` from ``num_aux_hidden_states`` and the
            ``eagle_config`` ids, or ``target_hidden_size``, as read on 0.5.14 to 0.5.23.
    """
    model = package.resolve(DRAFT_MODULE, DRAFT_MODEL)
    init = None if model is None or model.module != DRAFT_MODULE else _init(model)
    if init is None:
        raise Unread(f"{DRAFT_MODULE.replace('.', '/')}.py has no {DRAFT_MODEL}.__init__")
    file = rel_file(package, DRAFT_MODULE)
    fc = next(
        (
            n
            for n in ast.walk(init)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "fc" for t in n.targets)
        ),
        None,
    )
    constants = {n.value for n in ast.walk(init) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    needed = {COUNT_FIELD, IDS_KEY, EAGLE_CONFIG, WIDTH_FIELD}
    if fc is None or not needed <= constants:
        missing = ", ".join(sorted(needed - constants)) or "self.fc"
        raise Unread(f"{file}: {DRAFT_MODEL}.__init__ is not in the shape read ({missing} not found)")
    draft = package.resolve(DRAFT_MODULE, DRAFT_CLASS)
    head_init = None if draft is None else _init(draft)
    head = None
    for n in ast.walk(head_init) if head_init is not None else ():
        if isinstance(n, ast.Attribute) and n.attr == "draft_vocab_size":
            head = Where(file, n.lineno, f"{DRAFT_CLASS}.__init__")
            break
    return FcRead(Where(file, fc.lineno, f"{DRAFT_MODEL}.__init__"), head)


def read_ids(draft: dict) -> tuple[bool, list[int] | None]:
    """What the runner of fact 1 takes from a draft config: ``(use_aux_hidden_state, ids or None)``, as its
    ``try``/``except`` does (no ``eagle_config``, or no ids in it: None; a ``use_aux_hidden_state`` of False: no
    capture)."""
    nested = draft.get(EAGLE_CONFIG)
    if not isinstance(nested, dict):
        return True, None
    use = nested.get(USE_AUX_KEY, True)
    ids = nested.get(IDS_KEY)
    return bool(use), (list(ids) if isinstance(ids, list) else None)


def fc_count(draft: dict) -> int:
    """The number of states ``fc`` takes (fact 3): ``num_aux_hidden_states``, else the length of
    ``eagle_config``'s ids when non-empty, else 3."""
    count = draft.get(COUNT_FIELD)
    if count is not None:
        return int(count)
    nested = draft.get(EAGLE_CONFIG) or {}
    ids = nested.get(IDS_KEY) if isinstance(nested, dict) else None
    return len(ids) if ids else 3


__all__ = [
    "reference_shift",
    "Capture",
    "FcRead",
    "RunnerRead",
    "Unread",
    "Where",
    "captured",
    "fc_count",
    "fc_read",
    "read_ids",
    "rel_file",
    "runner_read",
]
