"""An allow-list that already admits every entry."""

eagle3_target_supported = ["llama", "deepseek_v3", "kimi_k2"]
