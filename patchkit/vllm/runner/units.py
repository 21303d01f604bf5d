"""The vLLM units whose behaviour a patchkit verdict rests on, declared once each with what patchkit assumes.

patchkit reads vLLM's *names* from the install (:mod:`patchkit.vllm.runner.generations`: a name it does
not find makes a check "not checked"). What those names *do* is an assumption written into patchkit's
checks, codemods and advice. Each :class:`Unit` here is one function, method, class or declaration
whose behaviour such a verdict assumes, with the assumption in words. Its code is pinned to the
releases patchkit was qualified on (:mod:`patchkit.vllm.runner.pins`): where an install's code of a
unit matches none of them, every verdict resting on the unit says "not checked" and names it.

Facts (each unit read on the release files of vLLM 0.10.2 - 0.34.0; the first place found is used):

- ``vllm/model_executor/models/interfaces.py``: ``SupportsEagle3`` (0.10.2 on), ``supports_eagle3``,
  ``EagleModelMixin`` and its ``_maybe_add_hidden_state`` (0.18.0 on).
- V1 (``vllm/v1/worker/gpu_model_runner.py`` ``GPUModelRunner``, 0.10.2 - 0.33.0): the statements that
  read ``use_aux_hidden_state_outputs`` (set in ``__init__``; ``execute_model`` unpacks
  ``hidden_states, aux_hidden_states`` from the backbone's return when it is true), the statements
  calling ``set_aux_hidden_state_layers`` (``load_model``) and ``_get_eagle3_aux_layers_from_config``;
  the draft loader ``EagleProposer.load_model`` (``v1/spec_decode/eagle.py``; inherited from
  ``SpecDecodeBaseProposer`` there from 0.15.1, in ``llm_base_proposer.py`` from 0.20).
- V2 (``vllm/v1/worker/gpu/``, 0.18.0 on): ``GPUModelRunner``'s statements reading
  ``use_aux_hidden_state_outputs``; ``set_eagle3_aux_hidden_state_layers`` and
  ``get_eagle3_aux_layers_from_config`` (``spec_decode/eagle/eagle3_utils.py``); ``load_eagle_model``
  (``spec_decode/eagle/utils.py``).
- The runner selector: ``VLLM_USE_V2_MODEL_RUNNER``'s declaration and its entry in
  ``environment_variables`` (``vllm/envs.py``), ``VllmConfig.use_v2_model_runner`` (``config/vllm.py``,
  0.33.0).
- The draft's ids outside the runner: ``SpeculativeConfig``'s statements reading
  ``eagle_aux_hidden_state_layer_ids`` and ``_get_nested_config_value`` (``config/speculative.py``),
  ``update_eagle3`` (``transformers_utils/configs/speculators/algos.py``).
- The aux-state speculators other than EAGLE-3 (:mod:`patchkit.vllm.checkpoints.methods`; the config classes are
  in 0.34.0 only, ``EAGLEConfig``'s DFlash branch from 0.20.2, ``_get_dflash_fc_input_size`` from 0.32.0):
  ``_resolve_checkpoint_config_class`` (``v1/worker/gpu/spec_decode/speculator_config.py``, 0.34.0),
  ``DFlashSpeculatorConfig`` (``dflash/config.py``), ``DSparkSpeculatorConfig`` (``dspark/config.py``),
  ``ExtractHiddenStatesSpeculatorConfig`` (``extract_hidden_states_config.py``, 0.34.0), ``EAGLEConfig.__init__``
  (``transformers_utils/configs/eagle.py``), ``SpeculativeConfig.hf_config_override`` (``config/speculative.py``)
  and ``_get_dflash_fc_input_size`` (``model_executor/models/qwen3_dflash.py``).
- The start-up allow-list (0.10.2 - 0.20.x): ``SpeculativeConfig``'s statements reading
  ``eagle3_target_supported`` / ``aux_hidden_states_supported`` (``config/speculative.py``, or
  ``config.py`` before the config package).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from patchkit.vllm.release.contract import ALLOW_LIST_NAMES, MAYBE_ADD, MIXIN, PROTOCOL, SETTER
from patchkit.vllm.runner.generations import SELECTOR, SELECTOR_FILE

INTERFACES = "vllm/model_executor/models/interfaces.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V2_EAGLE = "vllm/v1/worker/gpu/spec_decode/eagle"
V2_SPECULATORS = "vllm/v1/worker/gpu/spec_decode"
SPECULATIVE = ("vllm/config/speculative.py", "vllm/config.py")
RETURN_FLAG = "use_aux_hidden_state_outputs"
IDS = "eagle_aux_hidden_state_layer_ids"


class Concern(Enum):
    """Which verdicts rest on a unit."""

    CAPTURE = "capture"
    """Every class's EAGLE-3 chain (the interface, the capture, the codemods that write them)."""
    RUNNER = "runner"
    """What the runner does with the target: selects it, loads the draft, sets the ids, unpacks the return."""
    IDS = "ids"
    """Which layers a draft's config makes vLLM capture (doctor's reading of the draft)."""
    ALLOW_LIST = "allow-list"
    """Which model types the start-up allow-list admits."""
    METHOD = "method"
    """Which speculative method vLLM picks for a draft, the class it builds and the input width that class takes
    (doctor's reading of a DFlash, DFlash2, DSpark or hidden-state-extraction draft)."""


