"""Make a decoder backbone capture EAGLE-3 aux hidden states in its forward pass.

Fact (vLLM 0.10.2 - 0.17.1, ``model_executor/models/deepseek_v2.py``): ``DeepseekV2Model.forward``
runs ``for layer in islice(self.layers, self.start_layer, self.end_layer)`` (older releases: a
slice), each layer returning ``(hidden_states, residual)`` separately, then the last pipeline
stage applies ``hidden_states, _ = self.norm(hidden_states, residual)`` and returns
``hidden_states``; other stages return ``IntermediateTensors`` first.

The capture semantics written here are vLLM's own where it captures natively (vLLM 0.18.0
``model_executor/models/deepseek_v2.py`` ``DeepseekV2Model.forward``: ``hidden_states + residual``
appended before each requested layer, the loop enumerating from ``self.start_layer``, the pair
returned only when something was captured; vLLM 0.25.0's same forward adds id ``n`` after the loop,
before the norm):

- id ``k`` is the residual stream entering layer ``k``: ``hidden_states + residual``, or
  ``hidden_states`` where ``residual`` is still None (the first layer); never the normed value;
- ids are global: the loop enumerates from ``self.start_layer``;
- id ``n`` (``len(self.layers)``) is the final layer's output, captured after the loop, before
  the norm, on the stage that owns the last layer;
- the return value is ``(hidden_states, aux_hidden_states)`` only when something was captured;
  otherwise, and on non-last pipeline stages, it is exactly what it was.
"""

from __future__ import annotations

import libcst as cst
from libcst import matchers as m

from patchkit.codemods.base import (
    Codemod,
    Presence,
    Refusal,
    Site,
    exactly_one,
    method_of,
    replace_top_level,
    top_level_class,
)

ATTR = "aux_hidden_state_layers"
INDEX = "layer_idx"
STATES = "aux_hidden_states"
RESIDUAL_STREAM = "hidden_states if residual is None else hidden_states + residual"

_SELF_ATTR = m.Attribute(value=m.Name("self"), attr=m.Name(ATTR))
_CAPTURE_IN_LOOP = m.If(
    test=m.Comparison(left=m.Name(INDEX), comparisons=[m.ComparisonTarget(operator=m.In(), comparator=_SELF_ATTR)])
)
_CAPTURE_FINAL = m.If(
    test=m.BooleanOperation(
        left=m.Comparison(left=m.Attribute(value=m.Name("self"), attr=m.Name("end_layer"))),
        right=m.Comparison(
            left=m.Attribute(value=m.Name("self"), attr=m.Name("end_layer")),
            comparisons=[m.ComparisonTarget(operator=m.In(), comparator=_SELF_ATTR)],
        ),
    )
)
_RETURN_WITH_STATES = m.Return(value=m.Tuple(elements=[m.Element(m.Name("hidden_states")), m.Element(m.Name(STATES))]))
_LAYER_CALL = m.Assign(
    targets=[m.AssignTarget(target=m.Tuple(elements=[m.Element(m.Name("hidden_states")), m.Element(m.Name("residual"))]))],
    value=m.Call(func=m.Name("layer")),
)
_DECODER_LOOP = m.For(
    target=m.Name("layer"),
    iter=m.MatchIfTrue(lambda node: bool(m.findall(node, m.Attribute(value=m.Name("self"), attr=m.Name("layers"))))),
)


