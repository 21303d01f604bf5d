"""patchkit's acceptance watch: the ``vllm.stat_logger_plugins`` entry point patchkit installs into a serving
environment.

This file is copied, byte for byte, into the serving environment as ``patchkit_watch/watch.py``
(:mod:`patchkit.watch.watch` writes it, with ``watch.json`` beside it and a
``patchkit_watch-X.dist-info`` whose ``entry_points.txt`` names :class:`AcceptanceWatch`). It runs
there, in vLLM's front-end process, on the serving environment's Python, without patchkit: the
standard library and what vLLM gives it (its ``StatLoggerBase``, the configs and the counters).
It never writes a file, never raises into vLLM and never stops the serve.

Where vLLM calls it (:mod:`patchkit.vllm.plugins.stat_loggers` holds these facts, 0.11.1 - 0.33.0):
``AsyncLLM.__init__`` (``vllm serve``) loads the group and builds one logger per engine,
``AcceptanceWatch(vllm_config, engine_index)``; then ``record(scheduler_stats, iteration_stats,
...)`` once per batch of engine outputs, where ``scheduler_stats.spec_decoding_stats`` holds that
step's ``num_drafts`` and ``num_accepted_tokens_per_pos``. The offline ``LLM`` class loads no
stat-logger plugin.

What it does:

1. at start, when the served config speculates with ``method: eagle3`` (or another method of ``watch.json``'s
   ``methods``: the aux-state speculators the install serves, DFlash and DSpark on 0.34.0), it reads ``watch.json``
   (what patchkit knew at install time: which fields each model runner of this release reads the
   draft's ids from, the target's default ids, the architectures whose capture patchkit wrote) and
   the number of drafts to wait for and the threshold (:data:`ENV_DRAFTS`, :data:`ENV_THRESHOLD`,
   else the install's values);
2. on every step it adds the step's counters (a few additions);
3. once the drafts counted reach that number, it compares first-position acceptance (drafts
   whose first token was accepted / drafts) with the threshold. Below it, it logs ONE warning
   (logger ``vllm.patchkit_watch``) naming the acceptance per position, the draft's ids and the
   ids the runner uses, the likeliest causes (:data:`CAUSES`, likeliest first) and the ``patchkit
   doctor`` / ``patchkit rehearse`` commands to run next; then it stops watching. At or above it,
   it starts counting the next window.

Any exception inside the watch turns it off (logged once at debug level); vLLM carries on.
"""

import importlib
import logging
import os
import shlex
import sys

try:  # the serving environment: plugin_file.py beside this file, in the plugin's package
    from .plugin_file import read_json
except ImportError:  # patchkit's own tree
    from patchkit.store.plugin_file import read_json

DATA_FORMAT = 1
"""The format of ``watch.json`` this watch reads (:mod:`patchkit.watch.watch` writes it)."""
PREFIX = "patchkit watch:"
"""How the watch's line starts."""
ENV_DRAFTS = "PATCHKIT_WATCH_DRAFTS"
"""Drafts to count before judging (a positive integer); overrides the install's ``--drafts``."""
ENV_THRESHOLD = "PATCHKIT_WATCH_THRESHOLD"
"""First-position acceptance below which the watch speaks (0 to 1); overrides ``--threshold``."""
OTHER_VOCABULARY = "other-vocabulary"
ID_CONVENTION = "id-convention"
DEFAULT_IDS = "default-ids"
PATCHED_CAPTURE = "patched-capture"
UNKNOWN = "unknown"
CAUSES = (OTHER_VOCABULARY, ID_CONVENTION, DEFAULT_IDS, PATCHED_CAPTURE, UNKNOWN)
"""The cause codes the line names (``(1) code: why; (2) ...``), in the order they are ranked (patchkit's
``patchkit.watch.watch.Cause`` has the same values)."""
_HERE = os.path.dirname(os.path.abspath(__file__))
_LOG = logging.getLogger("vllm.patchkit_watch")


def read_data(folder=_HERE):
    """``watch.json`` beside this file: a dict, or raises ``ValueError`` (unreadable, other format)."""
    return read_json(os.path.join(folder, "watch.json"), DATA_FORMAT, "this watch")


def settings(data, environ=os.environ):
    """``(drafts, threshold, problems)``: the install's values, overridden by valid environment values.

    An invalid environment value is named in ``problems`` and the install's value is kept.
    """
    drafts, threshold, problems = int(data.get("drafts", 200)), float(data.get("threshold", 0.2)), []
    raw = environ.get(ENV_DRAFTS)
    if raw is not None:
        try:
            value = int(raw)
            if value < 1:
                raise ValueError
            drafts = value
        except ValueError:
            problems.append("{}={!r} is not a positive integer".format(ENV_DRAFTS, raw))
    raw = environ.get(ENV_THRESHOLD)
    if raw is not None:
        try:
            value = float(raw)
            if not 0.0 <= value <= 1.0:
                raise ValueError
            threshold = value
        except ValueError:
            problems.append("{}={!r} is not a number from 0 to 1".format(ENV_THRESHOLD, raw))
    return drafts, threshold, problems


