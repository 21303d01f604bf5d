"""The acceptance watch: a vLLM statistics-logger plugin that says why speculation stopped paying (issue 26)."""