@dataclass(frozen=True)
class Unit:
    """One vLLM unit whose behaviour a verdict assumes.

    Attributes:
        key: a stable name (the fingerprint data's key).
        what: the unit in words, shown in "not checked: vLLM X changed <what> (file:line) ..." lines.
        places: ``(relpath, name)`` pairs where the unit may be, the first found is used; ``name`` is
            ``Class``, ``Class.method``, ``function``, ``dict[KEY]`` (a module-level dict's entry) or a
            module-level annotated name.
        assumes: what patchkit assumes the unit does, in words.
        concern: which verdicts rest on it.
        generation: ``"V1"``/``"V2"`` for a unit of one runner generation, ``""`` for any.
        anchors: when given, only the unit's statements that read one of these names are pinned (a
            runner class changes with every release; the statements EAGLE-3 depends on seldom do).
        entries_free: the strings in list and tuple literals do not count (the allow-list's entries, which
            ``apply`` extends: the unit pinned is the rule that matches them).
        without: members of a class unit left out of it, being units of their own (a change to one is
            named once, and settled by its own exercise).
    """

    key: str
    what: str
    places: tuple[tuple[str, str], ...]
    assumes: str
    concern: Concern
    generation: str = ""
    anchors: tuple[str, ...] = ()
    entries_free: bool = False
    without: tuple[str, ...] = ()


