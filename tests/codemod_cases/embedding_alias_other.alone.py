"""A backbone that already defines embed_tokens another way."""


class Backbone(nn.Module):
    embed_tokens = None

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
