"""A class with native EAGLE-3 support: base and both methods are there already."""

from .interfaces import SupportsEagle3, SupportsPP


class Model(nn.Module, SupportsPP, SupportsEagle3):
    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.model.aux_hidden_state_layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        num_layers = len(self.model.layers)
        return (2, num_layers // 2, num_layers - 3)
