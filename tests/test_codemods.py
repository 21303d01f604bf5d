"""Each codemod on small files we write ourselves, as LibCST's codemod tests and pyupgrade write them.

For every kind in :data:`patchkit.codemods.CATALOGUE` (the meta-test checks that each has them):

- **fixes**: ``codemod_cases/<case>.before.py`` becomes ``<case>.after.py``, compared as whole bytes;
- **leaves alone**: ``<case>.alone.py``, an input the codemod must not touch, comes out byte-identical
  (its post-condition already holds, something foreign is in its place, or the anchor is unclear);
- **applied twice is a no-op**: the output, run again, is the same bytes (the post-condition holds);
- **reverts to the same bytes**: written through patchkit's journal (``Journal.commit``, what ``apply``
  calls) and taken back with ``Journal.restore`` (what ``revert`` calls), the file is the before bytes.

Each run goes through :func:`run`, the engine's per-file protocol (``patchkit.plan.engine._decide``):
check; only on ABSENT transform; the post-condition must hold after it. Below the table, the older
focused tests (refusals and the substrings they were written for).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
import pytest

from patchkit.codemods import CATALOGUE, CodemodRef
from patchkit.codemods.allowlist import ExtendAllowList
from patchkit.codemods.base import Codemod, Holder, Presence, Refusal, Site
from patchkit.codemods.capture import CaptureAuxHiddenStates
from patchkit.codemods.interface import AddEagle3Interface
from patchkit.codemods.proposer import AddModelNameBranch
from patchkit.store.journal import Journal, PlannedWrite
from patchkit.vllm.release.source import ClassRef

MODELS = "vllm.model_executor.models"
CASES = Path(__file__).parent / "codemod_cases"


def parse(code: str) -> cst.Module:
    return cst.parse_module(textwrap.dedent(code).lstrip("\n"))


def apply_twice(codemod, module: cst.Module, site: Site) -> str:
    """Apply ``codemod`` once (its post-condition absent before, present after), then really apply it
    a second time to the output through :func:`run`: the bytes must not change. Returns the output."""
    assert codemod.check(module, site)[0] is Presence.ABSENT
    once = codemod.transform(module, site)
    assert codemod.check(once, site)[0] is Presence.PRESENT
    again, status = run(codemod, once.bytes, site)
    assert (again, status) == (once.bytes, "present"), "applying the codemod to its own output changed it"
    return once.code


def run(codemod: Codemod, source: bytes, site: Site) -> tuple[bytes, str]:
    """One file through the engine's protocol: ``(bytes written, status)``.

    status: ``"applied"`` (ABSENT, transformed, post-condition holds, the output re-parses),
    ``"present"`` / ``"partial"`` (nothing written) or ``"refused"`` (a :class:`Refusal`; nothing written).
    """
    module = cst.parse_module(source)
    try:
        presence, _ = codemod.check(module, site)
        if presence is not Presence.ABSENT:
            return source, presence.value
        new = codemod.transform(module, site)
    except Refusal:
        return source, "refused"
    after, why = codemod.check(new, site)
    assert after is Presence.PRESENT, f"post-condition does not hold after the transform: {why}"
    out = new.bytes
    assert cst.parse_module(out).bytes == out, "the output does not re-parse to the same bytes"
    return out, "applied"


@dataclass(frozen=True)
class Case:
    """One file of ``codemod_cases/``: ``name.before.py`` (with ``name.after.py``) or ``name.alone.py``.

    ``kind`` and ``options`` build the codemod through the catalogue (:class:`CodemodRef`), as a patch does;
    ``status`` is what :func:`run` must report for an ``alone`` case.
    """

    name: str
    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    site: Site = Site("m.py", f"{MODELS}.m")
    status: str = "applied"

    def codemod(self) -> Codemod:
        return CodemodRef.of(self.kind, **self.options).load()

    def file(self, suffix: str) -> bytes:
        return (CASES / f"{self.name}.{suffix}.py").read_bytes()

    def __str__(self) -> str:
        return self.name


def _site(cls: str, holder: Holder | None = None, module: str = "m") -> Site:
    return Site(f"{module}.py", f"{MODELS}.{module}", cls, holder)


_BACKBONE_HOLDER = Holder("model", "backbone", ClassRef(f"{MODELS}.m", "Backbone", "m.py", 1), 8)
_LM_HOLDER = Holder("language_model", "causal_lm", ClassRef(f"{MODELS}.m", "Model", "m.py", 5), 3)
_ALLOW = {"names": ("eagle3_target_supported", "aux_hidden_states_supported"), "entries": ("deepseek_v3", "kimi_k2")}
_KIMI = {
    "model": "KimiK25ForConditionalGeneration",
    "after": "PixtralForConditionalGeneration",
    "attribute": "media_placeholder_token_id",
    "patch_id": "p",
}
_EMBED = {"alias": "embed_tokens", "attribute": "word_embeddings", "patch_id": "p"}

FIXES = [
    Case("capture_inline", "capture", {"patch_id": "p"}, _site("Backbone")),
    Case("capture_slice", "capture", {"patch_id": "p"}, _site("Backbone")),
    Case("capture_indexed", "capture", {"patch_id": "p"}, _site("Backbone")),
    Case("capture_hidden_only", "capture", {"patch_id": "p", "residual": False}, _site("Backbone")),
    Case("capture_mixin", "capture", {"patch_id": "p", "form": "mixin"}, _site("Backbone")),
    Case("interface_backbone", "interface", {"patch_id": "p"}, _site("Model", _BACKBONE_HOLDER)),
    Case("interface_wrapper", "interface", {"patch_id": "p"}, _site("Wrapper", _LM_HOLDER, "w")),
    Case("interface_no_methods", "interface", {"patch_id": "p", "methods": False}, _site("Model")),
    Case("allowlist_one_line", "allowlist", _ALLOW, Site("c.py", "vllm.config")),
    Case("allowlist_multi_line", "allowlist", _ALLOW, Site("c.py", "vllm.config")),
    Case("embedding_alias", "embedding-alias", _EMBED, _site("Backbone")),
    Case("head_alias", "head-alias", {"alias": "lm_head", "attribute": "output", "patch_id": "p"}, _site("Model")),
    Case("proposer_branch", "proposer-branch", _KIMI, Site("e.py", "vllm.v1.spec_decode.eagle")),
]

ALONE = [
    Case("capture_foreign", "capture", {"patch_id": "p"}, _site("Backbone"), "partial"),
    Case("capture_two_loops", "capture", {"patch_id": "p"}, _site("Backbone"), "refused"),
    Case("interface_native", "interface", {"patch_id": "p"}, _site("Model", _BACKBONE_HOLDER), "present"),
    Case("interface_star_import", "interface", {"patch_id": "p"}, _site("Model", _BACKBONE_HOLDER), "refused"),
    Case("allowlist_complete", "allowlist", _ALLOW, Site("c.py", "vllm.config"), "present"),
    Case("allowlist_two_lists", "allowlist", _ALLOW, Site("c.py", "vllm.config"), "refused"),
    Case("embedding_alias_other", "embedding-alias", _EMBED, _site("Backbone"), "partial"),
    Case(
        "head_alias_two_inits",
        "head-alias",
        {"alias": "lm_head", "attribute": "output", "patch_id": "p"},
        _site("Model"),
        "refused",
    ),
    Case("proposer_no_fallback", "proposer-branch", _KIMI, Site("e.py", "e"), "refused"),
    Case("proposer_present", "proposer-branch", _KIMI, Site("e.py", "e"), "present"),
]


def test_every_catalogue_kind_has_each_kind_of_case():
    kinds = set(CATALOGUE)
    assert {c.kind for c in FIXES} == kinds, "a kind without a before/after pair"
    assert {c.kind for c in ALONE} == kinds, "a kind without a leaves-alone case"
    files = {p.name for p in CASES.glob("*.py")}
    listed = {f"{c.name}.{s}.py" for c in FIXES for s in ("before", "after")} | {f"{c.name}.alone.py" for c in ALONE}
    assert files == listed, f"files in codemod_cases/ no case names, or cases without files: {sorted(files ^ listed)}"


@pytest.mark.parametrize("case", FIXES, ids=str)
def test_fixes(case: Case):
    before = case.file("before")
    out, status = run(case.codemod(), before, case.site)
    assert status == "applied"
    assert out == case.file("after")


@pytest.mark.parametrize("case", FIXES, ids=str)
def test_applied_twice_is_a_no_op(case: Case):
    codemod = case.codemod()
    once, status = run(codemod, case.file("before"), case.site)
    assert status == "applied" and once != case.file("before")
    twice, status = run(codemod, once, case.site)
    assert status == "present"
    assert twice == once


@pytest.mark.parametrize("case", ALONE, ids=str)
def test_leaves_alone(case: Case):
    source = case.file("alone")
    out, status = run(case.codemod(), source, case.site)
    assert status == case.status
    assert out == source


@pytest.mark.parametrize("case", FIXES, ids=str)
def test_reverts_to_the_same_bytes(case: Case, tmp_path: Path):
    """Through the journal's transaction, the way ``apply`` writes and ``revert`` restores."""
    before = case.file("before")
    after, _ = run(case.codemod(), before, case.site)
    relpath = f"vllm/{case.site.relpath}"
    target = tmp_path / relpath
    target.parent.mkdir(parents=True)
    target.write_bytes(before)
    journal = Journal(tmp_path)
    with journal.lock():
        journal.commit([PlannedWrite(relpath, before, after, ["p"])], "0.17.1")
    assert target.read_bytes() == after
    assert Journal(tmp_path).entries[relpath].patches == ["p"]
    journal = Journal(tmp_path)
    with journal.lock():
        journal.restore([relpath])
    assert target.read_bytes() == before
    assert Journal(tmp_path).entries == {}


