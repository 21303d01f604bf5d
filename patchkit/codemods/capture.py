"""Make a decoder backbone capture EAGLE-3 aux hidden states in its forward pass.

Fact (vLLM 0.10.2 - 0.17.1, ``model_executor/models/deepseek_v2.py``): ``DeepseekV2Model.forward``
runs ``for layer in islice(self.layers, self.start_layer, self.end_layer)`` (older releases: a
slice), each layer returning ``(hidden_states, residual)`` separately, then the last pipeline
stage applies ``hidden_states, _ = self.norm(hidden_states, residual)`` and returns
``hidden_states``; other stages return ``IntermediateTensors`` first.

From 0.18.0 (A2/A3, ``interfaces.py`` ``EagleModelMixin``) native backbones inherit the mixin and
call ``self._maybe_add_hidden_state(aux, idx, hidden_states, residual)`` once before the loop and
after each layer (``qwen3_moe.py``); the ``mixin`` form writes exactly that, with global ids.

The capture semantics written here are vLLM's own where it captures natively (vLLM 0.18.0
``model_executor/models/deepseek_v2.py`` ``DeepseekV2Model.forward``: ``hidden_states + residual``
appended before each requested layer, the loop enumerating from ``self.start_layer``, the pair
returned only when something was captured; vLLM 0.25.0's same forward adds id ``n`` after the loop,
before the norm):

- id ``k`` is the residual stream entering layer ``k``: ``hidden_states + residual``, or
  ``hidden_states`` where ``residual`` is still None (the first layer); never the normed value;
  where the layer keeps its own residual and returns the full stream (:mod:`patchkit.vllm.stream.residual`),
  ``hidden_states`` alone;
- ids are global: the loop enumerates from ``self.start_layer``;
- id ``n`` (``len(self.layers)``) is the final layer's output, captured after the loop, before
  the norm, on the stage that owns the last layer;
- the return value is ``(hidden_states, aux_hidden_states)`` only when something was captured;
  otherwise, and on non-last pipeline stages, it is exactly what it was.
"""

from __future__ import annotations

import ast

import libcst as cst

from patchkit.codemods import tree
from patchkit.codemods.base import (
    Codemod,
    Presence,
    Refusal,
    Site,
    exactly_one,
    insert_into_sequence,
    method_of,
    replace_top_level,
    top_level_class,
)
from patchkit.codemods.kinds import CaptureForm, CodemodKind
from patchkit.codemods.interface import add_interfaces_import
from patchkit.vllm.classes.composition import is_layer_loop
from patchkit.vllm.release.contract import ATTR, MAYBE_ADD, MIXIN
from patchkit.vllm.classes.loops import Loop, decoder_loop

INDEX = "layer_idx"
STATES = "aux_hidden_states"
RESIDUAL_STREAM = "hidden_states if residual is None else hidden_states + residual"
"""What id k captures when layers return ``(hidden_states, residual)`` separately."""
HIDDEN_STREAM = "hidden_states"
"""What id k captures when layers return ``hidden_states`` alone (the residual is inside the layer)."""


def _self_attr(node: object) -> bool:
    return tree.is_self_attr(node, ATTR)


def _capture_in_loop(node: cst.CSTNode) -> bool:
    """``if <index> in self.aux_hidden_state_layers:``"""
    return isinstance(node, cst.If) and tree.only_comparison(node.test, cst.In, _self_attr)


def _capture_final(node: cst.CSTNode) -> bool:
    """``if self.end_layer ... and self.end_layer in self.aux_hidden_state_layers:``"""
    if not isinstance(node, cst.If) or not isinstance(node.test, cst.BooleanOperation):
        return False
    left, right = node.test.left, node.test.right
    return (
        isinstance(left, cst.Comparison)
        and tree.is_self_attr(left.left, "end_layer")
        and tree.only_comparison(right, cst.In, _self_attr)
        and tree.is_self_attr(right.left, "end_layer")
    )


def _assigns_self_attr(node: cst.CSTNode) -> bool:
    """``self.aux_hidden_state_layers = ...`` (among the targets) or ``self.aux_hidden_state_layers: T = ...``."""
    if isinstance(node, cst.Assign):
        return any(_self_attr(t.target) for t in node.targets)
    return isinstance(node, cst.AnnAssign) and _self_attr(node.target)


def _maybe_add_call(node: cst.CSTNode) -> bool:
    return tree.is_self_call(node, MAYBE_ADD)


