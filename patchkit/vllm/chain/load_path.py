"""The load-path link check: the runner's and EAGLE proposer's paths (derived by
:mod:`patchkit.vllm.runner.draft_reads`) followed through one target class, one
:class:`~patchkit.results.Check` node per link, each with ``file:line`` evidence.
"""

from __future__ import annotations

import ast

from patchkit.results import Check
from patchkit.vllm.chain.kinds import UNPINNED
from patchkit.vllm.classes import composition
from patchkit.vllm.classes.class_attrs import assigned_at, config_class, language_model_attr
from patchkit.vllm.release.contract import is_multimodal
from patchkit.vllm.release.contract import is_stub
from patchkit.vllm.runner.draft_reads import GETTER, Derivation, Read, derive
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree

LABEL = "load path (runner and proposer)"
"""Start of the label of :func:`link_check`'s node (the class name follows: one node per class)."""


def _follow(
    tree: SourceTree, registry: Registry, root: ClassRef, read: Read, label_root: str, reader: str = "proposer"
) -> list[Check]:
    """One node per link of ``read.path`` starting at ``root`` (``reader``: the loader's word in labels)."""
    out: list[Check] = []
    cls: ClassRef | None = root
    for i, attr in enumerate(read.path):
        label = f"{reader} reads {label_root}.{'.'.join(read.path[: i + 1])}"
        if cls is None:
            out.append(Check(label, None, "not followed: the class before it is not one vLLM class", read.location))
            break
        at = assigned_at(tree, cls, attr)
        if at is None:
            alts = [
                a
                for a in read.alternatives
                if a[:i] == read.path[:i] and cls is not None and assigned_at(tree, cls, a[i]) is not None
            ]
            if alts:
                out.append(
                    Check(label, True, f"{cls.name} has {'.'.join(alts[0])} instead ({cls.location})", read.location)
                )
                break
            if read.required and read.alternatives:  # one of them must exist (0.34.0 V2: embed_tokens or embedding)
                others = " nor ".join(a[i] for a in read.alternatives if a[:i] == read.path[:i] and len(a) > i)
                out.append(
                    Check(
                        label,
                        False,
                        f"{cls.name} ({cls.location}) has no {attr}"
                        + (f" nor {others}" if others else "")
                        + f": the {reader} raises when a draft without its own loads",
                        read.location,
                    )
                )
            elif read.required:
                out.append(
                    Check(
                        label,
                        False,
                        f"{cls.name} ({cls.location}) has no {attr}: AttributeError when any draft loads",
                        read.location,
                    )
                )
            else:
                out.append(
                    Check(
                        label,
                        None,
                        f"{cls.name} ({cls.location}) has no {attr}: the read is hasattr-guarded, "
                        f"so the {reader} skips sharing it without a word",
                        read.location,
                    )
                )
            break
        out.append(
            Check(label, True, f"{cls.name}: {at}" + ("" if read.required else " (hasattr-guarded)"), read.location)
        )
        try:
            cls = composition.held_class(tree, registry, cls, attr).cls
        except composition.CompositionError:
            cls = None
    return out


def link_check(tree: SourceTree, registry: Registry, cls: ClassRef, derivation: Derivation | None = None) -> Check:
    """The runner's and proposer's paths through ``cls``, one child per link, each with ``file:line``.

    Args:
        tree, registry: the install's sources and registry.
        cls: the target class (a registry architecture's class).
        derivation: :func:`patchkit.vllm.runner.draft_reads.derive` of ``tree`` (computed when None).
    Returns:
        A :class:`Check` ``"load path (runner and proposer) for <class>"`` (:data:`LABEL`); it fails when a link is
        broken: a required read of an attribute the class does not have (a ``hasattr``-guarded one that is
        absent is shown, not failed: the proposer skips that sharing), a missing aux-id getter, or an image-token field
        the target's config class lacks. It also fails when nothing could be derived from the release (so it never
        passes silently), and says "not checked: <what is missing, where patchkit looked>" (failed, never passed) when
        the install lacks a fact of the runner it follows (:mod:`patchkit.vllm.runner.generations`: the
        runner, its draft loader, its aux-id setter). Its detail names the runner followed.
    Raises:
        SourceError: a file on the way does not parse.
    """
    d = derivation if derivation is not None else derive(tree)
    label_node = f"{LABEL} for {cls.name}"
    if d.not_checked is not None:
        return Check(label_node, False, f"{d.not_checked} (runner {d.runner_reason})", d.loader, kind=UNPINNED)
    if d.empty:
        return Check(
            label_node, False, "patchkit found no path the runner or the proposer takes through the target", d.loader
        )
    children = _aux_checks(tree, cls, d)
    multimodal = is_multimodal(tree, cls)
    root: ClassRef | None = cls
    label_root = cls.name
    if multimodal and d.language_model is not None:
        held, root, label_root = _language_model_check(tree, registry, cls, d)
        children.append(held)
    if root is not None:
        seen: set[str] = set()
        for read in d.reads:
            links = _follow(tree, registry, root, read, label_root, d.reader)
            for link in links:
                if link.label not in seen:
                    seen.add(link.label)
                    children.append(link)
    if multimodal and (d.image_token or d.reader == "proposer"):  # V2's loader sets no image token
        children.append(_image_token_check(tree, cls, d))
    failures = [f for c in children for f in c.failures()]
    detail = f"runner {d.runner_reason}"
    if failures:
        detail = "broken: " + "; ".join(c.label for c in failures) + f" (runner {d.runner_reason})"
    return Check(label_node, not failures, detail, d.loader, children=children)


