"""Shared constants and the stand-ins the probe's consistency checks run vLLM's installed code on
(see :data:`STAND_IN`). Part of the runtime probe (this folder's ``__init__.py``).
"""

from __future__ import annotations

import importlib
import inspect


SENTINEL = "PATCHKIT-PROBE-RESULT"
STAND_IN = "consistency check on stand-ins"
"""Label suffix of every check that runs installed code on stand-ins (checks 2, 4, 5 and 6): their layers,
norms, backbones and drafts follow patchkit's own reading of vLLM's contracts (for check 4: the
stream entering a layer is ``hidden_states + residual`` or ``hidden_states`` alone, as
:mod:`patchkit.vllm.stream.residual` decided from the same code the codemod read), so such a check confirms that
the written code is consistent with that reading (right places, order, pipeline stages, return
values); it cannot show the reading wrong. Only the real layer code (vLLM's engine, transformers'
``hidden_states``) can. Checks 1 and 3 are vLLM's own answers on its real classes."""
SETTER = "set_aux_hidden_state_layers"
GETTER = "get_eagle3_aux_hidden_state_layers"
NUM_LAYERS = 61  # DeepSeek-V3 / Kimi-K2: default ids (2, 30, 58)


def call_backbone(cls, obj, positions, tensors, embeds):
    """``cls.forward(obj, ...)`` with vLLM's backbone arguments, by the names this forward uses
    (``positions`` or ``position_ids``: 0.33.0 ``bailing_moe.py``)."""

    kwargs = {}
    for name in list(inspect.signature(cls.forward).parameters)[1:]:
        if name == "input_ids":
            kwargs[name] = None
        elif name.startswith("position"):
            kwargs[name] = positions
        elif name == "intermediate_tensors":
            kwargs[name] = tensors
        elif name == "inputs_embeds":
            kwargs[name] = embeds
    return cls.forward(obj, **kwargs)


def load(qualified: str):
    module, _, name = qualified.partition(":")
    return getattr(importlib.import_module(module), name)


def blank(cls):
    """An instance of ``cls`` with nn.Module state but without running its ``__init__``."""
    import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


def stand_in_backbone(cls, num_layers: int):
    import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

    obj = blank(cls)
    obj.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(num_layers)])
    obj.aux_hidden_state_layers = ()
    return obj


def stand_in_target(cls, chain, fallback=False):
    """A stand-in of ``cls``: its real methods, each link of ``chain`` holding a stand-in of its class.

    ``chain`` is ``[[attr, "module:Class"], ...]`` down to the backbone (the last link), which gets
    ``NUM_LAYERS`` identity layers. With ``fallback``, every holder answers attributes ``__init__``
    would have set with :class:`_Anything` (the classes keep their names). Returns ``(obj, holders)``,
    ``holders[0]`` being ``obj`` and ``holders[-1]`` the backbone (``obj`` itself with no chain).
    """

    def kind(c):
        if not fallback:
            return c
        return type(
            c.__name__,
            (c,),
            {"__getattr__": _fallback_getattr, "__module__": c.__module__, "__qualname__": c.__qualname__},
        )

    obj = blank(kind(cls))
    holders = [obj]
    for i, (attr, qualified) in enumerate(chain):
        held_cls = kind(load(qualified))
        held = stand_in_backbone(held_cls, NUM_LAYERS) if i == len(chain) - 1 else blank(held_cls)
        setattr(holders[-1], attr, held)
        holders.append(held)
    return obj, holders


def _fallback_getattr(self, name):
    import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

    try:
        return torch.nn.Module.__getattr__(self, name)
    except AttributeError:
        if name.startswith("__"):
            raise
        return _Anything()


class _Anything:
    """Stands in for any attribute a backbone's forward reads that the probe did not set (a config
    flag, a scaling factor): falsy, callable (returns its first argument), and attribute-transparent."""

    def __getattr__(self, name):
        if name.startswith("__"):  # a protocol probe (torch asks for __torch_function__): not supported
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

        if len(args) == 2 and all(isinstance(a, torch.Tensor) for a in args):
            # a final norm under another name (jamba.py: final_layernorm(hidden_states, residual)):
            # vLLM's fused norm returns (normed, hidden_states + residual)
            stream = args[0] + args[1]
            return stream, stream
        return args[0] if args else None

    def __bool__(self):
        return False

    # a config number the forward scales by (hyperclovax.py: hidden_states *= config.embedding_multiplier;
    # falcon_h1.py: inputs_embeds * self.embedding_multiplier): the identity, so the streams stay what
    # the stand-in layers fed each other
    def __mul__(self, other):
        return other

    __rmul__ = __mul__

    # a config list the forward indexes or tests membership in (solar.py: config.bskcn_tv[1],
    # i in config.bskcn_1): empty
    def __getitem__(self, key):
        return _Anything()

    def __contains__(self, item):
        return False

    def __iter__(self):
        return iter(())


class _Config:
    """The stand-in backbone's config: what the probe sets, and :class:`_Anything` for the rest."""

    llama_4_scaling = None

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _Flag:
    """Stands in for what a decoder loop reads on a layer besides calling it: a flag (falsy), or a
    method called with the streams (0.33.0 ``step5``: ``layer._add_for_residual(hidden_states,
    residual)`` after the loop), which returns their sum, the residual stream, or the one stream it
    is given. What such a method returns cannot make a capture pass: the probe compares each
    captured state with what the stand-in layers were fed."""

    def __bool__(self):
        return False

    def __call__(self, *args, **kwargs):
        import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) == 2 and len(args) == 2:
            return tensors[0] + tensors[1]
        if len(tensors) == 1 and len(args) == 1:
            return tensors[0]
        raise TypeError("the stand-in layer has no such method")
