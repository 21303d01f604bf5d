"""The chain wing: the recursive check of one architecture's classes, link by link, with evidence.

- :mod:`.links`: the whole check ``verify`` runs per architecture, and its platform branches.
- :mod:`.capture`: a backbone's capture, against vLLM's semantics and the residual stream.
- :mod:`.load_path`: the runner's and proposer's paths followed through a target class.
- :mod:`.kinds`: ``Check.kind`` values and labels of the chain's nodes.
"""
