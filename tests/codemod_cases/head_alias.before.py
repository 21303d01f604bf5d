"""A causal LM that names its head output."""


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)
        self.output = ParallelLMHead(config.vocab_size, config.hidden_size)

    def compute_logits(self, hidden_states):
        return self.logits_processor(self.output, hidden_states)
