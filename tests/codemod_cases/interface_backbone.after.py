"""A causal LM holding its backbone as .model, with a one-line relative interfaces import."""

from torch import nn

from .interfaces import SupportsEagle3, SupportsLoRA, SupportsPP


class Model(nn.Module, SupportsPP, SupportsLoRA, SupportsEagle3):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}

    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        # Added by patchkit (p): the backbone in self.model captures these layers.
        self.model.aux_hidden_state_layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        # Added by patchkit (p): vLLM's default EAGLE-3 layer ids.
        num_layers = len(self.model.layers)
        return (2, num_layers // 2, num_layers - 3)

    def compute_logits(self, hidden_states):
        return hidden_states
