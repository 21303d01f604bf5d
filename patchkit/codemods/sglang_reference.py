"""What the installed SGLang release's own native Llama writes for EAGLE-3, read with libcst from its ``llama.py``.

A patch for SGLang (``apply --target sglang``) copies these statements, so the capture it writes is the idiom of the
release it patches, read from the release's files and never switched on the version (issue 44). The names come from
:mod:`patchkit.sglang.contract` (``REFERENCE_MODULE``, ``REFERENCE_CLASSES``); the facts, read on the wheels:

- the capture idiom of ``LlamaModel.forward``'s loop ``for i in range(self.start_layer, self.end_layer)``: 0.5.14's and
  0.5.16's ``if i in self.layers_to_capture: aux_hidden_states.append(hidden_states + residual)`` first in the loop
  (:attr:`Idiom.APPEND`); 0.5.23's ``capture_output=aux_hidden_states.capture if i in self.layers_to_capture else
  None`` handed to ``self.layers[i](...)`` (:attr:`Idiom.BOUNDARY`), the layer handing ``capture=capture_output`` to
  ``self.attn_boundary.prepare`` (``LlamaDecoderLayer.forward``);
- the accumulator statement before that loop (``aux_hidden_states = []``, or ``= AuxHiddenStateList()`` with its
  import from ``sglang/srt/layers/aux_hidden_states.py``), and the two statements that end the forward
  (``if len(aux_hidden_states) == 0: return hidden_states``, ``return hidden_states, aux_hidden_states``);
- ``self.layers_to_capture = []`` in ``LlamaModel.__init__``, ``self.capture_aux_hidden_states = False`` in
  ``LlamaForCausalLM.__init__``, the unpack after ``hidden_states = self.model(...)`` in its ``forward``;
- ``LlamaForCausalLM.set_eagle3_layers_to_capture`` (the pipeline guard ``if not self.pp_group.is_last_rank: return``,
  the default ``[2, num_layers // 2, num_layers - 3]``, the ids ``+ 1``) and ``get_embed_and_head``.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from patchkit.codemods import tree as t
from patchkit.codemods.base import Refusal, exactly_one, method_of, top_level_class
from patchkit.sglang import contract as c
from patchkit.sglang.states import Idiom

ACCUMULATOR = "aux_hidden_states"
"""The name the native loop collects into (``llama.py``, ``LlamaModel.forward``; ``contract.APPEND_LIST``)."""
CAPTURE_PARAM = "capture_output"
"""The layer's keyword the 0.5.23 loop passes (``llama.py``, ``LlamaDecoderLayer.forward``)."""