def _base():
    """vLLM's ``StatLoggerBase``, named by ``watch.json`` (``module:Class``); raises ImportError when absent."""
    try:
        module, _, name = read_data()["base_class"].partition(":")
    except (ValueError, KeyError) as exc:
        raise ImportError("patchkit watch: {}; run 'patchkit watch install' again".format(exc))
    return getattr(importlib.import_module(module), name)


def default_ids(data, n):
    """The target's default aux ids for ``n`` layers, from the install's terms ``[[mult, div, add], ...]``."""
    return [n * m // d + a for m, d, a in data["default_ids"]["terms"]]


def runner_in_use(data, config, environ=os.environ):
    """The model runner this serve runs (``v1``/``v2`` of the install's ``runner_choice``), or None when unknown.

    The install's one runner where it holds one (``only``: 0.34.0's V2), else the config's property
    (``use_v2_model_runner``) where it exists, else the environment variable (``VLLM_USE_V2_MODEL_RUNNER``,
    default ``0``).
    """
    choice = data.get("runner_choice")
    if not isinstance(choice, dict):
        return None
    if choice.get("only"):  # the install holds one runner (0.34.0: V2 alone): no flag or property decides
        return choice["only"]
    try:
        flag = getattr(config, choice["property"])
    except Exception:  # noqa: BLE001 - absent on older releases (or it raised): the environment decides
        try:
            flag = bool(int(environ.get(choice["env"], "0") or "0"))
        except ValueError:
            return None
    return choice["v2"] if flag else choice["v1"]


def _ids(value):
    if isinstance(value, (list, tuple)) and value and all(isinstance(i, int) for i in value):
        return [int(i) for i in value]
    return None


def _reader_pick(reader, declared):
    """``(ids, source)`` one reader of the data file picks from the draft's fields (``declared``), in the
    reader's own order (patchkit's :class:`IdReader` ``order``), or None: the target's default decides."""
    top = declared["top"]
    for key in reader.get("order") or ("top", "nested", "target", "layer_ids"):
        if key == "top" and reader["top_level"] and top:
            return top, "top level"
        if top:
            continue
        if key == "nested" and reader["nested"] and declared["nested"]:
            return [i + reader["nested_offset"] for i in declared["nested"]], "eagle_config"
        if key == "dflash" and reader.get("dflash") and declared["dflash"]:
            return [i + reader.get("dflash_offset", 0) for i in declared["dflash"]], "dflash_config"
        if key == "dspark" and reader.get("dspark") and declared["dspark"]:
            kept = declared["model_type"] in (reader.get("dspark_kept") or ())
            return [i + (0 if kept else 1) for i in declared["dspark"]], "top level"
        if key == "target" and reader.get("target_layer_ids") and declared["target"]:  # 0.33.0 - 0.34.0's V2
            return [i + 1 for i in declared["target"]], "top level"
        if key == "layer_ids" and reader.get("dflash_layer_ids") and declared["dflash_layer_ids"]:
            return declared["dflash_layer_ids"], "dflash_config"
        if key == "layer_ids" and reader.get("layer_ids") and declared["layer_ids"]:
            return declared["layer_ids"], "eagle_config"
    return None


def reading(data, config):
    """What the draft records and what each model runner of this release captures, from the served config.

    Returns a dict: ``draft_ids`` (or None), ``draft_field`` (``top level``, ``eagle_config`` or
    None), ``default`` (the target's default ids), ``runners``: ``[(runner, ids, source)]`` with
    ``source`` one of ``top level``, ``eagle_config``, ``default``; ``nested_offset`` per runner
    under ``offsets``; ``vocab``: ``(draft, target)``; ``architecture``; ``model``; ``draft``.
    """
    model = config.model_config
    spec = config.speculative_config
    hf = spec.draft_model_config.hf_config
    field = data["ids_field"]
    top = _ids(getattr(hf, field, None))
    nested_config = getattr(hf, data["eagle_config"], None)
    nested = _ids(nested_config.get(field)) if isinstance(nested_config, dict) else None
    names = data.get("fields") or {"target": "target_layer_ids", "layer_ids": "layer_ids"}
    layer_key = names.get("layer_ids", "layer_ids")
    dflash_config = getattr(hf, names.get("dflash_config", ""), None) if names.get("dflash_config") else None
    dflash_config = dflash_config if isinstance(dflash_config, dict) else {}
    declared = {
        "top": top,
        "nested": nested,
        "dflash": _ids(dflash_config.get(names.get("target", "target_layer_ids"))),
        "dspark": _ids(getattr(hf, names["dspark"], None)) if names.get("dspark") else None,
        "target": _ids(getattr(hf, names.get("target", "target_layer_ids"), None)),
        "dflash_layer_ids": _ids(dflash_config.get(layer_key)),
        "layer_ids": _ids(nested_config.get(layer_key)) if isinstance(nested_config, dict) else None,
        "model_type": getattr(hf, "model_type", None),
    }
    n = int(getattr(model.hf_text_config, "num_hidden_layers", 0) or 0)
    default = default_ids(data, n)
    runners, offsets = [], {}
    readers = data.get("readers") or []
    running = runner_in_use(data, config)
    if any(r["runner"] == running for r in readers):
        readers = [r for r in readers if r["runner"] == running]
    for reader in readers or [
        {"runner": running or "model runner", "top_level": False, "nested": False, "nested_offset": 0}
    ]:
        offsets[reader["runner"]] = reader["nested_offset"]
        picked = _reader_pick(reader, declared)
        runners.append((reader["runner"], *picked) if picked else (reader["runner"], default, "default"))
    try:
        target_vocab = model.get_vocab_size()
    except Exception:  # noqa: BLE001 - a config without it: the vocabulary is not compared
        target_vocab = getattr(model.hf_text_config, "vocab_size", None)
    arch = None
    try:
        arch = model.architecture
    except Exception:  # noqa: BLE001 - older configs: the list
        arch = None
    if not arch:
        arch = (getattr(model, "architectures", None) or [None])[0]
    return {
        "draft_ids": top or nested or declared["dflash"] or declared["dspark"] or declared["target"],
        "draft_field": "top level"
        if top or declared["dspark"] or declared["target"]
        else "eagle_config"
        if nested
        else "dflash_config"
        if declared["dflash"]
        else None,
        "nested": nested,
        "default": default,
        "runners": runners,
        "offsets": offsets,
        "architecture": arch,
        "vocab": (getattr(hf, "vocab_size", None), target_vocab),
        "model": str(model.model),
        "draft": str(spec.model),
        "n": n,
    }


def causes(data, found):
    """``[(code, text)]``, likeliest first, of why acceptance collapsed, from :func:`reading`'s result."""
    out = []
    field = data["ids_field"]
    draft_vocab, target_vocab = found["vocab"]
    if draft_vocab and target_vocab and draft_vocab != target_vocab:
        out.append(
            (
                OTHER_VOCABULARY,
                "the draft's vocab_size is {}, the target's {}: a draft of another tokenizer "
                "proposes token ids that mean other words".format(draft_vocab, target_vocab),
            )
        )
    default = found["default"]
    for runner, ids, source in found["runners"]:
        if source == "eagle_config" and found["offsets"].get(runner) == 0:
            out.append(
                (
                    ID_CONVENTION,
                    "the draft's ids are only in eagle_config, whose exporters (SpecForge, SGLang, "
                    "ModelOpt) count a layer's output, and the {} reads them verbatim (vLLM counts "
                    "the stream entering a layer): every capture is one layer early; set the "
                    "top-level {} to {}".format(runner, field, [i + 1 for i in ids]),
                )
            )
        elif source == "default" and found["nested"]:
            out.append(
                (
                    DEFAULT_IDS,
                    "the {} ignores eagle_config's ids {} and captures the target's default layers "
                    "{}; set the top-level {} to {} (eagle_config counts a layer's output)".format(
                        runner, found["nested"], ids, field, [i + 1 for i in found["nested"]]
                    ),
                )
            )
        elif source == "default":
            out.append(
                (
                    DEFAULT_IDS,
                    "the draft records no ids, so the {} falls back to the target's default layers "
                    "{}: a draft trained on other layers needs them in the top-level {}".format(runner, ids, field),
                )
            )
        elif source == "top level" and ids == [d - 1 for d in default]:
            out.append(
                (
                    ID_CONVENTION,
                    "the draft's top-level ids {} are the default {} minus one: a SpecForge list "
                    "(a layer's output) copied unchanged?".format(ids, default),
                )
            )
    if found["architecture"] in (data.get("patched") or []):
        out.append(
            (
                PATCHED_CAPTURE,
                "patchkit wrote {}'s capture of the aux hidden states: 'patchkit rehearse' "
                "checks it against transformers".format(found["architecture"]),
            )
        )
    if not out:
        out.append((UNKNOWN, "the ids and the vocabulary agree: is the draft trained for this target (its revision)?"))
    seen, ranked = set(), []
    for code, text in sorted(out, key=lambda c: CAUSES.index(c[0])):
        if text not in seen:
            seen.add(text)
            ranked.append((code, text))
    return ranked


def next_commands(found, python=None):
    """The ``patchkit doctor`` and ``patchkit rehearse`` commands for this target and draft."""
    where = ["--python", python or sys.executable or "python"]
    pair = ["--model", found["model"], "--draft", found["draft"], *where]
    return (
        " ".join(shlex.quote(p) for p in ["patchkit", "doctor", *pair]),
        " ".join(shlex.quote(p) for p in ["patchkit", "rehearse", *pair]),
    )


def message(data, found, drafts, per_pos, threshold, python=None):
    """The watch's one line (see the module docstring)."""
    rates = [c / drafts for c in per_pos]
    used = {}
    for runner, ids, source in found["runners"]:
        used.setdefault((tuple(ids), source), []).append(runner)
    uses = "; ".join(
        "the {} uses {} ({})".format(
            " and the ".join(r), list(ids), "the draft's " + source if source != "default" else "the target's default"
        )
        for (ids, source), r in used.items()
    )
    draft = (
        "draft ids {} ({})".format(found["draft_ids"], found["draft_field"])
        if found["draft_ids"]
        else "the draft records no ids"
    )
    doctor, rehearse = next_commands(found, python)
    listed = "; ".join("({}) {}: {}".format(i, code, text) for i, (code, text) in enumerate(causes(data, found), 1))
    return (
        "{} EAGLE-3 first-position acceptance {:.2f} after {} drafts (below {:.2f}); per position {}; {}; {}; "
        "likeliest causes: {}; next: '{}', then '{}'".format(
            PREFIX,
            rates[0] if rates else 0.0,
            drafts,
            threshold,
            "[" + ", ".join("{:.2f}".format(r) for r in rates) + "]",
            draft,
            uses,
            listed,
            doctor,
            rehearse,
        )
    )


try:
    _Base = _base()
except ImportError:
    raise
except Exception as exc:  # noqa: BLE001 - vLLM's loader logs an ImportError and skips the plugin
    raise ImportError("patchkit watch: vLLM's stat-logger base class: {}".format(exc))


class AcceptanceWatch(_Base):
    """The statistics logger vLLM builds per engine (``StatLoggerBase``'s interface, 0.11.1 - 0.33.0)."""

    def __init__(self, vllm_config, engine_index=0):
        self._on = False
        self._config = vllm_config
        self._engine = engine_index
        try:
            self._start(vllm_config)
        except Exception as exc:  # noqa: BLE001 - never stop the serve
            _LOG.debug("%s off: %s", PREFIX, exc)

    def _start(self, config):
        spec = getattr(config, "speculative_config", None)
        if spec is None:
            return
        data = read_data()
        if getattr(spec, "method", None) not in (data.get("methods") or ["eagle3"]):  # the aux-state speculators
            return
        self._data = data
        self._limit, self._threshold, problems = settings(self._data)
        for problem in problems:
            _LOG.warning(
                "%s %s; using %s=%s, %s=%s", PREFIX, problem, ENV_DRAFTS, self._limit, ENV_THRESHOLD, self._threshold
            )
        self._reset()
        self._on = True

    def _reset(self):
        self._drafts = 0
        self._per_pos = []

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        if not self._on or scheduler_stats is None:
            return
        stats = scheduler_stats.spec_decoding_stats
        if stats is None or not stats.num_drafts:
            return
        try:
            self._drafts += stats.num_drafts
            per_pos = self._per_pos
            for i, count in enumerate(stats.num_accepted_tokens_per_pos):
                if i < len(per_pos):
                    per_pos[i] += count
                else:
                    per_pos.append(count)
            if self._drafts >= self._limit:
                self._judge()
        except Exception as exc:  # noqa: BLE001 - never stop the serve
            self._on = False
            _LOG.debug("%s off: %s", PREFIX, exc)

    def _judge(self):
        first = self._per_pos[0] / self._drafts if self._per_pos else 0.0
        if first >= self._threshold:
            self._reset()
            return
        self._on = False
        try:
            line = message(self._data, reading(self._data, self._config), self._drafts, self._per_pos, self._threshold)
        except Exception as exc:  # noqa: BLE001 - a config of another shape: the figures alone, still one line
            line = (
                "{} EAGLE-3 first-position acceptance {:.2f} after {} drafts (below {:.2f}); the served config "
                "could not be read ({}: {}); next: 'patchkit doctor --model TARGET --draft DRAFT --python {}'".format(
                    PREFIX, first, self._drafts, self._threshold, type(exc).__name__, exc, sys.executable
                )
            )
        _LOG.warning("%s", line)

    def log_engine_initialized(self):
        return None

    def log(self):
        return None
