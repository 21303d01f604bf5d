"""patchkit: exact, journaled, revertible patches that make EAGLE-3 work for DeepSeek-V2/V3 and
Kimi-K2.5 on installed vLLM releases that lack it (0.10.2 - 0.17.1).

Use the CLI (``patchkit apply --target vllm``) or the API in :mod:`patchkit.api`.
"""

__version__ = "0.1.0"
