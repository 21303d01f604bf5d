"""A backbone that names its embedding word_embeddings."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)

    def forward(self, input_ids):
        return self.word_embeddings(input_ids)
