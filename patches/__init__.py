"""patchkit's patch definitions, installed as ``patchkit.patches``.

One module per patch; each defines ``PATCH``, a :class:`patchkit.plan.spec.Patch` value. The set
here makes EAGLE-3 speculative decoding work for DeepSeek-V2/V3 and Kimi-K2.5 on vLLM releases
of the A1 contract (0.10.2 - 0.17.1); from 0.18.0 upstream vLLM has the same support natively.
"""
