"""A multimodal wrapper holding a causal LM as .language_model; absolute multi-line import."""

from vllm.model_executor.models.interfaces import (
    SupportsMultiModal,
    SupportsPP,
)


class Wrapper(
    nn.Module, SupportsMultiModal, SupportsPP
):
    def __init__(self, config):
        self.language_model = init_vllm_registered_model(config, architectures=["Model"])

    def get_language_model(self):
        return self.language_model
