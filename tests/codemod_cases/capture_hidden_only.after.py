"""A backbone whose layers keep their own residual and return hidden_states alone."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)
        # Added by patchkit (p): global layer ids whose input EAGLE-3 captures.
        self.aux_hidden_state_layers: tuple[int, ...] = ()

    def forward(self, input_ids, positions):
        hidden_states = self.embed(input_ids)
        # Added by patchkit (p): EAGLE-3 aux hidden states (residual stream entering each requested global layer id).
        aux_hidden_states = []
        for layer_idx, layer in enumerate(self.layers[self.start_layer:self.end_layer], start=self.start_layer):
            if layer_idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(positions, hidden_states)
        if self.end_layer == len(self.layers) and self.end_layer in self.aux_hidden_state_layers:
            aux_hidden_states.append(hidden_states)
        hidden_states = self.norm(hidden_states)
        if len(aux_hidden_states) > 0:
            return hidden_states, aux_hidden_states
        return hidden_states