def _return_with_states(node: cst.CSTNode) -> bool:
    """``return hidden_states, aux_hidden_states``"""
    return isinstance(node, cst.Return) and tree.names_tuple(node.value, "hidden_states", STATES)


def _layer_call(node: cst.CSTNode, layer: str, residual: bool) -> bool:
    """``hidden_states, residual = <layer>(...)`` (``hidden_states = <layer>(...)`` without ``residual``)."""
    if not (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.value, cst.Call)
        and tree.is_name(node.value.func, layer)
    ):
        return False
    target = node.targets[0].target
    return tree.names_tuple(target, "hidden_states", "residual") if residual else tree.is_name(target, "hidden_states")


def _runs_layer(stmt: cst.BaseStatement, layer: str, residual: bool) -> bool:
    """``stmt`` is the layer call's own line, or an ``if``/``else`` whose two arms each hold one such line
    (:func:`patchkit.vllm.classes.loops.layer_call_branch`, which decided where the call is)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return len(stmt.body) == 1 and _layer_call(stmt.body[0], layer, residual)
    if isinstance(stmt, cst.If) and isinstance(stmt.orelse, cst.Else):
        arms = (stmt.body.body, stmt.orelse.body.body)
        return all(sum(1 for s in arm if _runs_layer(s, layer, residual)) == 1 for arm in arms)
    return False


def _named(*names: str):
    return lambda node: isinstance(node, cst.Name) and node.value in names


def _read_loop(forward: cst.FunctionDef):
    """The decoder-layer loop of ``forward`` (libcst node) and its form, read by
    :func:`patchkit.vllm.classes.loops.decoder_loop` on the same code, so the classifier and this codemod agree on every
    loop form."""
    body = list(forward.body.body)
    loops = []
    for stmt in body:
        if isinstance(stmt, cst.For):
            node = ast.parse(cst.Module(body=[stmt]).code).body[0]
            if isinstance(node, ast.For) and is_layer_loop(node):
                loops.append(stmt)
    loop = exactly_one(loops, "decoder-layer loop 'for <layer> in ...self.layers...'")
    parsed = ast.parse(cst.Module(body=[forward]).code).body[0]
    assert isinstance(parsed, (ast.FunctionDef, ast.AsyncFunctionDef))
    form = decoder_loop(parsed)
    if not isinstance(form, Loop):
        raise Refusal(form)
    return loop, form


class CaptureAuxHiddenStates(Codemod):
    """Make a decoder backbone capture EAGLE-3 aux hidden states in its ``forward``.

    Args:
        patch_id: written into comments beside the added code.
        form: ``"inline"`` (A1, vLLM 0.10.2 - 0.17.1: an ``aux_hidden_state_layers`` attribute in
            ``__init__``, an ``if layer_idx in ...`` capture before each layer and one after the
            loop for id n) or ``"mixin"`` (A2/A3, 0.18.0 on: ``EagleModelMixin`` in the bases and
            ``self._maybe_add_hidden_state(...)`` once before the loop, for id ``start_layer``, and
            after each layer, for id ``layer_idx + 1``; id n comes with the last layer).
        residual: capture ``hidden_states + residual`` (the fused-residual contract); False captures
            ``hidden_states`` alone: the layers return it alone, or keep their own residual and return
            the full stream first (0.33.0 ``exaone4.py``). Decided from the release's code by
            :func:`patchkit.vllm.stream.residual.residual_stream`, never assumed from the loop's form.
    """

    kind = CodemodKind.CAPTURE

    def __init__(self, patch_id: str, form: CaptureForm | str = CaptureForm.INLINE, residual: bool = True) -> None:
        try:
            self.form = CaptureForm(form)
        except ValueError:
            raise ValueError(f"unknown capture form {form!r}") from None
        self.patch_id = patch_id
        self.residual = residual
        self.options = {"patch_id": patch_id, "form": self.form.value, "residual": residual}

    @property
    def stream(self) -> str:
        """The expression captured for id k."""
        return RESIDUAL_STREAM if self.residual else HIDDEN_STREAM

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        cls = top_level_class(module, _class_name(site))
        forward = exactly_one(method_of(cls, "forward"), f"forward in {cls.name.value}")
        if self.form is CaptureForm.MIXIN:
            parts = {
                f"{MIXIN} base": any(tree.is_name(a.value, MIXIN) for a in cls.bases),
                f"{MAYBE_ADD} calls": len(tree.find(tree.walk(forward), _maybe_add_call)) >= 2,
                "(hidden_states, aux_hidden_states) return": bool(
                    tree.find(tree.statements(forward), _return_with_states)
                ),
            }
            mentions = lambda: (  # noqa: E731
                tree.find(tree.walk(forward), _named(STATES)) or tree.find(tree.walk(forward), _maybe_add_call)
            )
        else:
            init = exactly_one(method_of(cls, "__init__"), f"__init__ in {cls.name.value}")
            parts = {
                "__init__ attribute": bool(tree.find(tree.statements(init), _assigns_self_attr)),
                "capture in the layer loop": bool(tree.find(tree.statements(forward), _capture_in_loop)),
                "final-layer capture": bool(tree.find(tree.statements(forward), _capture_final)),
                "(hidden_states, aux_hidden_states) return": bool(
                    tree.find(tree.statements(forward), _return_with_states)
                ),
            }
            mentions = lambda: tree.find(tree.walk(cls), _named(ATTR, STATES))  # noqa: E731
        if all(parts.values()):
            return Presence.PRESENT, f"{cls.name.value} captures aux hidden states"
        if not any(parts.values()) and not mentions():
            return Presence.ABSENT, f"{cls.name.value} does not capture aux hidden states"
        lack = ", ".join(k for k, v in parts.items() if not v)
        return (
            Presence.PARTIAL,
            f"{cls.name.value} has an aux hidden state capture patchkit did not write (lacks {lack})",
        )

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        cls = top_level_class(module, _class_name(site))
        forward = exactly_one(method_of(cls, "forward"), f"forward in {cls.name.value}")
        for name in (INDEX, STATES):
            if tree.find(tree.walk(forward), _named(name)):
                raise Refusal(f"{cls.name.value}.forward already uses the name {name}")
        new_forward = forward.with_changes(body=forward.body.with_changes(body=self._forward_body(forward)))
        if self.form is CaptureForm.MIXIN:
            body = [new_forward if s is forward else s for s in cls.body.body]
            new_cls = cls.with_changes(body=cls.body.with_changes(body=body))
            if not any(tree.is_name(a.value, MIXIN) for a in cls.bases):
                if not cls.bases:
                    raise Refusal(f"class {cls.name.value} has no bases to extend")
                new_cls = new_cls.with_changes(
                    bases=insert_into_sequence(cls.bases, len(cls.bases), cst.Arg(value=cst.Name(MIXIN)))
                )
            module = replace_top_level(module, cls, new_cls)
            return add_interfaces_import(module, site, MIXIN)
        init = exactly_one(method_of(cls, "__init__"), f"__init__ in {cls.name.value}")
        new_init = init.with_changes(body=init.body.with_changes(body=[*init.body.body, *self._init_statements()]))
        body = [new_init if s is init else new_forward if s is forward else s for s in cls.body.body]
        return replace_top_level(module, cls, cls.with_changes(body=cls.body.with_changes(body=body)))

    def _init_statements(self) -> list[cst.BaseStatement]:
        stmt = cst.parse_statement(f"self.{ATTR}: tuple[int, ...] = ()\n")
        comment = f"# Added by patchkit ({self.patch_id}): global layer ids whose input EAGLE-3 captures."
        return [stmt.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))])]

    def _forward_body(self, forward: cst.FunctionDef) -> list[cst.BaseStatement]:
        body = list(forward.body.body)
        loop, form = _read_loop(forward)
        if self.residual and not form.returns_residual:
            # the plan (patchkit.vllm.stream.residual.residual_stream, which reads the layer's code too) chose
            # hidden_states + residual, but this loop has no residual stream outside the layer
            raise Refusal(
                "the decoder-layer loop keeps no residual outside the layer, so the stream is hidden_states "
                "alone, not what this patch was planned for"
            )
        if form.captures:
            raise Refusal(f"{forward.name.value} already captures aux hidden states")
        returns = [
            i
            for i, s in enumerate(body)
            if isinstance(s, cst.SimpleStatementLine)
            and len(s.body) == 1
            and isinstance(s.body[0], cst.Return)
            and tree.is_name(s.body[0].value, "hidden_states")
        ]
        at_return = exactly_one(returns, "top-level 'return hidden_states' in forward")
        at_loop = body.index(loop)
        if at_return < at_loop:
            raise Refusal("the final 'return hidden_states' comes before the decoder-layer loop")
        new_loop = self._capturing_loop(loop, form).with_changes(leading_lines=[])
        before = self._before_loop(loop, form)
        after_loop: list[cst.BaseStatement] = []
        if self.form is CaptureForm.INLINE:
            after_loop.append(
                cst.parse_statement(
                    f"if self.end_layer == len(self.layers) and self.end_layer in self.{ATTR}:\n"
                    f"    {STATES}.append({self.stream})\n"
                )
            )
        ret = cst.parse_statement(f"if len({STATES}) > 0:\n    return hidden_states, {STATES}\n")
        ret = ret.with_changes(leading_lines=body[at_return].leading_lines)
        last = body[at_return].with_changes(leading_lines=[])
        return [
            *body[:at_loop],
            *before,
            new_loop,
            *after_loop,
            *body[at_loop + 1 : at_return],
            ret,
            last,
            *body[at_return + 1 :],
        ]

    def _capturing_loop(self, loop: cst.For, form: Loop) -> cst.For:
        """The decoder-layer loop with the capture written into its body (and a global index in its header).

        Args:
            loop: the forward's decoder-layer loop; form: what :func:`_read_loop` read of it.
        Returns:
            The new loop: the inline form's ``if <index> in self.<attr>: ...append(<stream>)`` first in the
            body, or the mixin form's ``self.<maybe_add>(...)`` right after the layer call; the header
            enumerates from ``self.start_layer`` unless the loop already has a global index.
        Raises:
            Refusal: the layer call is not a statement line of its own in the loop.
        """
        index = form.index or INDEX
        loop_body = list(loop.body.body)
        at_call = form.call_at
        if len(loop_body) <= at_call or not _runs_layer(loop_body[at_call], form.layer, form.tuple_target):
            raise Refusal(f"the layer call '{form.layer}(...)' is not a statement line of its own in the loop")
        if self.form is CaptureForm.INLINE:
            loop_body.insert(
                0, cst.parse_statement(f"if {index} in self.{ATTR}:\n    {STATES}.append({self.stream})\n")
            )
        else:
            residual = "residual" if self.residual else "None"
            loop_body.insert(
                at_call + 1,
                cst.parse_statement(f"self.{MAYBE_ADD}({STATES}, {index} + 1, hidden_states, {residual})\n"),
            )
        if form.index is not None:  # the loop already has a global index: keep its header
            return loop.with_changes(body=loop.body.with_changes(body=loop_body))
        return _enumerated_header(loop, loop_body)

    def _before_loop(self, loop: cst.For, form: Loop) -> list[cst.BaseStatement]:
        """The statements written before the loop, the first carrying the loop's leading lines and patchkit's comment.

        Args:
            loop: the forward's decoder-layer loop; form: what :func:`_read_loop` read of it.
        Returns:
            The inline form's ``aux_hidden_states = []`` (after ``residual = None`` where the first layer takes
            ``hidden_states`` alone), or the mixin form's ``aux_hidden_states = self.<maybe_add>([], ...)``.
        """
        comment = cst.EmptyLine(
            comment=cst.Comment(
                f"# Added by patchkit ({self.patch_id}): EAGLE-3 aux hidden states "
                "(residual stream entering each requested global layer id)."
            )
        )
        before: list[cst.BaseStatement] = []
        if self.form is CaptureForm.INLINE:
            if self.residual and not form.residual_before:  # the first layer takes hidden_states alone
                before.append(cst.parse_statement("residual = None\n"))
            before.append(cst.parse_statement(f"{STATES} = []\n"))
        else:
            residual = "residual" if self.residual and form.residual_before else "None"
            before.append(
                cst.parse_statement(f"{STATES} = self.{MAYBE_ADD}([], self.start_layer, hidden_states, {residual})\n")
            )
        before[0] = before[0].with_changes(leading_lines=[*loop.leading_lines, comment])
        return before


def _enumerated_header(loop: cst.For, loop_body: list[cst.BaseStatement]) -> cst.For:
    """``for layer in X`` -> ``for layer_idx, layer in enumerate(X, start=self.start_layer)`` with ``loop_body``."""
    assert isinstance(loop.target, cst.Name)
    layer = loop.target.value
    return loop.with_changes(
        target=cst.Tuple(
            elements=[
                cst.Element(cst.Name(INDEX), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Element(cst.Name(layer)),
            ],
            lpar=[],
            rpar=[],
        ),
        iter=cst.Call(
            func=cst.Name("enumerate"),
            args=[
                cst.Arg(value=loop.iter, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(
                    keyword=cst.Name("start"),
                    value=cst.parse_expression("self.start_layer"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                ),
            ],
        ),
        body=loop.body.with_changes(body=loop_body),
    )


def _class_name(site: Site) -> str:
    if not site.class_name:
        raise Refusal("capture patch without a target class")
    return site.class_name
