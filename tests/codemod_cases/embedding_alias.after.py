"""A backbone that names its embedding word_embeddings."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)

    @property
    def embed_tokens(self):
        # Added by patchkit (p):
        # vLLM's EAGLE proposer reads .embed_tokens to share the target's embedding with the draft;
        # this backbone calls it word_embeddings.
        return self.word_embeddings

    def forward(self, input_ids):
        return self.word_embeddings(input_ids)
