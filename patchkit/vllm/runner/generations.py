"""vLLM's model-runner generations, declared once each: what patchkit reads about a runner, and where.

One :class:`Generation` per runner generation. Each names, as module paths and attribute names only
(no release numbers), every runner fact a patchkit check rests on; :mod:`patchkit.vllm.runner.serving`
finds them in an install and says which generation the serve uses.

Facts (read on the release files of vLLM 0.20.2, 0.33.0 and 0.34.0):

- **V1** (``vllm/v1/worker/gpu_model_runner.py`` ``GPUModelRunner``; 0.10.2 - 0.33.0, deleted in
  0.34.0). The draft is loaded by ``EagleProposer.load_model`` (``vllm/v1/spec_decode/eagle.py``;
  from 0.20 inherited from ``SpecDecodeBaseProposer`` in ``llm_base_proposer.py``), which the runner
  keeps at ``model_runner.drafter``; the draft module is ``drafter.model``. The aux ids are set in
  ``gpu_model_runner.py``.
- **V2** (``vllm/v1/worker/gpu/model_runner.py`` ``GPUModelRunner``; 0.18.0 on, the only runner from
  0.34.0). The draft is loaded by the module-level ``load_eagle_model(target_model, vllm_config)``
  (``vllm/v1/worker/gpu/spec_decode/eagle/utils.py``), called by ``EagleSpeculator.load_model``
  (0.20.2) or ``load_draft_model`` (0.34.0), which keeps it at ``self.model``; the runner keeps the
  speculator at ``model_runner.speculator``, so the draft module is ``speculator.model``. The aux ids
  are set in ``gpu/spec_decode/eagle/eagle3_utils.py`` (``set_eagle3_aux_hidden_state_layers``), from
  the draft config's fields read by ``get_eagle3_aux_layers_from_config`` there, else the target's
  default getter. The draft module's ``combine_hidden_states`` receives the concatenated aux states in
  both generations (V1: ``eagle.py``/``llm_base_proposer.py``; V2: ``eagle/speculator.py`` 0.20.2,
  ``target_dependent_ar/speculator.py`` 0.34.0).
- **Selection** (``vllm/envs.py``): releases carrying both read ``VLLM_USE_V2_MODEL_RUNNER``. Its
  declared default is ``False`` on 0.20.2 (V1 unless the flag is 1) and ``None`` on 0.33.0, where
  ``VllmConfig.use_v2_model_runner`` (``config/vllm.py``) picks V2 unless Triton is missing or a
  feature V2 lacks is asked for. 0.34.0 has no flag: V2 is the only runner.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    """One thing patchkit reads in an install's vLLM, and where it looks.

    Attributes:
        what: what the fact is, in words (shown in "not checked: ..." lines).
        relpath: the file under site-packages (``vllm/...py``).
        name: the class, ``Class.method`` or function looked for in it ("" for the file alone).
    """

    what: str
    relpath: str
    name: str = ""

    @property
    def where(self) -> str:
        """``relpath`` and, with a name, ``relpath:name``: where patchkit looked."""
        return f"{self.relpath} {self.name}".strip()


@dataclass(frozen=True)
class Generation:
    """One runner generation, declared.

    Attributes:
        name: ``"V1"`` or ``"V2"``.
        runner: the model runner's file (present = the generation is in the install).
        runner_module: its module (the driver matches the live runner's class against it).
        runner_class: the runner class name in it.
        loader_module: the module holding the draft loader.
        loader_class: the class whose method loads the draft ("" for a module-level function).
        loader: the method or function that loads the draft and reads the target.
        loader_target: the loader's parameter holding the target model.
        aux_setter: the file that calls ``set_aux_hidden_state_layers`` on the target.
        aux_reader: the function in ``aux_setter`` reading the draft config's aux-id fields ("" when the
            runner reads no draft field itself, V1: the fields are read by vLLM's config classes).
        drafter: the attribute path from the worker's ``model_runner`` to the draft module.
    """

    name: str
    runner: str
    runner_module: str
    runner_class: str
    loader_module: str
    loader_class: str
    loader: str
    loader_target: str
    aux_setter: str
    aux_reader: str
    drafter: tuple[str, ...]

    @property
    def loader_file(self) -> str:
        """The loader module's file under site-packages."""
        return self.loader_module.replace(".", "/") + ".py"

    @property
    def loader_name(self) -> str:
        """``Class.method`` or ``function``."""
        return f"{self.loader_class}.{self.loader}" if self.loader_class else self.loader

    def for_driver(self) -> dict:
        """What rehearse's engine driver needs to find the live draft module (JSON-ready): ``name``,
        ``module``, ``cls`` and ``drafter`` (:mod:`patchkit.rehearse.engine_driver` ``_drafter``)."""
        return {
            "name": self.name,
            "module": self.runner_module,
            "cls": self.runner_class,
            "drafter": list(self.drafter),
        }

    def facts(self) -> tuple[Fact, ...]:
        """Every fact of this generation a check may rest on, each with where patchkit looks."""
        out = [
            Fact("the model runner", self.runner, self.runner_class),
            Fact("the draft loader", self.loader_file, self.loader_name),
            Fact("the aux-id setter", self.aux_setter, "set_aux_hidden_state_layers"),
        ]
        if self.aux_reader:
            out.append(Fact("the draft config's aux-id reader", self.aux_setter, self.aux_reader))
        return tuple(out)


V1 = Generation(
    name="V1",
    runner="vllm/v1/worker/gpu_model_runner.py",
    runner_module="vllm.v1.worker.gpu_model_runner",
    runner_class="GPUModelRunner",
    loader_module="vllm.v1.spec_decode.eagle",
    loader_class="EagleProposer",
    loader="load_model",
    loader_target="target_model",
    aux_setter="vllm/v1/worker/gpu_model_runner.py",
    aux_reader="",
    drafter=("drafter", "model"),
)
"""The V1 runner and its EAGLE proposer (module docstring: facts and releases)."""

V2 = Generation(
    name="V2",
    runner="vllm/v1/worker/gpu/model_runner.py",
    runner_module="vllm.v1.worker.gpu.model_runner",
    runner_class="GPUModelRunner",
    loader_module="vllm.v1.worker.gpu.spec_decode.eagle.utils",
    loader_class="",
    loader="load_eagle_model",
    loader_target="target_model",
    aux_setter="vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py",
    aux_reader="get_eagle3_aux_layers_from_config",
    drafter=("speculator", "model"),
)
"""Model Runner V2 and its EAGLE speculator (module docstring: facts and releases)."""

GENERATIONS = (V1, V2)
"""Every declared generation, oldest first."""

SELECTOR_FILE = "vllm/envs.py"
"""Where a release declares the environment flag that picks V2 over V1."""
SELECTOR = "VLLM_USE_V2_MODEL_RUNNER"
"""The flag (``1``: V2, ``0``: V1; unset: the release's declared default)."""

COMBINE = "combine_hidden_states"
"""The draft module's method that receives the concatenated aux states (both generations)."""
