"""The interfaces are imported with '*' only: there is no import to extend, and no class base to add."""

from .interfaces import *


class Model:
    def __init__(self, config):
        self.model = Backbone(config)
