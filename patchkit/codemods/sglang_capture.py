"""EAGLE-3 for one SGLang generative class of the standard shape, written in the release's own idiom (issue 44).

The standard shape, each anchor found exactly once or the transform refuses (:class:`~patchkit.codemods.base.Refusal`,
naming the anchor and its count), as ``mixtral.py`` has it on 0.5.14, 0.5.16 and 0.5.23:

- the **wrapper** (the registered class): module-level, one ``__init__`` that sets ``self.model = <Backbone>(...)``,
  ``self.config``, ``self.pp_group`` and ``self.lm_head``; one ``forward`` with one top-level
  ``hidden_states = self.model(...)`` and one ``self.logits_processor(input_ids, hidden_states, self.lm_head,
  forward_batch)`` of four positional arguments;
- the **backbone**: a module-level class of the same file, one ``__init__`` that sets ``self.embed_tokens``, one
  ``forward`` ending in a top-level ``return`` with one top-level ``for i in range(self.start_layer,
  self.end_layer)`` loop; list append (0.5.14, 0.5.16): the loop body holds ``hidden_states, residual = ...``;
  capture boundary (0.5.23): the loop body is the one line ``hidden_states = self.layers[i](...)``;
- capture boundary only, the **decoder layer**: the one class of the file the backbone's ``__init__`` calls whose
  ``forward`` calls ``self.attn_boundary.prepare(hidden_states, forward_batch)`` once, as Llama's layer does;
- none of ``aux_hidden_states``, ``capture_output``, ``layers_to_capture``, ``capture_aux_hidden_states`` is used in
  these classes yet.

What is written is copied from the release's ``llama.py`` (:mod:`patchkit.codemods.sglang_reference`), in the places
Llama has it: the accumulator before the loop, the capture (first in the loop, or the layer call's
``capture_output=``), the two closing statements of the backbone's ``forward`` (a ``return <expr>`` other than
``return hidden_states`` becomes ``hidden_states = <expr>`` first), ``self.layers_to_capture = []`` last in the
backbone's ``__init__``, the flag last in the wrapper's ``__init__``, the unpack after ``self.model(...)``,
``aux_hidden_states`` as the logits processor's fifth argument, ``set_eagle3_layers_to_capture`` and (when the class
lacks it) ``get_embed_and_head`` at the end of the wrapper; 0.5.23 also gets the ``AuxHiddenStateList`` import after
the module's last top-level import, and the layer its ``capture_output=None`` parameter and ``capture=capture_output``.
"""

from __future__ import annotations

import ast

import libcst as cst

from patchkit.codemods import tree as t
from patchkit.codemods.base import (
    Refusal,
    exactly_one,
    insert_into_sequence,
    method_of,
    replace_top_level,
    top_level_class,
)
from patchkit.codemods.sglang_reference import (
    ACCUMULATOR,
    CAPTURE_PARAM,
    RESIDUAL,
    Reference,
    assigns_name,
    assigns_self,
    body_of,
    is_attn_prepare,
    is_legacy_loop,
    layer_stream,
    loop_of,
    names_pp,
    one_method,
)
from patchkit.sglang import contract as c
from patchkit.sglang.states import Idiom

INIT_MODEL = "_init_model"
"""The method Llama's wrapper builds its backbone with, ``self.model = self._init_model(...)`` (``llama.py``,
``LlamaForCausalLM._init_model``; ``exaone4.py`` does the same)."""

UNUSED = (ACCUMULATOR, CAPTURE_PARAM, c.LAYERS_TO_CAPTURE, c.CAPTURE_FLAG)
"""Names the patch introduces: a class that uses one already is not in the shape (never guess)."""


def append_arg(args, arg: cst.Arg) -> list[cst.Arg]:
    """``args`` with ``arg`` last, on the last one's line: the whitespace before the closing parenthesis (a newline
    in a call laid out over lines) moves to ``arg``, so ``f(\\n    a, b\\n)`` becomes ``f(\\n    a, b, arg\\n)``;
    after a trailing comma ``arg`` gets its own line and comma, as the others have."""
    args = list(args)
    if not args:
        return [arg]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # one per line with a trailing comma: the same for the new one
        return insert_into_sequence(args, len(args), arg)
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    moved = arg.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    return [*args[:-1], last.with_changes(comma=space, whitespace_after_arg=cst.SimpleWhitespace("")), moved]


