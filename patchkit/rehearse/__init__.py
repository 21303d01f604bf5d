"""``patchkit rehearse``: a miniature of the user's model (:mod:`.miniature`) run through the
user's own vLLM engine (:mod:`.rehearsal`, driving :mod:`.engine_driver` as a script in the target
interpreter), compared with transformers' hidden states (:mod:`.rehearsal_result`)."""