@dataclass(frozen=True)
class Reference:
    """The statements a patch copies from the release's ``llama.py``.

    Attributes:
        idiom: :attr:`Idiom.APPEND` or :attr:`Idiom.BOUNDARY`.
        accumulator: ``aux_hidden_states = ...`` before the loop.
        capture: APPEND: the ``if i in self.layers_to_capture: ...append(...)`` statement first in the loop;
            BOUNDARY: the ``capture_output=...`` argument of the layer call.
        tail: the two statements ending the backbone's ``forward``.
        backbone_list: ``self.layers_to_capture = []``.
        flag: ``self.capture_aux_hidden_states = False``.
        unpack: ``aux_hidden_states = None`` and ``if self.capture_aux_hidden_states: ...``.
        setter: ``set_eagle3_layers_to_capture``, its annotations dropped (their names need not be imported where
            it goes); its body as the release writes it.
        embed_and_head: ``get_embed_and_head``.
        imports: BOUNDARY: the module-level ``from ... import AuxHiddenStateList``; else None.
        layer_param: BOUNDARY: the layer's ``capture_output=None`` parameter; else None.
        layer_keyword: BOUNDARY: the ``capture=capture_output`` argument of ``self.attn_boundary.prepare``; else None.
        layer_stream: :func:`stream` of ``LlamaDecoderLayer.forward``: a patched class's layer must have the same.
        unguarded: the setter of a wrapper without pipeline parallelism, copied from a native class of the same
            release that never names ``pp_group`` and whose setter body is Llama's without its guard statement
            (:func:`unguarded_setter`); None when the release has none.
        unguarded_from: where ``unguarded`` was read (``gemma3_causal.Gemma3ForCausalLM``).
        append_natives: the native backbones of the release that capture by list append in a loop carrying
            ``hidden_states, residual = ...`` (:func:`append_natives`), each ``module.Class`` with its decoder
            layer's :func:`stream`.
    """

    idiom: Idiom
    accumulator: cst.SimpleStatementLine
    capture: cst.BaseStatement | cst.Arg
    tail: tuple[cst.BaseStatement, cst.BaseStatement]
    backbone_list: cst.SimpleStatementLine
    flag: cst.SimpleStatementLine
    unpack: tuple[cst.BaseStatement, cst.BaseStatement]
    setter: cst.FunctionDef
    embed_and_head: cst.FunctionDef
    imports: cst.SimpleStatementLine | None = None
    layer_param: cst.Param | None = None
    layer_keyword: cst.Arg | None = None
    layer_stream: tuple[str, ...] = ()
    unguarded: cst.FunctionDef | None = None
    unguarded_from: str = ""
    append_natives: tuple[tuple[str, tuple[str, ...]], ...] = ()


RESIDUAL = "residual"
"""The list-append layer's second stream (``llama.py`` 0.5.14/0.5.16: ``hidden_states, residual = layer(...)``)."""


def stream(forward: ast.FunctionDef, idiom: Idiom) -> tuple[str, ...]:
    """How a decoder layer's ``forward`` (an :mod:`ast` node) handles the residual stream the capture reads.

    List append: the dump of each top-level statement that names ``residual`` (Llama's: ``if residual is None: ...
    else: ... = self.input_layernorm(hidden_states, residual)``, the post-attention norm, ``return hidden_states,
    residual``); the appended ``hidden_states + residual`` is the stream only where the layer keeps it so. Capture
    boundary: the ``self.<x>_boundary.<method>`` calls in source order (Llama's: ``attn_boundary.prepare``,
    ``attn_boundary.finish``, ``ffn_boundary.prepare``, ``ffn_boundary.finish``).
    """
    if idiom is Idiom.APPEND:
        return tuple(
            ast.dump(s) for s in forward.body if any(isinstance(n, ast.Name) and n.id == RESIDUAL for n in ast.walk(s))
        )
    calls = sorted(
        (n.lineno, n.col_offset, f"{n.func.value.attr}.{n.func.attr}")
        for n in ast.walk(forward)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Attribute)
        and n.func.value.attr.endswith("_boundary")
        and isinstance(n.func.value.value, ast.Name)
        and n.func.value.value.id == "self"
    )
    return tuple(name for _, _, name in calls)


def layer_stream(cls: cst.ClassDef, idiom: Idiom) -> tuple[str, ...] | None:
    """:func:`stream` of a libcst class's one ``forward``; None when it has none, or several."""
    tree = ast.parse(cst.Module([]).code_for_node(cls))
    forwards = [n for n in tree.body[0].body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    return stream(forwards[0], idiom) if len(forwards) == 1 else None


def body_of(node: cst.FunctionDef | cst.ClassDef | cst.For | cst.If) -> list[cst.BaseStatement]:
    """The statements of an indented block (``[]`` for a one-line body)."""
    return list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []


def one_method(cls: cst.ClassDef, name: str) -> cst.FunctionDef:
    """``cls``'s ``def name`` (exactly one). Raises Refusal otherwise."""
    return exactly_one(method_of(cls, name), f"'def {name}' in class {cls.name.value}")


def _assigned(stmt: cst.CSTNode) -> cst.BaseAssignTargetExpression | None:
    """The one target of the line ``<target> = ...`` (None: ``stmt`` is no such line)."""
    if (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Assign)
        and len(stmt.body[0].targets) == 1
    ):
        return stmt.body[0].targets[0].target
    return None


