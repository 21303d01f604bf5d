"""A causal LM holding its backbone as .model, with a one-line relative interfaces import."""

from torch import nn

from .interfaces import SupportsLoRA, SupportsPP


class Model(nn.Module, SupportsPP, SupportsLoRA):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}

    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)

    def compute_logits(self, hidden_states):
        return hidden_states
