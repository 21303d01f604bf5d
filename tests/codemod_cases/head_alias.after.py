"""A causal LM that names its head output."""


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Backbone(config)
        self.output = ParallelLMHead(config.vocab_size, config.hidden_size)

    @property
    def lm_head(self):
        # Added by patchkit (p):
        # vLLM's EAGLE proposer reads .lm_head to share the target's head with the draft;
        # this class calls it output.
        return self.output

    def compute_logits(self, hidden_states):
        return self.logits_processor(self.output, hidden_states)