def assigns_self(stmt: cst.CSTNode, attr: str) -> bool:
    """``stmt`` is the line ``self.<attr> = ...``."""
    target = _assigned(stmt)
    return target is not None and t.is_self_attr(target, attr)


def assigns_name(stmt: cst.CSTNode, name: str) -> bool:
    """``stmt`` is the line ``<name> = ...``."""
    target = _assigned(stmt)
    return target is not None and t.is_name(target, name)


def is_layer_loop(stmt: cst.CSTNode) -> bool:
    """``stmt`` is ``for i in range(self.start_layer, self.end_layer):`` (:data:`contract.LAYER_RANGE`)."""
    if not (isinstance(stmt, cst.For) and t.is_name(stmt.target, "i") and isinstance(stmt.iter, cst.Call)):
        return False
    call = stmt.iter
    return (
        t.is_name(call.func, "range")
        and len(call.args) == 2
        and all(a.keyword is None and t.is_self_attr(a.value, n) for a, n in zip(call.args, c.LAYER_RANGE))
    )


def is_legacy_loop(stmt: cst.CSTNode) -> bool:
    """``stmt`` is ``for i in range(len(self.layers)):`` or ``for i, layer in enumerate(self.layers):``, the loop of
    the classes without pipeline parallelism (0.5.23: ``granite.py``, ``GraniteModel.forward``; ``olmo.py``;
    ``gemma3_causal.py``, ``Gemma3TextModel.forward``): ``i`` is the layer's index, as in Llama's loop."""
    if not (isinstance(stmt, cst.For) and isinstance(stmt.iter, cst.Call) and len(stmt.iter.args) == 1):
        return False
    func, arg = stmt.iter.func, stmt.iter.args[0].value
    if t.is_name(func, "enumerate"):
        target = stmt.target
        return (
            isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and t.is_name(target.elements[0].value, "i")
            and t.is_self_attr(arg, "layers")
        )
    return (
        t.is_name(func, "range")
        and t.is_name(stmt.target, "i")
        and isinstance(arg, cst.Call)
        and t.is_name(arg.func, "len")
        and len(arg.args) == 1
        and t.is_self_attr(arg.args[0].value, "layers")
    )


def loop_of(forward: cst.FunctionDef, where: str, legacy: bool = False) -> tuple[int, cst.For]:
    """The index and node of the one top-level layer loop of ``forward`` (with ``legacy``, also
    :func:`is_legacy_loop`'s forms). Raises Refusal otherwise."""
    found = [(i, s) for i, s in enumerate(body_of(forward)) if is_layer_loop(s) or (legacy and is_legacy_loop(s))]
    what = "'for i in range(self.start_layer, self.end_layer)'" + (" or 'for i in range(len(self.layers))'" * legacy)
    i, loop = exactly_one(found, f"top-level {what} in {where}")
    return i, loop  # type: ignore[return-value]


def _calls(node: cst.CSTNode, func) -> list[cst.Call]:
    return [n for n in t.walk(node) if isinstance(n, cst.Call) and func(n.func)]


def is_attn_prepare(func: cst.CSTNode) -> bool:
    """``func`` is ``self.attn_boundary.prepare`` (:data:`contract.ATTN_BOUNDARY`)."""
    holder, method = c.ATTN_BOUNDARY
    return isinstance(func, cst.Attribute) and func.attr.value == method and t.is_self_attr(func.value, holder)


def _boundary_parts(layer: cst.ClassDef) -> tuple[cst.Param, cst.Arg]:
    forward = one_method(layer, "forward")
    params = [p for p in forward.params.params if p.name.value == CAPTURE_PARAM]
    param = exactly_one(params, f"parameter {CAPTURE_PARAM} of {layer.name.value}.forward")
    prepare = exactly_one(_calls(forward, is_attn_prepare), f"self.attn_boundary.prepare(...) in {layer.name.value}")
    keyword = [a for a in prepare.args if a.keyword is not None and t.is_name(a.value, CAPTURE_PARAM)]
    return param, exactly_one(keyword, f"'=capture_output' argument of {layer.name.value}'s prepare")