# Found while writing the cases: decoder_loop read only plain-name targets, so a residual bound by
# tuple unpacking before the loop counted as unbound and the capture inserted "residual = None" over
# the residual a non-first pipeline stage received (failed before the fix in patchkit/vllm/classes/loops.py).
def test_capture_keeps_a_residual_bound_by_tuple_unpacking():
    src = (
        CASES.joinpath("capture_indexed.before.py")
        .read_text()
        .replace(
            "        hidden_states = self.embed(input_ids)\n        residual = None\n",
            '        hidden_states, residual = intermediate["hidden_states"], intermediate["residual"]\n',
        )
    )
    out, status = run(CodemodRef.of("capture", patch_id="p").load(), src.encode(), _site("Backbone"))
    assert status == "applied"
    assert b"residual = None" not in out


# -- capture ------------------------------------------------------------------------------

BACKBONE = """
class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)
        self.norm = RMSNorm(config.hidden_size)

    def forward(self, input_ids, positions, intermediate_tensors):
        if get_pp_group().is_first_rank:
            hidden_states = self.embed(input_ids)
            residual = None
        else:
            hidden_states = intermediate_tensors["hidden_states"]
            residual = intermediate_tensors["residual"]

        for layer in islice(self.layers, self.start_layer, self.end_layer):
            hidden_states, residual = layer(positions, hidden_states, residual)

        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})

        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states
"""