def _aux_checks(tree: SourceTree, cls: ClassRef, d: Derivation) -> list[Check]:
    """Where the runner takes the aux ids from (``d.aux``): one check per source, failed when ``cls``
    lacks the getter the runner calls (or has a stub), informational for the draft's config."""
    children: list[Check] = []
    for source in d.aux:
        if source.kind == "target":
            found = tree.find_member(cls, source.name)
            ok = found is not None and isinstance(found[1], ast.FunctionDef) and not is_stub(found[1])
            detail = (
                f"{found[0].name}.{source.name}: {found[0].relpath}:{found[1].lineno}"
                if ok
                else f"{cls.name} has no {source.name}()"
                if found is None
                else f"{found[0].name}.{source.name} is a stub"
            )
            children.append(Check(f"runner takes aux ids from {source.name}()", ok, detail, source.location))
        else:
            children.append(
                Check(
                    f"runner takes aux ids from {source.name}() first",
                    None,
                    "the draft's config, when it names ids",
                    source.location,
                )
            )
    return children


def _language_model_check(
    tree: SourceTree, registry: Registry, cls: ClassRef, d: Derivation
) -> tuple[Check, ClassRef | None, str]:
    """What the reader's ``get_language_model()`` call on the multimodal ``cls`` returns.

    Returns:
        The check; the class the reads go on from (None when patchkit cannot tell: they are not followed);
        and the name the reads' labels start from (``get_language_model()`` when followed).
    """
    held = language_model_attr(tree, cls)
    label = f"{d.reader} calls {cls.name}.{GETTER}()"
    if held is None:
        not_read = "what it returns is not read statically; its paths are not followed"
        return Check(label, None, not_read, d.language_model), None, cls.name
    attr, at = held
    try:
        root = composition.held_class(tree, registry, cls, attr).cls
    except composition.CompositionError as exc:
        return Check(label, None, f"returns self.{attr} ({at}); {exc}", d.language_model), None, cls.name
    found = Check(label, True, f"returns self.{attr} ({at}): {root.name} ({root.location})", d.language_model)
    return found, root, f"{GETTER}()"


def _image_token_check(tree: SourceTree, cls: ClassRef, d: Derivation) -> Check:
    branch = next((b for b in d.image_token if cls.name in b.classes), None)
    fallback = next((b for b in d.image_token if not b.classes), None)
    if branch is not None:
        return Check(
            f"proposer reads target config.{'.'.join(branch.field[1:])}",
            True,
            f"a branch for {cls.name}",
            branch.location,
        )
    if fallback is None:
        return Check("proposer reads the image token", None, "no image-token assignment found in load_model", d.loader)
    field = fallback.field[-1]
    label = f"proposer reads target config.{'.'.join(fallback.field[1:])}"
    config = config_class(tree, cls)
    if config is None:
        return Check(
            label,
            None,
            f"no branch for {cls.name}; its config class is not a vLLM class (not checked)",
            fallback.location,
        )
    at = assigned_at(tree, config, field)
    if at is not None:
        return Check(label, True, f"{config.name}: {at}", fallback.location)
    return Check(
        label,
        False,
        f"no branch for {cls.name}, and {config.name} ({config.location}) has no {field}: "
        "AttributeError when any draft loads",
        fallback.location,
    )
