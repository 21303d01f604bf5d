"""A backbone whose layers keep their own residual and return hidden_states alone."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)

    def forward(self, input_ids, positions):
        hidden_states = self.embed(input_ids)
        for layer in self.layers[self.start_layer:self.end_layer]:
            hidden_states = layer(positions, hidden_states)
        hidden_states = self.norm(hidden_states)
        return hidden_states
