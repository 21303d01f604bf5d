"""The plugin wing: vLLM's entry-point groups patchkit's plugins use, read from the release.

- :mod:`.stat_loggers`: the ``vllm.stat_logger_plugins`` group the acceptance watch joins. (The guard's
  ``vllm.general_plugins`` group is in every release patchkit patches:
  :data:`patchkit.vllm.release.contract.GENERAL_PLUGINS_FROM`.)
"""
