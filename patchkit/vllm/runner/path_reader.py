"""The walker that collects the attribute paths a draft loader reads off the target's language model,
through one function and the functions it hands the model to; :mod:`patchkit.vllm.runner.draft_reads`
runs it over the loader it finds.

In: a function's AST (the loader: V1 ``EagleProposer.load_model``, V2 ``load_eagle_model``, as
:mod:`patchkit.vllm.runner.draft_reads` describes them) and the local names holding the language model.
Out: :attr:`PathReader.reads` (each path, whether its absence raises, where, its alternatives) and
:attr:`PathReader.shared` (the paths handed to the draft). The forms it recognises are vLLM's own, cited
where each is read (0.34.0 V2 ``maybe_share_target_embed``, ``get_target_lm_head``; 0.34.0
``BaseLayerWithLoRA``/``PPMissingLayer`` wrappers under ``isinstance`` tests).
"""

from __future__ import annotations

import ast

from patchkit.vllm.release.source import ClassRef, SourceTree

_DELEGATION_DEPTH = 3
"""How many calls deep a language model handed on is followed."""

Path = tuple[str, ...]
"""Attribute names from the language model, e.g. ``("model", "embed_tokens")``."""


def chain(expr: ast.expr) -> tuple[str, Path] | None:
    """``a.b.c`` -> ``("a", ("b", "c"))``; None for anything that is not a plain dotted name."""
    attrs: list[str] = []
    while isinstance(expr, ast.Attribute):
        attrs.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        return expr.id, tuple(reversed(attrs))
    return None


