"""The checkpoint wing: what a target's or a draft's folder holds, and how a release reads a draft.

- :mod:`.config`: a checkpoint's ``config.json`` and what doctor knows about the target.
- :mod:`.drafts`: how a release reads an EAGLE-3 draft (fields, formats, architectures, stages).
- :mod:`.vocabulary`: which tokenizer a draft was trained for.
- :mod:`.weights`: tensor names and safetensors headers, without a tensor library.
"""