def _with_body(node, statements: list) -> cst.CSTNode:
    return node.with_changes(body=node.body.with_changes(body=statements))


def _replace_method(cls: cst.ClassDef, old: cst.FunctionDef, new: cst.FunctionDef) -> cst.ClassDef:
    return _with_body(cls, [new if s is old else s for s in body_of(cls)])  # type: ignore[return-value]


def _sets(fn: cst.FunctionDef, attr: str) -> bool:
    return any(assigns_self(s, attr) for s in t.walk(fn))


def _clean(node: cst.CSTNode) -> cst.BaseExpression:
    """An expression of the reference written on one line (Llama's spans lines inside its call's parentheses)."""
    return cst.parse_expression(" ".join(cst.Module([]).code_for_node(node).split()))


def _unused(cls: cst.ClassDef) -> None:
    """Refuse a class that names one of :data:`UNUSED` (a name, an attribute, a keyword or a parameter: each is a
    ``Name`` node in libcst)."""
    found = [n for n in UNUSED if any(t.is_name(x, n) for x in t.walk(cls))]
    if found:
        raise Refusal(f"class {cls.name.value} already uses {', '.join(found)}: part of a capture is there")


def parts(
    module: cst.Module, wrapper_name: str, ref: Reference
) -> tuple[cst.ClassDef, cst.ClassDef, cst.ClassDef | None]:
    """The wrapper, its backbone and (capture boundary) its decoder layer, checked against the shape.

    Raises:
        Refusal: an anchor of the module docstring found zero times or twice.
    """
    wrapper = top_level_class(module, wrapper_name)
    init = one_method(wrapper, "__init__")
    for attr in ("config", "lm_head"):
        if not _sets(init, attr):
            raise Refusal(f"expected 'self.{attr} = ...' in {wrapper_name}.__init__, found 0")
    built = [
        s.body[0].value.func
        for s in t.walk(init)
        if assigns_self(s, "model") and isinstance(s.body[0].value, cst.Call)  # type: ignore[union-attr]
    ]
    func = exactly_one(built, f"'self.model = <Backbone>(...)' in {wrapper_name}.__init__")
    if t.is_self_attr(func, INIT_MODEL):  # Llama's own form: the backbone built by a method of the wrapper
        returned = [n.value.func for n in t.walk(one_method(wrapper, INIT_MODEL)) if isinstance(n, cst.Return)]
        func = exactly_one(returned, f"'return <Backbone>(...)' in {wrapper_name}.{INIT_MODEL}")  # type: ignore[union-attr]
    if not isinstance(func, cst.Name):
        raise Refusal(f"{wrapper_name} builds self.model from an expression, not a class of its module")
    backbone = top_level_class(module, func.value)
    if not _sets(one_method(backbone, "__init__"), "embed_tokens"):
        raise Refusal(f"expected 'self.embed_tokens = ...' in {func.value}.__init__, found 0")
    for cls in (wrapper, backbone):
        _unused(cls)
    if _legacy(backbone) and ref.idiom is Idiom.BOUNDARY:
        _refuse_legacy(module, backbone, ref)
    layer = _layer(module, backbone, ref.idiom)
    _unused(layer)
    if layer_stream(layer, ref.idiom) != ref.layer_stream:
        what = "residual statements" if ref.idiom is Idiom.APPEND else "boundary calls"
        raise Refusal(
            f"the {what} of {layer.name.value}.forward differ from {c.REFERENCE_CLASSES[2]}.forward's: "
            "the capture would not read the same stream"
        )
    return wrapper, backbone, layer if ref.idiom is Idiom.BOUNDARY else None


def _legacy(backbone: cst.ClassDef) -> bool:
    """The backbone's ``forward`` loops the older way (:func:`~patchkit.codemods.sglang_reference.is_legacy_loop`)."""
    return any(is_legacy_loop(s) for f in method_of(backbone, "forward") for s in body_of(f))


