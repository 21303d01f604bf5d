"""A backbone in the A2/A3 form, patched with the EagleModelMixin calls."""

from itertools import islice

from .interfaces import EagleModelMixin, SupportsPP


class Backbone(nn.Module, SupportsPP, EagleModelMixin):
    def __init__(self, config):
        super().__init__()
        self.start_layer, self.end_layer, self.layers = make_layers(config.n)

    def forward(self, input_ids, positions, intermediate_tensors):
        if get_pp_group().is_first_rank:
            hidden_states = self.embed(input_ids)
            residual = None
        else:
            hidden_states = intermediate_tensors["hidden_states"]
            residual = intermediate_tensors["residual"]

        # Added by patchkit (p): EAGLE-3 aux hidden states (residual stream entering each requested global layer id).
        aux_hidden_states = self._maybe_add_hidden_state([], self.start_layer, hidden_states, residual)
        for layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), start=self.start_layer):
            hidden_states, residual = layer(positions, hidden_states, residual)
            self._maybe_add_hidden_state(aux_hidden_states, layer_idx + 1, hidden_states, residual)

        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})

        hidden_states, _ = self.norm(hidden_states, residual)
        if len(aux_hidden_states) > 0:
            return hidden_states, aux_hidden_states
        return hidden_states
