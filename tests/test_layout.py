"""The layout of the package (README "Layout", STYLE.md sections 1 and 9): which rooms may import which.

Imports are read from the source with ast, every one of them (module level and inside functions, so a late import
that hides a cycle is caught too), and resolved to absolute module names.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import certify

ROOT = Path(certify.__file__).parent


def module_name(path: Path) -> str:
    """certify/bounds/local/_search.py -> certify.bounds.local._search (a package's __init__ -> the package)."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module `path` imports (``from a import b`` counts as a and as a.b)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def files_of(package: str) -> list[Path]:
    return sorted((ROOT.parent / package.replace(".", "/")).rglob("*.py"))


def imports_of(package: str, forbidden: str) -> dict[str, list[str]]:
    """{module of `package`: the modules of `forbidden` it imports}, for the modules that import any."""
    hits = {}
    for path in files_of(package):
        bad = sorted(m for m in imported_modules(path) if m == forbidden or m.startswith(forbidden + "."))
        if bad:
            hits[module_name(path)] = bad
    return hits


def test_the_import_reader_sees_relative_and_late_imports():
    assert "certify.bounds.closed_form" in imported_modules(ROOT / "bounds/local/_structured.py")  # from ..x
    assert "certify.interval" in imported_modules(ROOT / "bounds/global_l2/_search.py")  # from ... import x
    assert "certify._checkpoint" in imported_modules(ROOT / "cli/_compare.py")  # inside a function
    assert imports_of("certify", "certify.adversarial")  # the search itself finds hits


@pytest.mark.parametrize("package,forbidden", [
    ("certify.attention", "certify.bounds"),  # bounds are computed from attention weights, not the other way
    ("certify.bounds", "certify.adversarial"),  # certified bounds never depend on the adversarial search
    ("certify.attention", "certify.invertible"),
    ("certify.bounds", "certify.distributed"),  # the single-process search needs no cluster (issue 19)
])
def test_no_import_against_the_layering(package, forbidden):
    assert imports_of(package, forbidden) == {}


def test_bounds_has_sub_packages_not_prefixes():
    root_files = sorted(p.name for p in (ROOT / "bounds").glob("*.py"))
    assert root_files == ["__init__.py", "_branch_and_bound.py", "_registry.py", "_rounding.py"]
    assert not [name for name in root_files if name.startswith(("_global_l2", "_local"))]
    for sub in ("closed_form", "local", "global_l2"):
        files = [p.name for p in (ROOT / "bounds" / sub).glob("*.py")]
        assert "__init__.py" in files and not [f for f in files if f.startswith(("_global_l2", "_local"))], sub
        importlib.import_module(f"certify.bounds.{sub}")


def test_moved_names_stay_exported():
    from certify import invertible

    assert certify.ContractiveL2MultiheadAttention is invertible.ContractiveL2MultiheadAttention
    assert certify.save_layer.__module__ == certify.load_layer.__module__ == "certify._checkpoint"
    assert certify.bounds.local_bound is certify.bounds.local.local_bound
