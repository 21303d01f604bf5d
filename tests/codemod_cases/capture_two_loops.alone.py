"""Two decoder-layer loops in one forward: which one is the stream is unclear, so it refuses."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)

    def forward(self, input_ids, positions):
        hidden_states, residual = self.embed(input_ids), None
        for layer in self.layers[: self.end_layer // 2]:
            hidden_states, residual = layer(positions, hidden_states, residual)
        for layer in self.layers[self.end_layer // 2 :]:
            hidden_states, residual = layer(positions, hidden_states, residual)
        return hidden_states