UNITS: tuple[Unit, ...] = (
    Unit(
        "protocol",
        f"the {PROTOCOL} interface",
        ((INTERFACES, PROTOCOL),),
        f"declares {SETTER} and the default-id getter; from the mixin era their default bodies find the "
        f"backbone through get_language_model()/language_model/self, then .model, and hand it the ids",
        Concern.CAPTURE,
    ),
    Unit(
        "supports-check",
        "supports_eagle3",
        ((INTERFACES, "supports_eagle3"),),
        f"admits a model by isinstance against {PROTOCOL}: what the runner checks before setting the ids",
        Concern.CAPTURE,
    ),
    Unit(
        "mixin",
        f"the {MIXIN} class",
        ((INTERFACES, MIXIN),),
        f"keeps the aux layer ids in aux_hidden_state_layers, set by {SETTER}, read by {MAYBE_ADD}",
        Concern.CAPTURE,
        without=(MAYBE_ADD,),
    ),
    Unit(
        "capture-helper",
        f"{MIXIN}.{MAYBE_ADD}",
        ((INTERFACES, f"{MIXIN}.{MAYBE_ADD}"),),
        "appends hidden_states + residual (hidden_states alone when residual is None) to the list it is "
        "given when layer_idx is an aux layer, and returns that list: the capture patchkit writes assigns it",
        Concern.CAPTURE,
    ),
    Unit(
        "v1-return",
        f"GPUModelRunner's use of {RETURN_FLAG}",
        ((V1_RUNNER, "GPUModelRunner"),),
        "sets the flag for EAGLE-3 and then unpacks hidden_states, aux_hidden_states from the backbone's return",
        Concern.RUNNER,
        "V1",
        (RETURN_FLAG,),
    ),
    Unit(
        "v1-setter-call",
        f"GPUModelRunner's call of {SETTER}",
        ((V1_RUNNER, "GPUModelRunner"),),
        "calls the target's setter with the draft config's ids, else the target's default getter's",
        Concern.RUNNER,
        "V1",
        (SETTER,),
    ),
    Unit(
        "v1-reader",
        "GPUModelRunner._get_eagle3_aux_layers_from_config",
        ((V1_RUNNER, "GPUModelRunner._get_eagle3_aux_layers_from_config"),),
        f"returns the draft config's {IDS} unchanged (no offset), or None when it has none",
        Concern.IDS,
        "V1",
    ),
    Unit(
        "v1-loader",
        "the V1 draft loader",
        (
            ("vllm/v1/spec_decode/llm_base_proposer.py", "SpecDecodeBaseProposer.load_model"),
            ("vllm/v1/spec_decode/eagle.py", "SpecDecodeBaseProposer.load_model"),
            ("vllm/v1/spec_decode/eagle.py", "EagleProposer.load_model"),
        ),
        "loads the draft and reads the target's embedding, head and language model on the paths patchkit derives",
        Concern.RUNNER,
        "V1",
    ),
    Unit(
        "v2-return",
        f"the V2 GPUModelRunner's use of {RETURN_FLAG}",
        ((V2_RUNNER, "GPUModelRunner"),),
        "sets the flag for a speculator that uses aux states and unpacks hidden_states, aux_hidden_states",
        Concern.RUNNER,
        "V2",
        (RETURN_FLAG,),
    ),
    Unit(
        "v2-setter",
        "set_eagle3_aux_hidden_state_layers",
        ((f"{V2_EAGLE}/eagle3_utils.py", "set_eagle3_aux_hidden_state_layers"),),
        "refuses a target without the EAGLE-3 interface, then sets the draft config's ids, else the default getter's",
        Concern.RUNNER,
        "V2",
    ),
    Unit(
        "v2-reader",
        "get_eagle3_aux_layers_from_config",
        ((f"{V2_EAGLE}/eagle3_utils.py", "get_eagle3_aux_layers_from_config"),),
        f"reads the draft config's ids with the fields and offsets patchkit's draft reading follows "
        f"(top-level {IDS} unchanged; dflash_config.target_layer_ids, dspark_target_layer_ids and target_layer_ids "
        f"+ 1, the DSpark ids unchanged for the model types it names; dflash_config/eagle_config layer_ids unchanged)",
        Concern.IDS,
        "V2",
    ),
    Unit(
        "v2-loader",
        "load_eagle_model",
        ((f"{V2_EAGLE}/utils.py", "load_eagle_model"),),
        "loads the draft and reads the target's embedding, head and language model on the paths patchkit derives",
        Concern.RUNNER,
        "V2",
    ),
    Unit(
        "selector-flag",
        f"{SELECTOR}'s reading",
        ((SELECTOR_FILE, f"environment_variables[{SELECTOR}]"),),
        "reads the flag as a boolean that is unset (None or False, per its declaration) when not given",
        Concern.RUNNER,
    ),
    Unit(
        "selector-default",
        f"{SELECTOR}'s declared default",
        ((SELECTOR_FILE, SELECTOR),),
        "False: V1 unless the flag is 1; None: the config decides (VllmConfig.use_v2_model_runner)",
        Concern.RUNNER,
    ),
    Unit(
        "selector-config",
        "VllmConfig.use_v2_model_runner",
        (("vllm/config/vllm.py", "VllmConfig.use_v2_model_runner"),),
        "follows the flag when it is set, else picks V2 where Triton is present",
        Concern.RUNNER,
    ),
    Unit(
        "config-ids",
        f"SpeculativeConfig's reading of {IDS}",
        tuple((p, "SpeculativeConfig") for p in SPECULATIVE),
        f"passes the draft's {IDS} on unchanged",
        Concern.IDS,
        anchors=(IDS,),
    ),
    Unit(
        "nested-ids",
        "_get_nested_config_value",
        ((SPECULATIVE[0], "_get_nested_config_value"),),
        "reads a field of a draft config's nested section (a mapping or an object) unchanged",
        Concern.IDS,
    ),
    Unit(
        "speculators-ids",
        "update_eagle3",
        (("vllm/transformers_utils/configs/speculators/algos.py", "update_eagle3"),),
        f"copies a speculators-format draft's {IDS} unchanged",
        Concern.IDS,
    ),
    Unit(
        "method-pick",
        "_resolve_checkpoint_config_class",
        ((f"{V2_SPECULATORS}/speculator_config.py", "_resolve_checkpoint_config_class"),),
        "with no method given, takes the speculator config the draft class declares, else the first config class "
        "in the detection order whose matches() accepts the draft",
        Concern.METHOD,
    ),
    Unit(
        "method-dflash",
        "DFlashSpeculatorConfig",
        ((f"{V2_SPECULATORS}/dflash/config.py", "DFlashSpeculatorConfig"),),
        "matches a draft whose path contains 'dflash', wraps its config in EAGLEConfig for its base method, and "
        "turns uses_aux_hidden_states on",
        Concern.METHOD,
    ),
    Unit(
        "method-dspark",
        "DSparkSpeculatorConfig",
        ((f"{V2_SPECULATORS}/dspark/config.py", "DSparkSpeculatorConfig"),),
        "matches a draft whose path contains 'dspark', keeps a self-contained draft's config unwrapped (its "
        "architecture looked up as written), and inherits DFlash's use of aux states",
        Concern.METHOD,
    ),
    Unit(
        "method-extract",
        "ExtractHiddenStatesSpeculatorConfig",
        ((f"{V2_SPECULATORS}/extract_hidden_states_config.py", "ExtractHiddenStatesSpeculatorConfig"),),
        "turns uses_aux_hidden_states on and builds ExtractHiddenStatesModel from the target's config",
        Concern.METHOD,
    ),
    Unit(
        "method-arch",
        "EAGLEConfig.__init__",
        (("vllm/transformers_utils/configs/eagle.py", "EAGLEConfig.__init__"),),
        "rewrites a wrapped draft's architectures per method by the rule patchkit reads (arch if <test> else "
        "f'<prefix>{arch}')",
        Concern.METHOD,
    ),
    Unit(
        "method-rename",
        "SpeculativeConfig.hf_config_override",
        ((SPECULATIVE[0], "SpeculativeConfig.hf_config_override"),),
        "renames a draft's first architecture only by the tests patchkit reads (model_type equal to a name, a "
        "field set), before the method's config wraps it",
        Concern.METHOD,
    ),
    Unit(
        "dflash-width",
        "_get_dflash_fc_input_size",
        (("vllm/model_executor/models/qwen3_dflash.py", "_get_dflash_fc_input_size"),),
        "sizes a DFlash draft's fc as (target_hidden_size or hidden_size) x the number of ids the V2 reader gives, "
        "x the draft's num_hidden_layers when it gives none",
        Concern.METHOD,
    ),
    Unit(
        "allow-list",
        "the start-up allow-list",
        tuple((p, "SpeculativeConfig") for p in SPECULATIVE),
        "admits a target whose text model_type contains one of the listed names (a substring match)",
        Concern.ALLOW_LIST,
        anchors=ALLOW_LIST_NAMES,
        entries_free=True,
    ),
)
"""Every declared unit (the module docstring has the facts)."""


def unit(key: str) -> Unit:
    """The declared unit named ``key``.

    Raises:
        KeyError: no unit has that key.
    """
    for u in UNITS:
        if u.key == key:
            return u
    raise KeyError(key)
