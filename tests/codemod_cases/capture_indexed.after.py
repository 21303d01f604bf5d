"""A loop that already has a global index (range over the layer ids): its header is kept."""


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)
        # Added by patchkit (p): global layer ids whose input EAGLE-3 captures.
        self.aux_hidden_state_layers: tuple[int, ...] = ()

    def forward(self, input_ids, positions):
        hidden_states = self.embed(input_ids)
        residual = None
        # Added by patchkit (p): EAGLE-3 aux hidden states (residual stream entering each requested global layer id).
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.aux_hidden_state_layers:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            layer = self.layers[i]
            hidden_states, residual = layer(positions, hidden_states, residual)
        if self.end_layer == len(self.layers) and self.end_layer in self.aux_hidden_state_layers:
            aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        if len(aux_hidden_states) > 0:
            return hidden_states, aux_hidden_states
        return hidden_states
