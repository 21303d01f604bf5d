"""A multimodal wrapper holding a causal LM as .language_model; absolute multi-line import."""

from vllm.model_executor.models.interfaces import (
    SupportsEagle3,
    SupportsMultiModal,
    SupportsPP,
)


class Wrapper(
    nn.Module, SupportsMultiModal, SupportsPP, SupportsEagle3
):
    def __init__(self, config):
        self.language_model = init_vllm_registered_model(config, architectures=["Model"])

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        # Added by patchkit (p): forward to the language model in self.language_model.
        self.language_model.set_aux_hidden_state_layers(layers)

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        # Added by patchkit (p): forward to the language model in self.language_model.
        return self.language_model.get_eagle3_aux_hidden_state_layers()

    def get_language_model(self):
        return self.language_model
