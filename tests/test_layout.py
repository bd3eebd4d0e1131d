"""The architecture as tests: import rules between layers, and registry areas = folders."""

import ast
from pathlib import Path

import pytest

from jaxsci.experiments import REGISTRY

PKG = Path(__file__).resolve().parents[1] / "jaxsci"
SHARED = {"core", "common", "data"}
NOT_AREAS = SHARED | {"experiments", "__pycache__"}
AREAS = sorted(p.name for p in PKG.iterdir() if p.is_dir() and p.name not in NOT_AREAS)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("jaxsci.")}


def _top(module: str) -> str:
    return module.split(".")[1]


def _method(path: Path, area: str) -> str:
    rel = path.relative_to(PKG / area)
    return rel.parts[0].removesuffix(".py")


@pytest.mark.parametrize("area", AREAS)
def test_paper_areas_import_only_core_and_the_shared_layer(area):
    for path in (PKG / area).rglob("*.py"):
        me = _method(path, area)
        for mod in _imports(path):
            top = _top(mod)
            assert top in SHARED or top == area, f"{path}: imports {mod} (another area)"
            if top == area and me != "__init__":
                other = mod.split(".")[2] if mod.count(".") >= 2 else me
                assert other == me, f"{path}: paper {me} imports paper {other}"


@pytest.mark.parametrize("layer", sorted(SHARED))
def test_shared_layer_never_imports_a_paper_area(layer):
    for path in (PKG / layer).rglob("*.py"):
        for mod in _imports(path):
            assert _top(mod) in SHARED or mod == "jaxsci", f"{path}: imports {mod}"


def test_registry_area_is_the_folder_of_the_method():
    for e in REGISTRY.values():
        if e.status != "implemented":
            continue
        hits = [p for p in (PKG / e.area).glob("*") if p.stem == e.name]
        assert hits, f"{e.name}: registry area {e.area!r} but no jaxsci/{e.area}/{e.name}"


def test_no_private_name_is_imported_from_another_module():
    # `from jaxsci.a.b import _name` reaches into another module's internals. Importing a
    # private *module* of one's own package (koopman's `_model`) is how a package is
    # split up, and allowed.
    root = PKG.parent
    files = [*PKG.rglob("*.py"), *(root / "scripts").rglob("*.py"),
             *(root / "examples").rglob("*.py")]
    bad = []
    for path in files:
        own = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.startswith("jaxsci")):
                continue
            for alias in node.names:
                if not alias.name.startswith("_"):
                    continue
                submodule = f"{node.module}.{alias.name}"
                is_module = any((root / submodule.replace(".", "/")).with_suffix(s).exists()
                                for s in (".py", ""))
                if not (is_module and node.module == own):
                    bad.append(f"{path.relative_to(root)}: from {node.module} import "
                               f"{alias.name}")
    assert not bad, bad