CAPTURE_SITE = Site(relpath="m.py", module=f"{MODELS}.m", class_name="Backbone")


def test_capture_patches_loop_init_and_return():
    code = apply_twice(CaptureAuxHiddenStates("p"), parse(BACKBONE), CAPTURE_SITE)
    assert "self.aux_hidden_state_layers: tuple[int, ...] = ()\n" in code
    assert (
        "for layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), "
        "start=self.start_layer):" in code
    )
    # the capture comes first in the loop body, before the layer runs
    loop_body = code.split("start=self.start_layer):\n", 1)[1]
    assert loop_body.startswith(
        "            if layer_idx in self.aux_hidden_state_layers:\n"
        "                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)\n"
        "            hidden_states, residual = layer(positions, hidden_states, residual)\n"
    )
    assert "if self.end_layer == len(self.layers) and self.end_layer in self.aux_hidden_state_layers:" in code
    # the non-last stage return is untouched and still comes before the norm
    assert code.index("return IntermediateTensors(") < code.index("hidden_states, _ = self.norm(")
    assert code.rstrip().endswith(
        "        if len(aux_hidden_states) > 0:\n"
        "            return hidden_states, aux_hidden_states\n"
        "        return hidden_states"
    )


def test_capture_old_slice_loop():
    old = BACKBONE.replace(
        "islice(self.layers, self.start_layer, self.end_layer)", "self.layers[self.start_layer:self.end_layer]"
    )
    code = apply_twice(CaptureAuxHiddenStates("p"), parse(old), CAPTURE_SITE)
    assert "enumerate(self.layers[self.start_layer:self.end_layer], start=self.start_layer)" in code


