"""Reading an EAGLE-3 draft's ``config.json`` as a given vLLM release will read it: the draft half of ``doctor``.

:func:`patchkit.checks.drafts.checklist.draft_checks` checks the draft class vLLM builds, whether
this release can load the draft's ``model_type`` at all (:mod:`.identity`), the vocabulary, judged
from the sizes, the draft's ``d2t``/``t2d`` and the tokenizers (:mod:`.vocab`,
:mod:`patchkit.vllm.checkpoints.vocabulary`), the aux layer ids vLLM will capture (with the id convention of
the field they come from), the order the states reach the draft in, which ids reach the draft
under pipeline parallelism (:mod:`.aux_ids`), and the draft's input width (:mod:`.width`).

What the release reads, and the id conventions every check leans on, are read once from the
release's own files by :mod:`patchkit.vllm.checkpoints.drafts`; the facts found and the context the checks
share are :mod:`.context`'s.
"""
