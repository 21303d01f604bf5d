"""A speculative config with a one-line allow-list."""


class SpeculativeConfig:
    def _verify_args(self):
        eagle3_target_supported = ["llama", "qwen", 'minicpm']
        if not any(t in self.model_type for t in eagle3_target_supported):
            raise ValueError(f"Eagle3 is only supported for {eagle3_target_supported} models.")