class CaptureAuxHiddenStates(Codemod):
    """Add ``aux_hidden_state_layers`` to a backbone's ``__init__`` and the capture to its ``forward``.

    Args:
        patch_id: written into comments beside the added code.
    """

    description = "aux_hidden_state_layers attribute and the residual-stream capture in forward"

    def __init__(self, patch_id: str) -> None:
        self.patch_id = patch_id

    @property
    def expects(self) -> str:
        """See :meth:`Codemod.expects`."""
        return (
            "the target class exactly once at module level, with exactly one __init__ and one forward; "
            "forward holds exactly one top-level 'for layer in ...self.layers...' loop whose body has exactly one "
            "'hidden_states, residual = layer(...)', then '... = self.norm(...)' and exactly one top-level "
            f"'return hidden_states'; the names {INDEX} and {STATES} are unused"
        )

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        cls = top_level_class(module, _class_name(site))
        init = exactly_one(method_of(cls, "__init__"), f"__init__ in {cls.name.value}")
        forward = exactly_one(method_of(cls, "forward"), f"forward in {cls.name.value}")
        parts = {
            "__init__ attribute": bool(m.findall(init, m.AssignTarget(target=_SELF_ATTR)) or m.findall(init, m.AnnAssign(target=_SELF_ATTR))),
            "capture in the layer loop": bool(m.findall(forward, _CAPTURE_IN_LOOP)),
            "final-layer capture": bool(m.findall(forward, _CAPTURE_FINAL)),
            "(hidden_states, aux_hidden_states) return": bool(m.findall(forward, _RETURN_WITH_STATES)),
        }
        if all(parts.values()):
            return Presence.PRESENT, f"{cls.name.value} captures aux hidden states"
        mentions = m.findall(cls, m.Name(ATTR) | m.Name(STATES))
        if not any(parts.values()) and not mentions:
            return Presence.ABSENT, f"{cls.name.value} does not capture aux hidden states"
        lack = ", ".join(k for k, v in parts.items() if not v)
        return Presence.PARTIAL, f"{cls.name.value} has an aux hidden state capture patchkit did not write (lacks {lack})"

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        cls = top_level_class(module, _class_name(site))
        init = exactly_one(method_of(cls, "__init__"), f"__init__ in {cls.name.value}")
        forward = exactly_one(method_of(cls, "forward"), f"forward in {cls.name.value}")
        for name in (INDEX, STATES):
            if m.findall(forward, m.Name(name)):
                raise Refusal(f"{cls.name.value}.forward already uses the name {name}")
        new_init = init.with_changes(body=init.body.with_changes(body=[*init.body.body, *self._init_statements()]))
        new_forward = forward.with_changes(body=forward.body.with_changes(body=self._forward_body(forward)))
        body = [new_init if s is init else new_forward if s is forward else s for s in cls.body.body]
        return replace_top_level(module, cls, cls.with_changes(body=cls.body.with_changes(body=body)))

    def _init_statements(self) -> list[cst.BaseStatement]:
        stmt = cst.parse_statement(f"self.{ATTR}: tuple[int, ...] = ()\n")
        comment = f"# Added by patchkit ({self.patch_id}): global layer ids whose input EAGLE-3 captures."
        return [stmt.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))])]

    def _forward_body(self, forward: cst.FunctionDef) -> list[cst.BaseStatement]:
        body = list(forward.body.body)
        loop = exactly_one([s for s in body if m.matches(s, _DECODER_LOOP)], "decoder-layer loop 'for layer in ...self.layers...'")
        assert isinstance(loop, cst.For)
        exactly_one(m.findall(loop.body, _LAYER_CALL), "'hidden_states, residual = layer(...)' in the decoder-layer loop")
        returns = [i for i, s in enumerate(body) if m.matches(s, m.SimpleStatementLine(body=[m.Return(value=m.Name("hidden_states"))]))]
        at_return = exactly_one(returns, "top-level 'return hidden_states' in forward")
        norms = m.findall(
            cst.Module(body=body[: at_return]),
            m.Assign(value=m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name("norm")))),
        )
        exactly_one(norms, "'... = self.norm(...)' before the final return")
        at_loop = body.index(loop)
        if at_return < at_loop:
            raise Refusal("the final 'return hidden_states' comes before the decoder-layer loop")

        new_loop = loop.with_changes(
            target=cst.Tuple(
                elements=[
                    cst.Element(cst.Name(INDEX), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                    cst.Element(cst.Name("layer")),
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
            body=loop.body.with_changes(
                body=[
                    cst.parse_statement(f"if {INDEX} in self.{ATTR}:\n    {STATES}.append({RESIDUAL_STREAM})\n"),
                    *loop.body.body,
                ]
            ),
        )
        start = cst.parse_statement(f"{STATES} = []\n").with_changes(
            leading_lines=[
                *loop.leading_lines,
                cst.EmptyLine(
                    comment=cst.Comment(
                        f"# Added by patchkit ({self.patch_id}): EAGLE-3 aux hidden states "
                        "(residual stream entering each requested layer)."
                    )
                ),
            ]
        )
        new_loop = new_loop.with_changes(leading_lines=[])
        final = cst.parse_statement(
            f"if self.end_layer == len(self.layers) and self.end_layer in self.{ATTR}:\n"
            f"    {STATES}.append({RESIDUAL_STREAM})\n"
        )
        ret = cst.parse_statement(f"if len({STATES}) > 0:\n    return hidden_states, {STATES}\n")
        ret = ret.with_changes(leading_lines=body[at_return].leading_lines)
        last = body[at_return].with_changes(leading_lines=[])
        return [*body[:at_loop], start, new_loop, final, *body[at_loop + 1 : at_return], ret, last, *body[at_return + 1 :]]


def _class_name(site: Site) -> str:
    if not site.class_name:
        raise Refusal("capture patch without a target class")
    return site.class_name
