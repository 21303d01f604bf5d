"""A speculative config with a one-per-line allow-list under the later name, one entry already there."""


class SpeculativeConfig:
    def _verify_args(self):
        aux_hidden_states_supported = [
            "llama",
            "kimi_k2",  # keep this comment
            "qwen",
            "deepseek_v3",
        ]
        return aux_hidden_states_supported
