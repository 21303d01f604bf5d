"""A causal LM on a release whose SupportsEagle3 has default methods: only the base and import."""

from .interfaces import SupportsPP


class Model(nn.Module, SupportsPP):
    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)
