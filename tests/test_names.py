"""Every Python file of the package, the benchmarks and the tests loads only names that something in the file binds
(or a builtin): a coarse static net for the NameError of a rarely run path, such as `probe_columns.py --strided`
carried from 108ebf9 to 378207f (a constant it used was deleted). Coarse: a name bound anywhere in a file counts as
bound everywhere in it, so this finds names nothing binds, not names used out of scope."""

import ast
import builtins
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for d in ("src", "benchmarks", "tests") for p in (ROOT / d).rglob("*.py"))


def bound_names(tree: ast.AST) -> set:
    names = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__"}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.MatchAs) and n.name:
            names.add(n.name)
    return names


def unbound(source: str) -> list:
    tree = ast.parse(source)
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)):
        return []
    known = bound_names(tree)
    return sorted({(n.lineno, n.id) for n in ast.walk(tree)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in known})


def test_the_check_finds_an_unbound_name():
    assert unbound("import os\ndef f(a):\n    return os.sep + a + STRIDED\n") == [(3, "STRIDED")]
    assert unbound("def f():\n    for k, v in {}.items():\n        yield k, v\n") == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unbound_names(path):
    assert unbound(path.read_text()) == []