def test_capture_refuses_two_loops():
    two = BACKBONE.replace(
        "        if not get_pp_group()",
        "        for layer in self.layers:\n"
        "            hidden_states, residual = layer(positions, hidden_states, residual)\n\n"
        "        if not get_pp_group()",
        1,
    )
    with pytest.raises(Refusal, match="expected exactly 1 decoder-layer loop"):
        CaptureAuxHiddenStates("p").transform(parse(two), CAPTURE_SITE)


def test_capture_refuses_loop_without_residual_pair():
    other = BACKBONE.replace("hidden_states, residual = layer(", "hidden_states = layer(")
    with pytest.raises(Refusal, match="hidden_states alone"):
        CaptureAuxHiddenStates("p").transform(parse(other), CAPTURE_SITE)


def test_capture_refuses_missing_class():
    with pytest.raises(Refusal, match="module-level class Missing, found 0"):
        CaptureAuxHiddenStates("p").check(parse(BACKBONE), Site("m.py", "m", "Missing"))


def test_capture_reports_foreign_capture_as_partial():
    foreign = BACKBONE.replace(
        "        for layer in islice",
        "        aux_hidden_states = []\n        for layer in islice",
    )
    presence, why = CaptureAuxHiddenStates("p").check(parse(foreign), CAPTURE_SITE)
    assert presence is Presence.PARTIAL
    assert "did not write" in why


# -- interface ----------------------------------------------------------------------------

CAUSAL_LM = """
from .interfaces import SupportsLoRA, SupportsPP


class Model(nn.Module, SupportsPP, SupportsLoRA):
    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)

    def compute_logits(self, hidden_states):
        return hidden_states
"""

BACKBONE_HOLDER = Holder("model", "backbone", ClassRef(f"{MODELS}.m", "Backbone", "m.py", 1), 8)


def test_interface_with_backbone_holder():
    site = Site("m.py", f"{MODELS}.m", "Model", BACKBONE_HOLDER)
    code = apply_twice(AddEagle3Interface("p"), parse(CAUSAL_LM), site)
    assert "from .interfaces import SupportsEagle3, SupportsLoRA, SupportsPP\n" in code
    assert "class Model(nn.Module, SupportsPP, SupportsLoRA, SupportsEagle3):" in code
    assert "        self.model.aux_hidden_state_layers = layers\n" in code
    assert "        num_layers = len(self.model.layers)\n        return (2, num_layers // 2, num_layers - 3)\n" in code
    # the methods follow __init__, each after one blank line without trailing spaces
    assert "        self.model = Backbone(config)\n\n    def set_aux_hidden_state_layers(" in code
    assert "\n    \n" not in code


