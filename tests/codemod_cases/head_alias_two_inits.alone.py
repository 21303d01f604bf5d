"""A causal LM with two __init__ definitions: where to add the alias is unclear, so it refuses."""


class Model(nn.Module):
    def __init__(self, config):
        self.output = ParallelLMHead(config.vocab_size, config.hidden_size)

    if TYPE_CHECKING:
        pass

    def __init__(self, config, prefix=""):  # noqa: F811
        self.output = ParallelLMHead(config.vocab_size, config.hidden_size)
