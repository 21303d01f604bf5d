"""The store: the journal of every change (a pip-style transaction) and the checks made before a
file is written.

:mod:`.records` (what ``journal.json`` holds, read), :mod:`.journal` (the transaction that writes
it, :func:`~.journal.journal_for`), :mod:`.files` (digests, atomic writes, bytecode), :mod:`.lock`
(the install's ``flock``) and :mod:`.preflight` (the refusals before planning, and the
permission checks before the first write)."""