def test_interface_with_causal_lm_holder_and_absolute_multiline_import():
    wrapper = """
    from vllm.model_executor.models.interfaces import (
        SupportsMultiModal,
        SupportsPP,
    )


    class Wrapper(
        nn.Module, SupportsMultiModal, SupportsPP
    ):
        def __init__(self, config):
            self.language_model = init_vllm_registered_model(config, architectures=["Model"])
    """
    holder = Holder("language_model", "causal_lm", ClassRef(f"{MODELS}.m", "Model", "m.py", 5), 3)
    site = Site("w.py", f"{MODELS}.w", "Wrapper", holder)
    code = apply_twice(AddEagle3Interface("p"), parse(wrapper), site)
    assert "import (\n    SupportsEagle3,\n    SupportsMultiModal,\n    SupportsPP,\n)" in code
    assert "    nn.Module, SupportsMultiModal, SupportsPP, SupportsEagle3\n):" in code
    assert "        self.language_model.set_aux_hidden_state_layers(layers)\n" in code
    assert "        return self.language_model.get_eagle3_aux_hidden_state_layers()\n" in code


def test_interface_adds_its_own_import_where_the_module_has_none():
    # 0.33.0 domyn_edge.py imports nothing from interfaces: the import is added after the last one
    no_import = CAUSAL_LM.replace(
        "from .interfaces import SupportsLoRA, SupportsPP\n", "from .other import SupportsLoRA, SupportsPP\n"
    )
    site = Site("m.py", f"{MODELS}.m", "Model", BACKBONE_HOLDER)
    out = AddEagle3Interface("p").transform(parse(no_import), site).code
    assert (
        "from .other import SupportsLoRA, SupportsPP\n"
        "from vllm.model_executor.models.interfaces import SupportsEagle3\n" in out
    )
    assert AddEagle3Interface("p").check(parse(out), site)[0] is Presence.PRESENT


def test_interface_refuses_a_module_without_imports():
    bare = "class Model(Base):\n    pass\n"
    with pytest.raises(Refusal, match="no module-level import"):
        AddEagle3Interface("p").transform(parse(bare), Site("m.py", f"{MODELS}.m", "Model", BACKBONE_HOLDER))


def test_interface_partial_when_only_the_base_is_there():
    half = CAUSAL_LM.replace("SupportsPP, SupportsLoRA):", "SupportsPP, SupportsLoRA, SupportsEagle3):")
    presence, why = AddEagle3Interface("p").check(parse(half), Site("m.py", f"{MODELS}.m", "Model"))
    assert presence is Presence.PARTIAL
    assert "base" in why and "set_aux_hidden_state_layers" in why


def test_interface_relative_import_of_another_package_is_not_the_anchor():
    # `from ..interfaces import` seen from vllm.model_executor.models.m is vllm.model_executor.interfaces
    wrong = CAUSAL_LM.replace("from .interfaces", "from ..interfaces")
    site = Site("m.py", f"{MODELS}.m", "Model", BACKBONE_HOLDER)
    out = AddEagle3Interface("p").transform(parse(wrong), site).code
    assert "from ..interfaces import SupportsLoRA, SupportsPP\n" in out  # left alone
    assert "from vllm.model_executor.models.interfaces import SupportsEagle3\n" in out


# -- allow-list ---------------------------------------------------------------------------

ALLOW = ExtendAllowList(("eagle3_target_supported", "aux_hidden_states_supported"), ("deepseek_v3", "kimi_k2"))


def test_allow_list_single_line():
    code = apply_twice(
        ALLOW, parse('def f(self):\n    eagle3_target_supported = ["llama", "qwen"]\n'), Site("c.py", "c")
    )
    assert 'eagle3_target_supported = ["llama", "qwen", "deepseek_v3", "kimi_k2"]' in code