def const_str(node: ast.expr) -> str | None:
    """The value of a string literal, None for any other node."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _walk_body(stmts: list[ast.stmt]):
    """Every node under ``stmts``, not entering nested function or class definitions."""
    todo = list(stmts)
    while todo:
        node = todo.pop(0)
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


class PathReader:
    """Collects the reads of one language-model variable through a function and the methods it calls.

    ``aliases`` maps a local name to the paths (from the language model) it may hold: a name bound
    in two arms (``target_embed_tokens = inner_model.embed_tokens`` / ``... .embedding``) holds both.
    """

    def __init__(self, tree: SourceTree, owner: ClassRef | None, module: str | None = None) -> None:
        self.tree = tree
        self.owner = owner  # the proposer class (V1); None for a module-level loader (V2)
        self.module = module  # the loader's module (V2: its module-level functions are followed)
        self.reads: dict[Path, dict] = {}
        self.shared: set[Path] = set()

    def _handed(self, target: ast.expr, aliases: dict[str, list[Path]]) -> bool:
        """Whether an assignment to ``target`` hands its value to the draft: ``self.<...>`` in the
        proposer (V1), any attribute of a name that is not a language-model alias in a function (V2)."""
        if not isinstance(target, ast.Attribute):
            return False
        base = (chain(target) or ("",))[0]
        return base == "self" if self.owner is not None else bool(base) and base not in aliases

    @staticmethod
    def _isinstance_test(test: ast.expr, aliases: dict[str, list[Path]]) -> bool:
        return (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "isinstance"
            and bool(test.args)
            and isinstance(test.args[0], ast.Name)
        )

    def _module_function(self, name: str) -> ast.FunctionDef | None:
        if self.module is None:
            return None
        try:
            body = self.tree.module_tree(self.module).body
        except Exception:  # noqa: BLE001 - a module that does not parse offers nothing to follow
            return None
        return next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)

    def _note(self, path: Path, required: bool, location: str, alternatives: tuple[Path, ...] = ()) -> None:
        entry = self.reads.setdefault(
            path, {"required": False, "location": location, "guarded": False, "alternatives": ()}
        )
        if required and not entry["required"]:
            entry["required"], entry["location"] = True, location
        if alternatives:
            entry["alternatives"] = alternatives

    def function(
        self, fn: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, aliases: dict[str, list[Path]], depth: int = 0
    ) -> None:
        where = lambda node: f"{relpath}:{node.lineno}"  # noqa: E731
        walked = tuple(ast.walk(fn))  # one walk serves every pass below
        if self.owner is None:  # V2: what an `if isinstance(<name>, ...)` body does applies to a wrapper
            # class (0.34.0: BaseLayerWithLoRA, PPMissingLayer), not to what the target class holds
            skipped = {
                id(n)
                for node in walked
                if isinstance(node, ast.If) and self._isinstance_test(node.test, aliases)
                for stmt in node.body
                for n in ast.walk(stmt)
            }
            walked = tuple(n for n in walked if id(n) not in skipped)
        guarded: set[Path] = set()
        self._alias_reads(walked, aliases, _none_raises(walked, where), guarded, where)
        if self.owner is None:
            self._returned_reads(walked, aliases, guarded, where)
        self._hasattr_reads(walked, aliases, guarded, where)
        self._plain_reads(walked, aliases, guarded, where)
        for node in walked:  # what is handed to the draft: <alias path> assigned to self.<...>
            if isinstance(node, ast.Assign) and any(self._handed(t, aliases) for t in node.targets):
                self.shared.update(p for p, _ in self._paths(node.value, aliases) if p)
        if depth < _DELEGATION_DEPTH:
            self._delegations(walked, relpath, aliases, depth)

    def _alias_reads(
        self, walked, aliases: dict[str, list[Path]], none_raises: dict[str, str | None], guarded: set[Path], where
    ) -> None:
        """Aliases first, in source order: name = <alias path>.x / getattr(<alias path>, "x", default)."""
        for node in sorted((n for n in walked if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                continue
            name = node.targets[0].id
            found_paths = self._paths(node.value, aliases)
            # `x = getattr(a, "y", None) or getattr(a, "z", None)` whose None raises: one of them must exist
            either = tuple(p for p, default in found_paths if p and default) if name in none_raises else ()
            for path, default in found_paths:
                if not path:
                    continue
                aliases.setdefault(name, [])
                if path not in aliases[name]:
                    aliases[name].append(path)
                if default:  # getattr with a default: guarded unless its None raises
                    self._note(
                        path,
                        name in none_raises,
                        none_raises.get(name) or where(node),
                        tuple(p for p in either if p != path) if len(either) > 1 else (),
                    )
                    if name not in none_raises:
                        guarded.add(path)

    def _returned_reads(self, walked, aliases: dict[str, list[Path]], guarded: set[Path], where) -> None:
        """V2: a helper returning `getattr(<alias>, "x", None) or ...` reads x, guarded (0.34.0 get_target_lm_head)."""
        for node in walked:
            if isinstance(node, ast.Return) and node.value is not None:
                for path, default in self._paths(node.value, aliases):
                    if path and default:
                        self._note(path, False, where(node))
                        guarded.add(path)
                        self.shared.add(path)  # its caller hands what it returns to the draft

    def _hasattr_reads(self, walked, aliases: dict[str, list[Path]], guarded: set[Path], where) -> None:
        """hasattr guards, and hasattr chains that end in raise."""
        for node in walked:
            if isinstance(node, ast.If):
                arms, cur = [], node
                while True:
                    ps = self._hasattr_paths(cur.test, aliases)
                    if not ps:
                        break
                    arms.extend((p, cur) for p in ps)
                    if len(cur.orelse) == 1 and isinstance(cur.orelse[0], ast.If):
                        cur = cur.orelse[0]
                        continue
                    if any(isinstance(s, ast.Raise) for s in cur.orelse):
                        paths = tuple(a[0] for a in arms)
                        for p2, at in arms:
                            self._note(p2, True, where(at), tuple(x for x in paths if x != p2))
                    break
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
                for p in self._hasattr_paths(node, aliases):
                    guarded.add(p)
                    self._note(p, False, where(node))

    def _plain_reads(self, walked, aliases: dict[str, list[Path]], guarded: set[Path], where) -> None:
        """Plain attribute reads through an alias: every prefix of the path, required unless guarded."""
        for node in walked:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                found = chain(node)
                if found is None or found[0] not in aliases:
                    continue
                for base in aliases[found[0]]:
                    full = base + found[1]
                    for i in range(len(base) + 1, len(full) + 1):
                        self._note(full[:i], full[:i] not in guarded, where(node))

    def _delegations(self, walked, relpath: str, aliases: dict[str, list[Path]], depth: int) -> None:
        """Delegation: self.method(<alias>, ...) (V1), or a module function called with one (V2), followed."""
        for node in walked:
            if not isinstance(node, ast.Call):
                continue
            passed = {i: aliases[a.id] for i, a in enumerate(node.args) if isinstance(a, ast.Name) and a.id in aliases}
            if not passed:
                continue
            if (
                self.owner is not None
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
            ):
                found = self.tree.find_member(self.owner, node.func.attr)
                if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                fn_node, fn_relpath, skip = found[1], found[0].relpath, 1
            elif self.owner is None and isinstance(node.func, ast.Name):
                fn_node = self._module_function(node.func.id)
                if fn_node is None:
                    continue
                fn_relpath, skip = relpath, 0
            else:
                continue
            params = [a.arg for a in fn_node.args.args[skip:]]
            inner = {params[i]: list(p) for i, p in passed.items() if i < len(params)}
            self.function(fn_node, fn_relpath, inner, depth + 1)

    def _paths(self, expr: ast.expr, aliases: dict[str, list[Path]]) -> list[tuple[Path, bool]]:
        """(path, has a default) for ``alias.x.y`` or ``getattr(alias..., "x", d)``; one per path of the alias.
        In a module-level loader (V2) ``a or b`` holds the paths of both."""
        if self.owner is None and isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            return [found for value in expr.values for found in self._paths(value, aliases)]
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id == "getattr"
            and len(expr.args) == 3
            and const_str(expr.args[1]) is not None
        ):
            return [(p + (const_str(expr.args[1]),), True) for p, _ in self._paths(expr.args[0], aliases)]
        found = chain(expr) if isinstance(expr, (ast.Attribute, ast.Name)) else None
        if found is None or found[0] not in aliases:
            return []
        return [(base + found[1], False) for base in aliases[found[0]]]

    def _hasattr_paths(self, test: ast.expr, aliases: dict[str, list[Path]]) -> list[Path]:
        if isinstance(test, ast.BoolOp):  # `share and hasattr(x, "lm_head")`
            return [p for v in test.values for p in self._hasattr_paths(v, aliases)]
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "hasattr"
            and len(test.args) == 2
            and const_str(test.args[1]) is not None
        ):
            return [p + (const_str(test.args[1]),) for p, _ in self._paths(test.args[0], aliases)]
        return []


def _none_raises(walked, where) -> dict[str, str | None]:
    """Names whose None raises: `if x is None: raise ...` (None), or a raise deeper in it (file:line, 0.34.0 V2)."""
    none_raises: dict[str, str | None] = {}
    for node in walked:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.Is)
            and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value is None
        ):
            if any(isinstance(s, ast.Raise) for s in node.body):
                none_raises[node.test.left.id] = None
            else:
                nested = next((n for n in _walk_body(node.body) if isinstance(n, ast.Raise)), None)
                if nested is not None:
                    none_raises.setdefault(node.test.left.id, where(nested))
    return none_raises