def _refuse_legacy(module: cst.Module, backbone: cst.ClassDef, ref: Reference) -> None:
    """A legacy loop on a capture-boundary release: its layers return ``hidden_states, residual`` and take no
    ``capture_output``, so Llama's boundary does not fit; the list-append form is written only when a native class of
    the same release appends in a residual loop after a decoder layer with the same residual statements, so the
    appended tensor means the same. On 0.5.23 none does (``ref.append_natives``: only ``gemma3_causal``'s
    ``Gemma3TextModel``, after ``Gemma3DecoderLayer``), so this always refuses there, naming what it compared.

    Raises:
        Refusal: always (the one line names the loop, the natives read and why none fits).
    """
    name = backbone.name.value
    stream = layer_stream(_layer(module, backbone, Idiom.APPEND), Idiom.APPEND)
    same = [where for where, s in ref.append_natives if s == stream]
    read = ", ".join(where for where, _ in ref.append_natives) or "none"
    if same:  # a native reference exists: its form is the next to write (none on the releases read)
        raise Refusal(f"{name} loops over range(len(self.layers)); the list-append form of {same[0]} is not written")
    raise Refusal(
        f"{name} loops over range(len(self.layers)) with layers returning (hidden_states, residual), and this "
        f"release's llama.py captures at the layer boundary; no native class of the release appends in such a loop "
        f"after a layer with the same residual statements (list-append natives read: {read}): not invented"
    )


def _setter(wrapper: cst.ClassDef, backbone: cst.ClassDef, ref: Reference) -> cst.FunctionDef:
    """Llama's setter when the wrapper sets ``self.pp_group`` (its guard reads it); else the release's own unguarded
    form (``ref.unguarded``), only when neither class names ``pp_group``.

    Raises:
        Refusal: no ``self.pp_group`` but ``pp_group`` named elsewhere, or no unguarded native in the release.
    """
    name = wrapper.name.value
    if _sets(one_method(wrapper, "__init__"), c.PP_GROUP):
        return ref.setter
    for cls in (wrapper, backbone):
        if names_pp(ast.parse(cst.Module([]).code_for_node(cls))):
            raise Refusal(f"expected 'self.pp_group = ...' in {name}.__init__, found 0 (but {cls.name.value} names it)")
    if ref.unguarded is None:
        raise Refusal(
            f"{name} sets no self.pp_group, and no native class of this release writes {c.CAPTURE_SETTER} "
            "without the pipeline guard to copy"
        )
    return ref.unguarded


def _layer(module: cst.Module, backbone: cst.ClassDef, idiom: Idiom) -> cst.ClassDef:
    """The backbone's decoder layer: the one class of ``module`` its ``__init__`` calls whose ``forward`` takes
    ``residual`` (list append) or prepares the attention boundary (capture boundary), as Llama's layer does."""
    init = one_method(backbone, "__init__")
    called = {n.func.value for n in t.walk(init) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)}
    classes = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value in called]

    def fits(k: cst.ClassDef) -> bool:
        for m in method_of(k, "forward"):
            if idiom is Idiom.APPEND and any(p.name.value == RESIDUAL for p in m.params.params):
                return True
            if idiom is Idiom.BOUNDARY and any(isinstance(n, cst.Call) and is_attn_prepare(n.func) for n in t.walk(m)):
                return True
        return False

    what = "taking residual" if idiom is Idiom.APPEND else "calling self.attn_boundary.prepare"
    return exactly_one([k for k in classes if fits(k)], f"decoder layer of {backbone.name.value} {what}")


def _backbone(backbone: cst.ClassDef, ref: Reference) -> cst.ClassDef:
    """The backbone with the list, the accumulator, the loop's capture and the closing statements."""
    init = one_method(backbone, "__init__")
    init_body = body_of(init)
    if isinstance(init_body[-1], cst.SimpleStatementLine) and isinstance(init_body[-1].body[0], cst.Return):
        raise Refusal(f"{backbone.name.value}.__init__ ends in a return")
    new_init = _with_body(init, [*init_body, ref.backbone_list])
    forward = one_method(backbone, "forward")
    where = f"{backbone.name.value}.forward"
    at, loop = loop_of(forward, where, legacy=ref.idiom is Idiom.APPEND)
    statements = body_of(forward)
    last = statements[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return) and last.body[0].value):
        raise Refusal(f"expected {where} to end in a top-level 'return <expr>'")
    value = last.body[0].value
    ending = (
        []
        if t.is_name(value, "hidden_states")
        else [
            cst.parse_statement(f"hidden_states = {cst.Module([]).code_for_node(value)}\n").with_changes(
                leading_lines=last.leading_lines
            )
        ]
    )
    new_loop = _append_capture(loop, ref, where) if ref.idiom is Idiom.APPEND else _boundary_capture(loop, ref, where)
    accumulator = ref.accumulator.with_changes(leading_lines=loop.leading_lines)
    new_loop = new_loop.with_changes(leading_lines=())
    body = [*statements[:at], accumulator, new_loop, *statements[at + 1 : -1], *ending, *ref.tail]
    new_forward = _with_body(forward, body)
    return _replace_method(_replace_method(backbone, init, new_init), forward, new_forward)  # type: ignore[arg-type]


