"""A loop that already has a global index (range over the layer ids): its header is kept."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)

    def forward(self, input_ids, positions):
        hidden_states = self.embed(input_ids)
        residual = None
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states
