"""An older backbone: a slice loop, and no residual bound before it (patchkit binds it to None)."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)

    def forward(self, input_ids, positions):
        hidden_states = self.embed(input_ids)
        for layer in self.layers[self.start_layer:self.end_layer]:
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states
