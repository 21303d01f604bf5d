"""The class wing: what a target model class holds and runs, read from its source.

- :mod:`.composition`: what a class holds in an attribute, resolved from ``__init__``.
- :mod:`.class_attrs`: where an attribute is assigned, the language model, multimodality, the config class.
- :mod:`.loadpath`: whether the EAGLE proposer can load a draft through a wrapper.
- :mod:`.loops`: the decoder-layer loop of a backbone ``forward``.
- :mod:`.layer_classes`: the decoder-layer classes a backbone builds into ``self.layers``.
- :mod:`.ast_reads`: small statement-level reads the stream wing shares.
"""
