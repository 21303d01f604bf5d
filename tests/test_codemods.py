"""Each codemod on small files we write ourselves: patches, leaves alone, twice is a no-op, refuses."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from patchkit.codemods.allowlist import ExtendAllowList
from patchkit.codemods.base import Holder, Presence, Refusal, Site
from patchkit.codemods.capture import CaptureAuxHiddenStates
from patchkit.codemods.interface import AddEagle3Interface
from patchkit.codemods.proposer import AddModelNameBranch
from patchkit.vllm.source import ClassRef

MODELS = "vllm.model_executor.models"


def parse(code: str) -> cst.Module:
    return cst.parse_module(textwrap.dedent(code).lstrip("\n"))


def apply_twice(codemod, module: cst.Module, site: Site) -> str:
    assert codemod.check(module, site)[0] is Presence.ABSENT
    once = codemod.transform(module, site)
    assert codemod.check(once, site)[0] is Presence.PRESENT
    return once.code


# -- capture ------------------------------------------------------------------------------

BACKBONE = '''
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
'''

CAPTURE_SITE = Site(relpath="m.py", module=f"{MODELS}.m", class_name="Backbone")


def test_capture_patches_loop_init_and_return():
    code = apply_twice(CaptureAuxHiddenStates("p"), parse(BACKBONE), CAPTURE_SITE)
    assert "self.aux_hidden_state_layers: tuple[int, ...] = ()\n" in code
    assert "for layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), start=self.start_layer):" in code
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
    old = BACKBONE.replace("islice(self.layers, self.start_layer, self.end_layer)", "self.layers[self.start_layer:self.end_layer]")
    code = apply_twice(CaptureAuxHiddenStates("p"), parse(old), CAPTURE_SITE)
    assert "enumerate(self.layers[self.start_layer:self.end_layer], start=self.start_layer)" in code


def test_capture_refuses_two_loops():
    two = BACKBONE.replace(
        "        if not get_pp_group()",
        "        for layer in self.layers:\n            hidden_states, residual = layer(positions, hidden_states, residual)\n\n        if not get_pp_group()",
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

CAUSAL_LM = '''
from .interfaces import SupportsLoRA, SupportsPP


class Model(nn.Module, SupportsPP, SupportsLoRA):
    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)

    def compute_logits(self, hidden_states):
        return hidden_states
'''

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
    wrapper = '''
    from vllm.model_executor.models.interfaces import (
        SupportsMultiModal,
        SupportsPP,
    )


    class Wrapper(
        nn.Module, SupportsMultiModal, SupportsPP
    ):
        def __init__(self, config):
            self.language_model = init_vllm_registered_model(config, architectures=["Model"])
    '''
    holder = Holder("language_model", "causal_lm", ClassRef(f"{MODELS}.m", "Model", "m.py", 5), 3)
    site = Site("w.py", f"{MODELS}.w", "Wrapper", holder)
    code = apply_twice(AddEagle3Interface("p"), parse(wrapper), site)
    assert "import (\n    SupportsEagle3,\n    SupportsMultiModal,\n    SupportsPP,\n)" in code
    assert "    nn.Module, SupportsMultiModal, SupportsPP, SupportsEagle3\n):" in code
    assert "        self.language_model.set_aux_hidden_state_layers(layers)\n" in code
    assert "        return self.language_model.get_eagle3_aux_hidden_state_layers()\n" in code


def test_interface_adds_its_own_import_where_the_module_has_none():
    # 0.33.0 domyn_edge.py imports nothing from interfaces: the import is added after the last one
    no_import = CAUSAL_LM.replace("from .interfaces import SupportsLoRA, SupportsPP\n", "from .other import SupportsLoRA, SupportsPP\n")
    site = Site("m.py", f"{MODELS}.m", "Model", BACKBONE_HOLDER)
    out = AddEagle3Interface("p").transform(parse(no_import), site).code
    assert "from .other import SupportsLoRA, SupportsPP\nfrom vllm.model_executor.models.interfaces import SupportsEagle3\n" in out
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
    code = apply_twice(ALLOW, parse('def f(self):\n    eagle3_target_supported = ["llama", "qwen"]\n'), Site("c.py", "c"))
    assert 'eagle3_target_supported = ["llama", "qwen", "deepseek_v3", "kimi_k2"]' in code


def test_allow_list_one_per_line_with_trailing_comma():
    src = 'def f(self):\n    aux_hidden_states_supported = [\n        "llama",\n        "qwen",\n    ]\n'
    code = apply_twice(ALLOW, parse(src), Site("c.py", "c"))
    assert code.endswith('    aux_hidden_states_supported = [\n        "llama",\n        "qwen",\n        "deepseek_v3",\n        "kimi_k2",\n    ]\n')


def test_allow_list_only_adds_what_is_missing():
    src = 'x = 1\neagle3_target_supported = ["llama", "kimi_k2"]\n'
    code = ALLOW.transform(parse(src), Site("c.py", "c")).code
    assert 'eagle3_target_supported = ["llama", "kimi_k2", "deepseek_v3"]' in code


def test_allow_list_refuses_two_lists():
    src = 'eagle3_target_supported = ["llama"]\naux_hidden_states_supported = ["llama"]\n'
    with pytest.raises(Refusal, match="found 2"):
        ALLOW.check(parse(src), Site("c.py", "c"))


# -- proposer -----------------------------------------------------------------------------

PROPOSER = '''
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
'''

BRANCH = AddModelNameBranch("KimiK25ForConditionalGeneration", "PixtralForConditionalGeneration", "media_placeholder_token_id", "p")


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