def _append_capture(loop: cst.For, ref: Reference, where: str) -> cst.For:
    """List append: the loop must carry ``hidden_states, residual = ...``, the names the appended sum reads."""
    stream = [
        s
        for s in body_of(loop)
        if isinstance(s, cst.SimpleStatementLine)
        and isinstance(s.body[0], cst.Assign)
        and t.names_tuple(s.body[0].targets[0].target, "hidden_states", "residual")
    ]
    exactly_one(stream, f"'hidden_states, residual = ...' in the loop of {where}")
    return _with_body(loop, [ref.capture, *body_of(loop)])  # type: ignore[return-value]


def _boundary_capture(loop: cst.For, ref: Reference, where: str) -> cst.For:
    """Capture boundary: the loop is the line ``hidden_states = self.layers[i](...)``: its call gets the argument."""
    statements = body_of(loop)
    call = None
    if len(statements) == 1 and assigns_name(statements[0], "hidden_states"):
        value = statements[0].body[0].value  # type: ignore[union-attr]
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Subscript)
            and t.is_self_attr(value.func.value, "layers")
        ):
            call = value
    if call is None:
        raise Refusal(f"expected the loop of {where} to be the one line 'hidden_states = self.layers[i](...)'")
    arg = cst.Arg(
        keyword=cst.Name(CAPTURE_PARAM),
        value=_clean(ref.capture.value),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )  # type: ignore[union-attr]
    new_call = call.with_changes(args=append_arg(call.args, arg))
    return _with_body(loop, [statements[0].with_changes(body=[statements[0].body[0].with_changes(value=new_call)])])  # type: ignore[return-value]


def _layer_capture(layer: cst.ClassDef, ref: Reference) -> cst.ClassDef:
    """Capture boundary: the layer's ``forward`` takes ``capture_output=None`` last and hands ``capture=capture_output``
    to its one ``self.attn_boundary.prepare(hidden_states, forward_batch)``, as Llama's layer does."""
    forward = one_method(layer, "forward")
    where = f"{layer.name.value}.forward"
    params = forward.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.star_kwarg is not None or params.kwonly_params:
        raise Refusal(f"{where} takes *args, **kwargs or keyword-only parameters")
    prepare = exactly_one(
        [n for n in t.walk(forward) if isinstance(n, cst.Call) and is_attn_prepare(n.func)],
        f"self.attn_boundary.prepare(...) in {where}",
    )
    if [cst.Module([]).code_for_node(a.value) for a in prepare.args] != ["hidden_states", "forward_batch"] or any(
        a.keyword for a in prepare.args
    ):
        raise Refusal(f"expected 'self.attn_boundary.prepare(hidden_states, forward_batch)' in {where}")
    keyword = ref.layer_keyword.with_changes(  # type: ignore[union-attr]
        comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace("")
    )
    new_prepare = prepare.with_changes(args=append_arg(prepare.args, keyword))
    param = ref.layer_param.with_changes(comma=cst.MaybeSentinel.DEFAULT)  # type: ignore[union-attr]
    new_params = params.with_changes(params=insert_into_sequence(list(params.params), len(params.params), param))
    new_forward = t.replace(forward, prepare, new_prepare).with_changes(params=new_params)  # type: ignore[union-attr]
    return _replace_method(layer, forward, new_forward)  # type: ignore[arg-type]