def _strip_annotations(fn: cst.FunctionDef) -> cst.FunctionDef:
    tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    params = fn.params.with_changes(
        params=[
            p.with_changes(annotation=None, **({"equal": tight} if p.default is not None else {}))
            for p in fn.params.params
        ]
    )
    return fn.with_changes(params=params, returns=None)


def _appends(node: cst.CSTNode) -> bool:
    """``node`` is a call ``aux_hidden_states.append(...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "append"
        and t.is_name(node.func.value, ACCUMULATOR)
    )


def _capture(loop: cst.For) -> tuple[Idiom, cst.BaseStatement | cst.Arg]:
    """The loop's capture: an ``if i in self.layers_to_capture:`` statement (APPEND) or a ``capture_output=``
    argument (BOUNDARY). Raises Refusal when it is neither, or both."""
    ifs = [s for s in body_of(loop) if isinstance(s, cst.If) and any(_appends(n) for n in t.walk(s))]
    args = [a for n in t.walk(loop) if isinstance(n, cst.Call) for a in n.args if t.is_name(a.keyword, CAPTURE_PARAM)]
    if len(ifs) + len(args) != 1:
        raise Refusal(
            f"expected exactly 1 capture in {c.REFERENCE_CLASSES[1]}'s layer loop (an append or a "
            f"{CAPTURE_PARAM}= argument), found {len(ifs) + len(args)}"
        )
    return (Idiom.APPEND, ifs[0]) if ifs else (Idiom.BOUNDARY, args[0])


def _import_of(module: cst.Module, name: str) -> cst.SimpleStatementLine:
    found = [
        s
        for s in module.body
        if isinstance(s, cst.SimpleStatementLine)
        and isinstance(s.body[0], cst.ImportFrom)
        and not isinstance(s.body[0].names, cst.ImportStar)
        and any(t.is_name(a.name, name) for a in s.body[0].names)
    ]
    return exactly_one(found, f"module-level import of {name}")


SETTER_MARK = ("def " + c.CAPTURE_SETTER).encode()
"""Bytes a model file holds when it writes the setter: only those files are parsed (:func:`_natives_of`)."""


def names_pp(node: ast.AST) -> bool:
    """``node`` names :data:`contract.PP_GROUP` (an attribute or a name)."""
    return any(
        (isinstance(n, ast.Attribute) and n.attr == c.PP_GROUP) or (isinstance(n, ast.Name) and n.id == c.PP_GROUP)
        for n in ast.walk(node)
    )


def pp_guards(body: list[ast.stmt]) -> list[ast.If]:
    """The statements of ``body`` of the form ``if <names pp_group>: return`` (Llama's setter opens with ``if not
    self.pp_group.is_last_rank: return``, ``llama.py``): what a wrapper without pipeline parallelism leaves out
    (the setter the codemod writes and the one the chain check accepts). Raises nothing."""
    return [
        s
        for s in body
        if isinstance(s, ast.If)
        and names_pp(s.test)
        and len(s.body) == 1
        and isinstance(s.body[0], ast.Return)
        and s.body[0].value is None
        and not s.orelse
    ]


def _appended_in_residual_loop(fn: ast.FunctionDef) -> bool:
    """``fn`` loops with ``hidden_states, residual = ...`` and ``if ...: aux_hidden_states.append(...)`` in the loop."""
    for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For)):
        pairs = [
            s
            for s in loop.body
            if isinstance(s, ast.Assign)
            and isinstance(s.targets[0], ast.Tuple)
            and [getattr(e, "id", None) for e in s.targets[0].elts] == ["hidden_states", RESIDUAL]
        ]
        appends = [
            s
            for s in loop.body
            if isinstance(s, ast.If)
            and any(
                isinstance(n, ast.Attribute) and n.attr == "append" and getattr(n.value, "id", None) == ACCUMULATOR
                for n in ast.walk(s)
            )
        ]
        if pairs and appends:
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _natives_of(path: str, mtime_ns: int, size: int) -> tuple[tuple, tuple]:
    """One model file's native facts, cached on its path, mtime and size: the classes that define the setter and
    never name ``pp_group`` (each name and the dump of the setter's body), and the backbones whose loop appends in
    a residual loop (:func:`_appended_in_residual_loop`; each name and its decoder layer's :func:`stream`, the
    class of the file its ``__init__`` calls whose ``forward`` takes ``residual``)."""
    data = Path(path).read_bytes()
    if SETTER_MARK not in data:
        return (), ()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return (), ()
    classes = {k.name: k for k in tree.body if isinstance(k, ast.ClassDef)}

    def method(k: ast.ClassDef, name: str) -> ast.FunctionDef | None:
        found = [f for f in k.body if isinstance(f, ast.FunctionDef) and f.name == name]
        return found[0] if len(found) == 1 else None

    unguarded, appending = [], []
    for k in classes.values():
        setter = method(k, c.CAPTURE_SETTER)
        if setter is not None and not names_pp(k):
            unguarded.append((k.name, ast.dump(ast.Module(setter.body, []))))
        forward, init = method(k, "forward"), method(k, "__init__")
        if forward is None or init is None or not _appended_in_residual_loop(forward):
            continue
        called = {n.func.id for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        for name in sorted(called & set(classes)):
            f = method(classes[name], "forward")
            if f is not None and any(a.arg == RESIDUAL for a in f.args.args):
                appending.append((f"{k.name} ({name})", stream(f, Idiom.APPEND)))
    return tuple(unguarded), tuple(appending)


def _release_natives(models: Path) -> list[tuple[str, tuple, tuple]]:
    """:func:`_natives_of` of each file of ``models`` (the release's ``sglang/srt/models/``), in name order."""
    out = []
    for p in sorted(models.glob("*.py")):
        st = p.stat()
        out.append((p.stem, *_natives_of(str(p), st.st_mtime_ns, st.st_size)))
    return out


def unguarded_setter(models: Path, llama_setter: cst.FunctionDef) -> tuple[cst.FunctionDef | None, str]:
    """The setter a wrapper without pipeline parallelism gets, read from the release (issue 44).

    In: the release's models folder and Llama's setter (``llama.py``,
    ``LlamaForCausalLM.set_eagle3_layers_to_capture``).
    Out: the setter of the first native class (files in name order) that never names ``pp_group`` and whose setter
    body is, as an ``ast`` dump, Llama's without its one guard ``if not self.pp_group.is_last_rank: return`` (the
    same ids, default and flag), annotations dropped; and ``module.Class`` it came from. ``(None, "")`` when Llama's
    setter has no such guard or no native matches (then a wrapper without ``self.pp_group`` is refused). Read on
    0.5.14, 0.5.16, 0.5.23: ``gemma3_causal.py``, ``Gemma3ForCausalLM``. Errors: none raised.
    """
    body = ast.parse(cst.Module([]).code_for_node(llama_setter)).body[0].body  # type: ignore[attr-defined]
    guards = pp_guards(body)
    if len(guards) != 1:
        return None, ""
    want = ast.dump(ast.Module([s for s in body if s is not guards[0]], []))
    for stem, unguarded, _ in _release_natives(models):
        for name, dump in unguarded:
            if dump == want:
                st = (models / f"{stem}.py").stat()
                return _setter_of(str(models / f"{stem}.py"), st.st_mtime_ns, st.st_size, name), f"{stem}.{name}"
    return None, ""


@functools.lru_cache(maxsize=64)
def _setter_of(path: str, mtime_ns: int, size: int, name: str) -> cst.FunctionDef:
    """Class ``name``'s setter in the file at ``path``, annotations dropped (cached: libcst nodes are immutable)."""
    module = cst.parse_module(Path(path).read_bytes())
    return _strip_annotations(one_method(top_level_class(module, name), c.CAPTURE_SETTER))


def append_natives(models: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The release's native backbones that capture by list append in a residual loop, as ``module.Class (Layer)``
    with the layer's :func:`stream` (0.5.23: only ``gemma3_causal.Gemma3TextModel``, which appends
    ``hidden_states`` after ``Gemma3DecoderLayer``). In: the models folder. Errors: none raised."""
    return tuple((f"{stem}.{name}", s) for stem, _, appending in _release_natives(models) for name, s in appending)


def read_reference(source: bytes, models: Path | None = None) -> Reference:
    """The statements of the release's ``llama.py`` (``source``, its bytes) a patch copies; with ``models`` (the
    release's ``sglang/srt/models/`` folder) also the unguarded setter and the list-append natives read there.

    Raises:
        Refusal: the file is not in the shape the module docstring describes (a statement found zero times or
            twice); the message names it.
    """
    module = cst.parse_module(source)
    wrapper, backbone, layer = (top_level_class(module, n) for n in c.REFERENCE_CLASSES)
    forward = one_method(backbone, "forward")
    at, loop = loop_of(forward, f"{backbone.name.value}.forward")
    statements = body_of(forward)
    if not (at > 0 and assigns_name(statements[at - 1], ACCUMULATOR)):
        raise Refusal(f"expected '{ACCUMULATOR} = ...' just before the loop of {backbone.name.value}.forward")
    idiom, capture = _capture(loop)
    init = one_method(backbone, "__init__")
    listed = exactly_one([s for s in body_of(init) if assigns_self(s, c.LAYERS_TO_CAPTURE)], "layers_to_capture = []")
    flags = [s for s in body_of(one_method(wrapper, "__init__")) if assigns_self(s, c.CAPTURE_FLAG)]
    wrapped = body_of(one_method(wrapper, "forward"))
    unpack_at = [i for i, s in enumerate(wrapped) if assigns_name(s, ACCUMULATOR)]
    at_unpack = exactly_one(unpack_at, f"'{ACCUMULATOR} = None' in {wrapper.name.value}.forward")
    boundary = _boundary_parts(layer) if idiom is Idiom.BOUNDARY else (None, None)
    setter = one_method(wrapper, c.CAPTURE_SETTER)
    unguarded, unguarded_from = unguarded_setter(models, setter) if models is not None else (None, "")
    return Reference(
        idiom=idiom,
        accumulator=statements[at - 1],  # type: ignore[arg-type]
        capture=capture,
        tail=(statements[-2], statements[-1]),
        backbone_list=listed,  # type: ignore[arg-type]
        flag=exactly_one(flags, f"self.{c.CAPTURE_FLAG} = False"),  # type: ignore[arg-type]
        unpack=(wrapped[at_unpack], wrapped[at_unpack + 1]),
        setter=_strip_annotations(setter),
        embed_and_head=one_method(wrapper, c.EMBED_AND_HEAD),
        imports=_import_of(module, c.ACCUMULATORS[0]) if idiom is Idiom.BOUNDARY else None,
        layer_param=boundary[0],
        layer_keyword=boundary[1],
        layer_stream=layer_stream(layer, idiom) or (),
        unguarded=unguarded,
        unguarded_from=unguarded_from,
        append_natives=append_natives(models) if models is not None and idiom is Idiom.BOUNDARY else (),
    )


__all__ = [
    "ACCUMULATOR",
    "CAPTURE_PARAM",
    "Reference",
    "append_natives",
    "body_of",
    "is_layer_loop",
    "is_legacy_loop",
    "names_pp",
    "pp_guards",
    "layer_stream",
    "read_reference",
    "stream",
    "unguarded_setter",
]
