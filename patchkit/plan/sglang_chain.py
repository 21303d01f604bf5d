"""The EAGLE-3 chain of one SGLang class, checked with :mod:`ast` against the release's own ``llama.py`` (issue 44).

Independent of the libcst codemod that writes the patch (:mod:`patchkit.codemods.sglang_capture`): each link is
compared, as an ``ast.dump``, with the statement the release's native Llama has in the same place
(``sglang/srt/models/llama.py``: ``LlamaForCausalLM``, ``LlamaModel``, ``LlamaDecoderLayer``), so a hand-edited or
partial patch is reported broken. What SGLang needs of a target, and where it reads it:

- the model runner calls ``model.set_eagle3_layers_to_capture(ids)`` (0.5.23:
  ``model_executor/model_runner_components/attention_backend_setup.py``; 0.5.14: ``model_runner.py``): the setter sets
  the wrapper's ``capture_aux_hidden_states`` and the backbone's ``layers_to_capture``, with the release's id
  convention (``[val + 1 for val in layer_ids]``, default ``[2, n // 2, n - 3]``) and pipeline guard;
- the backbone collects the captured layers' hidden states in its loop and returns ``hidden_states,
  aux_hidden_states``; the wrapper unpacks them and hands ``aux_hidden_states`` to the logits processor as its fifth
  argument (``layers/logits_processor.py``, ``LogitsProcessor.forward``);
- the EAGLE-3 worker takes the target's ``get_embed_and_head()`` (0.5.23: ``speculative/pp_draft_embedding.py``,
  ``resolve_target_embed_and_head``; 0.5.16: ``speculative/eagle_worker_v2.py``); ``set_embed_and_head`` is called on
  the draft (``self.draft_runner.model``), not the target.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from patchkit.codemods.sglang_reference import RESIDUAL, names_pp, pp_guards, stream
from patchkit.sglang import contract as c
from patchkit.sglang.states import Idiom

ACCUMULATOR = "aux_hidden_states"


@dataclass(frozen=True)
class Link:
    """One link of the chain: ``label``, whether it holds, and one line of evidence or of what is missing."""

    label: str
    ok: bool
    detail: str


def _dump(node: ast.AST | list) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(_dump(n) for n in node) + "]"
    return ast.dump(node, include_attributes=False)


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    found = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == name]
    return found[0] if len(found) == 1 else None


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    found = [s for s in (cls.body if cls else []) if isinstance(s, ast.FunctionDef) and s.name == name]
    return found[0] if len(found) == 1 else None


def _self_attr(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _is_loop(s: ast.stmt) -> bool:
    """``for i in range(self.start_layer, self.end_layer)`` (Llama's), or the loop of the classes without pipeline
    parallelism: ``for i in range(len(self.layers))``, ``for i, layer in enumerate(self.layers)`` (0.5.23's
    ``granite.py``, ``GraniteModel.forward``; ``gemma3_causal.py``, ``Gemma3TextModel.forward``)."""
    if not (isinstance(s, ast.For) and isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name)):
        return False
    args, func = s.iter.args, s.iter.func.id
    if func == "range" and [a.attr for a in args if isinstance(a, ast.Attribute)] == list(c.LAYER_RANGE):
        return True
    if func == "range" and len(args) == 1 and isinstance(args[0], ast.Call):
        inner = args[0]
        return getattr(inner.func, "id", None) == "len" and len(inner.args) == 1 and _self_attr(inner.args[0], "layers")
    return func == "enumerate" and len(args) == 1 and _self_attr(args[0], "layers")


def _loop(fn: ast.FunctionDef | None) -> ast.For | None:
    found = [s for s in (fn.body if fn else []) if _is_loop(s)]
    return found[0] if len(found) == 1 else None


def _backbone_name(wrapper: ast.ClassDef | None) -> str | None:
    """The class the wrapper builds as ``self.model = X(...)``, or returns from ``self._init_model`` (Llama's form)."""
    init = _method(wrapper, "__init__")
    builder = _method(wrapper, "_init_model")
    returned = [
        n.value.func.id
        for n in (ast.walk(builder) if builder else ())
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
    ]
    for node in ast.walk(init) if init else ():
        if isinstance(node, ast.Assign) and any(_self_attr(t, "model") for t in node.targets):
            func = node.value.func if isinstance(node.value, ast.Call) else None
            if isinstance(func, ast.Name):
                return func.id
            if func is not None and _self_attr(func, "_init_model") and len(returned) == 1:
                return returned[0]
    return None


@dataclass(frozen=True)
class Shape:
    """The statements of one wrapper/backbone/layer triple, each a dump (``""`` when absent)."""

    flag: str
    unpack: str
    logits_fifth: str
    listed: str
    accumulator: str
    capture: str
    returns: str
    layer_param: str
    layer_keyword: str
    setter: str
    setter_unguarded: str
    embed_and_head: bool
    layer_stream: tuple[str, ...]


def _statement(fn: ast.FunctionDef | None, test) -> str:
    found = [s for s in (fn.body if fn else []) if test(s)]
    return _dump(found[0]) if len(found) == 1 else ""


def _assigns(s: ast.stmt, attr: str) -> bool:
    return isinstance(s, ast.Assign) and len(s.targets) == 1 and _self_attr(s.targets[0], attr)


def _names(s: ast.stmt, name: str) -> bool:
    return (
        isinstance(s, ast.Assign)
        and len(s.targets) == 1
        and isinstance(s.targets[0], ast.Name)
        and s.targets[0].id == name
    )


def _capture(loop: ast.For | None) -> str:
    """The loop's capture: its ``if ... append`` statement, or the ``capture_output=`` argument of a call in it."""
    for node in ast.walk(loop) if loop else ():
        if isinstance(node, ast.keyword) and node.arg == c.CAPTURE_KEYWORDS[0]:
            return _dump(node)
    ifs = [
        s
        for s in (loop.body if loop else [])
        if isinstance(s, ast.If)
        and any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "append"
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == ACCUMULATOR
            for n in ast.walk(s)
        )
    ]
    return _dump(ifs[0]) if len(ifs) == 1 else ""


def _layer(tree: ast.Module, backbone: ast.ClassDef | None, idiom: Idiom) -> ast.ClassDef | None:
    """The backbone's decoder layer: a class of the file its ``__init__`` calls whose ``forward`` takes ``residual``
    (list append) or uses ``self.attn_boundary`` (capture boundary)."""
    init = _method(backbone, "__init__")
    called = (
        {n.func.id for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if init
        else set()
    )
    for cls in tree.body:
        fn = _method(cls, "forward") if isinstance(cls, ast.ClassDef) and cls.name in called else None
        if fn is None:
            continue
        if idiom is Idiom.APPEND and any(a.arg == RESIDUAL for a in fn.args.args):
            return cls
        if idiom is Idiom.BOUNDARY and any(
            isinstance(n, ast.Attribute) and n.attr == c.ATTN_BOUNDARY[0] for n in ast.walk(fn)
        ):
            return cls
    return None


def _unguarded(setter: ast.FunctionDef) -> str:
    """The setter's body without its one pipeline guard ``if not self.pp_group.is_last_rank: return`` (Llama's
    first statement), as a dump; ``""`` when it has no such guard. A class that never names ``pp_group`` must have
    this body (the form of 0.5.23's ``gemma3_causal.py``, ``Gemma3ForCausalLM.set_eagle3_layers_to_capture``)."""
    guards = pp_guards(setter.body)
    return _dump([s for s in setter.body if s is not guards[0]]) if len(guards) == 1 else ""


def shape(tree: ast.Module, wrapper_name: str, idiom: Idiom, backbone_name: str | None = None) -> Shape:
    """The EAGLE-3 statements of ``wrapper_name``'s triple in ``tree`` (each a dump, ``""`` when absent); the backbone
    is the class called as ``self.model = X(...)`` in the wrapper's ``__init__``, or ``backbone_name`` (Llama builds
    it through ``self._init_model``)."""
    wrapper = _class(tree, wrapper_name)
    name = backbone_name or _backbone_name(wrapper)
    backbone = _class(tree, name) if name else None
    forward = _method(wrapper, "forward")
    fifth = (
        [
            n.args[c.LOGITS_ARGS]
            for n in ast.walk(forward)
            if forward
            if isinstance(n, ast.Call) and _self_attr(n.func, c.LOGITS) and len(n.args) > c.LOGITS_ARGS
        ]
        if forward
        else []
    )
    b_forward = _method(backbone, "forward")
    loop = _loop(b_forward)
    layer = _layer(tree, backbone, idiom)
    l_forward = _method(layer, "forward")
    param = [a for a in (l_forward.args.args if l_forward else []) if a.arg == c.CAPTURE_KEYWORDS[0]]
    keyword = [
        k
        for n in (ast.walk(l_forward) if l_forward else ())
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == c.ATTN_BOUNDARY[1]
        for k in n.keywords
    ]
    setter = _method(wrapper, c.CAPTURE_SETTER)
    at = [i for i, s in enumerate(b_forward.body if b_forward else []) if s is loop]
    return Shape(
        flag=_statement(_method(wrapper, "__init__"), lambda s: _assigns(s, c.CAPTURE_FLAG)),
        unpack=_statement(forward, lambda s: isinstance(s, ast.If) and _self_attr(s.test, c.CAPTURE_FLAG)),
        logits_fifth=_dump(fifth[0]) if len(fifth) == 1 else "",
        listed=_statement(_method(backbone, "__init__"), lambda s: _assigns(s, c.LAYERS_TO_CAPTURE)),
        accumulator=_dump(b_forward.body[at[0] - 1])
        if at and at[0] > 0 and _names(b_forward.body[at[0] - 1], ACCUMULATOR)
        else "",
        capture=_capture(loop),
        returns=_dump(b_forward.body[-1]) if b_forward else "",
        layer_param=_dump(param[0]) if len(param) == 1 else "",
        layer_keyword=_dump(keyword[0]) if len(keyword) == 1 else "",
        setter=_dump(setter.body) if setter else "",
        setter_unguarded=_unguarded(setter) if setter else "",
        embed_and_head=_method(wrapper, c.EMBED_AND_HEAD) is not None,
        layer_stream=stream(l_forward, idiom) if l_forward else (),
    )


LABELS = (
    ("flag", "wrapper flag", "self.capture_aux_hidden_states = False in __init__"),
    ("unpack", "wrapper unpack", "if self.capture_aux_hidden_states: hidden_states, aux_hidden_states = hidden_states"),
    ("logits_fifth", "logits processor's aux argument", "aux_hidden_states as the fifth argument"),
    ("listed", "backbone list", "self.layers_to_capture = [] in __init__"),
    ("accumulator", "loop accumulator", "the accumulator just before the layer loop"),
    ("capture", "loop capture", "the capture in the layer loop"),
    ("returns", "backbone returns the aux states", "return hidden_states, aux_hidden_states"),
    ("setter", "setter", f"{c.CAPTURE_SETTER} with the release's id convention and pipeline guard (none without pp)"),
)
"""Each link of :class:`Shape` compared with the reference: field, label, what Llama has there."""


def chain(source: bytes, wrapper_name: str, reference: bytes, backbone: str | None = None) -> tuple[Link, ...]:
    """Check ``wrapper_name``'s chain in a file's bytes against the release's ``llama.py`` bytes.

    Args:
        source: the bytes of the file that holds the wrapper (patched or not).
        wrapper_name: the registered class.
        reference: the bytes of the same release's ``sglang/srt/models/llama.py``.
    Returns:
        One :class:`Link` per link; the chain holds when every one is ok. A file that does not parse gives one link.
    """
    try:
        tree, ref_tree = ast.parse(source), ast.parse(reference)
    except (SyntaxError, ValueError) as exc:
        return (Link("parses", False, f"does not parse: {exc}"),)
    boundary = any(isinstance(n, ast.keyword) and n.arg == c.CAPTURE_KEYWORDS[0] for n in ast.walk(ref_tree))
    idiom = Idiom.BOUNDARY if boundary else Idiom.APPEND
    want = shape(ref_tree, c.REFERENCE_CLASSES[0], idiom, c.REFERENCE_CLASSES[1])
    got = shape(tree, wrapper_name, idiom, backbone)
    wrapper = _class(tree, wrapper_name)
    if wrapper is not None and not names_pp(wrapper) and want.setter_unguarded:
        # no pipeline parallelism: Llama's setter without its guard, the form of the release's natives without it
        want = dataclasses.replace(want, setter=want.setter_unguarded)
    links = [
        Link(
            label,
            bool(getattr(want, field)) and getattr(got, field) == getattr(want, field),
            f"{'as' if getattr(got, field) == getattr(want, field) else 'not as'} llama.py: {what}",
        )
        for field, label, what in LABELS
    ]
    if want.layer_keyword:
        same = bool(got.layer_param) and (got.layer_param, got.layer_keyword) == (want.layer_param, want.layer_keyword)
        links.append(
            Link(
                "layer boundary capture",
                same,
                f"{'as' if same else 'not as'} llama.py: capture_output=None "
                "handed to self.attn_boundary.prepare as capture=",
            )
        )
    same = bool(want.layer_stream) and got.layer_stream == want.layer_stream
    what = "residual statements" if idiom is Idiom.APPEND else "boundary calls"
    links.append(Link("decoder layer's stream", same, f"{'as' if same else 'not as'} llama.py: the layer's {what}"))
    links.append(
        Link("embed and head", got.embed_and_head, f"{c.EMBED_AND_HEAD} on the class (the draft worker binds it)")
    )
    return tuple(links)


__all__ = ["Link", "Shape", "chain", "shape"]