def _wrapper(wrapper: cst.ClassDef, ref: Reference, setter: cst.FunctionDef) -> cst.ClassDef:
    """The wrapper with the flag, the unpack, the logits processor's fifth argument and the two methods."""
    name = wrapper.name.value
    init = one_method(wrapper, "__init__")
    init_body = body_of(init)
    if isinstance(init_body[-1], cst.SimpleStatementLine) and isinstance(init_body[-1].body[0], cst.Return):
        raise Refusal(f"{name}.__init__ ends in a return")
    forward = one_method(wrapper, "forward")
    statements = body_of(forward)
    calls = [
        i
        for i, s in enumerate(statements)
        if assigns_name(s, "hidden_states")
        and isinstance(s.body[0].value, cst.Call)  # type: ignore[union-attr]
        and t.is_self_attr(s.body[0].value.func, "model")  # type: ignore[union-attr]
    ]
    at = exactly_one(calls, f"top-level 'hidden_states = self.model(...)' in {name}.forward")
    logits = [n for n in t.walk(forward) if isinstance(n, cst.Call) and t.is_self_attr(n.func, c.LOGITS)]
    call = exactly_one(logits, f"self.{c.LOGITS}(...) in {name}.forward")
    if len(call.args) != c.LOGITS_ARGS or any(a.keyword or a.star for a in call.args):
        raise Refusal(
            f"expected self.{c.LOGITS}(...) in {name}.forward to take {c.LOGITS_ARGS} positional arguments, "
            f"found {len(call.args)} arguments"
        )
    new_call = call.with_changes(args=append_arg(call.args, cst.Arg(cst.Name(ACCUMULATOR))))
    body = [*statements[: at + 1], *ref.unpack, *statements[at + 1 :]]
    new_forward = t.replace(_with_body(forward, body), call, new_call)
    added = [setter] + ([] if method_of(wrapper, c.EMBED_AND_HEAD) else [ref.embed_and_head])
    out = _replace_method(
        _replace_method(wrapper, init, _with_body(init, [*init_body, ref.flag])), forward, new_forward
    )  # type: ignore[arg-type]
    return _with_body(out, [*body_of(out), *added])  # type: ignore[return-value]


def _with_import(module: cst.Module, line: cst.SimpleStatementLine) -> cst.Module:
    """``module`` with ``line`` after its last top-level import statement (before the first class or def)."""
    body = list(module.body)
    first = next((i for i, s in enumerate(body) if isinstance(s, cst.ClassDef | cst.FunctionDef)), len(body))
    imports = [
        i
        for i, s in enumerate(body[:first])
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Import | cst.ImportFrom)
    ]
    if not imports:
        raise Refusal("expected a module-level import before the first class, found 0")
    return module.with_changes(
        body=[*body[: imports[-1] + 1], line.with_changes(leading_lines=()), *body[imports[-1] + 1 :]]
    )


def transform(module: cst.Module, wrapper_name: str, ref: Reference) -> cst.Module:
    """``module`` with EAGLE-3 written for ``wrapper_name`` (the module docstring), in ``ref``'s idiom.

    Args:
        module: the parsed file that holds the wrapper.
        wrapper_name: the registered class.
        ref: what the release's ``llama.py`` writes (:func:`patchkit.codemods.sglang_reference.read_reference`).
    Returns:
        The rewritten module; the caller writes its ``code`` bytes.
    Raises:
        Refusal: an anchor found zero times or twice, or a shape other than the standard one (the message names it).
    """
    wrapper, backbone, layer = parts(module, wrapper_name, ref)
    new_wrapper = _wrapper(wrapper, ref, _setter(wrapper, backbone, ref))
    new_backbone = _backbone(backbone, ref)
    out = replace_top_level(replace_top_level(module, wrapper, new_wrapper), backbone, new_backbone)
    if layer is None:
        return out
    accumulator = ref.imports
    named = any(
        isinstance(s, cst.SimpleStatementLine)
        and cst.Module([]).code_for_node(s).strip() == cst.Module([]).code_for_node(accumulator).strip()  # type: ignore[arg-type]
        for s in out.body
    )
    out = replace_top_level(
        out, top_level_class(out, layer.name.value), _layer_capture(top_level_class(out, layer.name.value), ref)
    )
    return out if named else _with_import(out, accumulator)  # type: ignore[arg-type]


__all__ = ["UNUSED", "parts", "transform"]
