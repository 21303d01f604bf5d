"""The interfaces: the Typer CLI (:mod:`.cli`), its rendering (:mod:`.render`), the Ray cluster
runner and its view (:mod:`.cluster`, :mod:`.cluster_view`) and ``explain``."""
