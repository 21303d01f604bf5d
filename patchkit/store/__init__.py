"""The store: the journal of every change (a pip-style transaction) and the checks made before a
file is written (:mod:`.journal`, :mod:`.preflight`)."""
