"""Two allow-lists in one file: ambiguous, so it refuses."""

eagle3_target_supported = ["llama"]
aux_hidden_states_supported = ["llama"]
