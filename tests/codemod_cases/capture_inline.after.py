"""A decoder backbone in the A1 form: islice loop, layers return (hidden_states, residual)."""

from itertools import islice


class Backbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)
        self.norm = RMSNorm(config.hidden_size)
        # Added by patchkit (p): global layer ids whose input EAGLE-3 captures.
        self.aux_hidden_state_layers: tuple[int, ...] = ()

    def forward(self, input_ids, positions, intermediate_tensors):
        if get_pp_group().is_first_rank:
            hidden_states = self.embed(input_ids)
            residual = None
        else:
            hidden_states = intermediate_tensors["hidden_states"]
            residual = intermediate_tensors["residual"]

        # Added by patchkit (p): EAGLE-3 aux hidden states (residual stream entering each requested global layer id).
        aux_hidden_states = []
        for layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), start=self.start_layer):
            if layer_idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = layer(positions, hidden_states, residual)
        if self.end_layer == len(self.layers) and self.end_layer in self.aux_hidden_state_layers:
            aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)

        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})

        hidden_states, _ = self.norm(hidden_states, residual)
        if len(aux_hidden_states) > 0:
            return hidden_states, aux_hidden_states
        return hidden_states


class Other:  # a second class of the module: never touched
    def forward(self, x):
        return x