def test_allow_list_one_per_line_with_trailing_comma():
    src = 'def f(self):\n    aux_hidden_states_supported = [\n        "llama",\n        "qwen",\n    ]\n'
    code = apply_twice(ALLOW, parse(src), Site("c.py", "c"))
    assert code.endswith(
        '    aux_hidden_states_supported = [\n        "llama",\n        "qwen",\n'
        '        "deepseek_v3",\n        "kimi_k2",\n    ]\n'
    )


def test_allow_list_only_adds_what_is_missing():
    src = 'x = 1\neagle3_target_supported = ["llama", "kimi_k2"]\n'
    code = ALLOW.transform(parse(src), Site("c.py", "c")).code
    assert 'eagle3_target_supported = ["llama", "kimi_k2", "deepseek_v3"]' in code


def test_allow_list_refuses_two_lists():
    src = 'eagle3_target_supported = ["llama"]\naux_hidden_states_supported = ["llama"]\n'
    with pytest.raises(Refusal, match="found 2"):
        ALLOW.check(parse(src), Site("c.py", "c"))


# -- proposer -----------------------------------------------------------------------------

PROPOSER = """
class Proposer:
    def load_model(self, target_model):
        if supports_multimodal(target_model):
            if self.get_model_name(target_model) in ["A", "B"]:
                self.model.config.image_token_index = target_model.config.image_token_id
            elif self.get_model_name(target_model) == "PixtralForConditionalGeneration":
                self.model.config.image_token_index = (
                    target_model.config.vision_config.image_token_id
                )
            else:
                self.model.config.image_token_index = (
                    target_model.config.image_token_index
                )
"""

BRANCH = AddModelNameBranch(
    "KimiK25ForConditionalGeneration", "PixtralForConditionalGeneration", "media_placeholder_token_id", "p"
)


def test_proposer_branch_goes_between_pixtral_and_fallback():
    code = apply_twice(BRANCH, parse(PROPOSER), Site("e.py", "e"))
    assert (
        '            elif self.get_model_name(target_model) == "KimiK25ForConditionalGeneration":\n'
        "                # Added by patchkit (p): the image token is media_placeholder_token_id.\n"
        "                self.model.config.image_token_index = (\n"
        "                    target_model.config.media_placeholder_token_id\n"
        "                )\n"
        "            else:\n"
    ) in code


def test_proposer_refuses_without_fallback():
    no_else = PROPOSER.split("            else:")[0]
    with pytest.raises(Refusal, match="fallback"):
        BRANCH.transform(parse(no_else), Site("e.py", "e"))


def test_proposer_refuses_without_anchor():
    with pytest.raises(Refusal, match="found 0"):
        BRANCH.transform(parse(PROPOSER.replace("PixtralForConditionalGeneration", "Other")), Site("e.py", "e"))


# -- bytes --------------------------------------------------------------------------------


def test_crlf_and_untouched_bytes_survive():
    src = 'x = 1  # keep   spacing\r\neagle3_target_supported = ["llama"]\r\n'
    out = ALLOW.transform(cst.parse_module(src), Site("c.py", "c")).bytes
    assert out == b'x = 1  # keep   spacing\r\neagle3_target_supported = ["llama", "deepseek_v3", "kimi_k2"]\r\n'


@pytest.mark.parametrize(
    "kind, options",
    [("embedding-alias", _EMBED), ("head-alias", {"alias": "lm_head", "attribute": "output", "patch_id": "p"})],
)
def test_alias_without_a_target_class_is_a_refusal(kind, options):
    # _class was a staticmethod that named self: a site without a class raised NameError, not a Refusal
    codemod = CodemodRef.of(kind, **options).load()
    module = cst.parse_module("class Backbone:\n    pass\n")
    with pytest.raises(Refusal, match="without a target class"):
        codemod.check(module, Site("m.py", f"{MODELS}.m"))
