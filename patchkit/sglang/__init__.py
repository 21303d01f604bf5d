"""Read-only facts about an installed SGLang release, read from its files without importing it (issue 44).

One wing, beside ``vllm/``; nothing here imports the vLLM wing or any patchkit subpackage above the base:

- :mod:`.contract`: every SGLang name relied on, with the file, function and releases it was read from;
- :mod:`.install`: the distribution (``sglang-X.Y.Z.dist-info``) on an interpreter's import path;
- :mod:`.classes`: names resolved through imports to class statements, and what a class holds through its bases;
- :mod:`.registry`: the ``EntryClass`` registry of ``sglang/srt/models/``, read statically;
- :mod:`.states`: each architecture's EAGLE-3 state and capture idiom;
- :mod:`.scan`: ``patchkit scan --target sglang``'s frozen report.
- :mod:`.drafts`: how the runner, each target's setter and the EAGLE-3 draft model read a draft (``doctor``).
"""
