"""The tests mirror the source: a folder of tests per layer or package, and every source module
that holds behaviour (a function or a class) named by a test in its folder."""

from __future__ import annotations

import ast
import re

from helpers import ROOT

TESTS = ROOT / "tests"
# The checks over the whole project, which stay at the top
CROSS_CUTTING = {"test_contract.py", "test_import_cycles.py", "test_layering.py", "test_layout.py"}
# Where the tests of a source package live (the longest prefix wins)
FOLDERS = {
    "service.runtime": ("runtime",),
    "service.worker": ("worker",),
    "service.front": ("front", "server"),
    "service": ("cli", "server"),
    "models": ("models",),
    "export": ("export",),
    "attnserve": ("cli",),
}
GENERATED = ("service.wire",)


def source_modules() -> list[str]:
    """Every project module that defines a function or a class at its top level."""
    modules = []
    for package in ("service", "models", "export", "attnserve"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if name.startswith(GENERATED):
                continue
            body = ast.parse(path.read_text(encoding="utf-8")).body
            if any(
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                for node in body
            ):
                modules.append(name)
    return modules


def folders_for(module: str) -> tuple[str, ...]:
    prefix = max((p for p in FOLDERS if module == p or module.startswith(p + ".")), key=len)
    return FOLDERS[prefix]


def names(text: str, module: str) -> bool:
    """The test text imports the module or names it in full."""
    parent, _, leaf = module.rpartition(".")
    if re.search(rf"\b{re.escape(module)}\b", text):
        return True
    return bool(parent) and bool(
        re.search(rf"from {re.escape(parent)} import \(?[^)\n]*?\b{leaf}\b", text)
        or re.search(rf"from {re.escape(parent)} import \([^)]*\b{leaf}\b[^)]*\)", text)
    )


def test_test_files_live_in_the_folder_of_what_they_test():
    folders = {folder for group in FOLDERS.values() for folder in group} | {"bench", "deploy"}
    for path in TESTS.rglob("test_*.py"):
        relative = path.relative_to(TESTS)
        if len(relative.parts) == 1:
            assert relative.name in CROSS_CUTTING, f"{relative}: put it in the folder it tests"
        else:
            assert relative.parts[0] in folders, f"{relative}: not a folder of the layout"


def test_every_module_with_behaviour_is_named_by_a_test_in_its_folder():
    texts = {
        folder: "\n".join(p.read_text(encoding="utf-8") for p in (TESTS / folder).rglob("*.py"))
        for group in FOLDERS.values()
        for folder in group
    }
    modules = source_modules()
    assert len(modules) > 100  # the walk found the project
    unnamed = [
        module
        for module in modules
        if not any(names(texts[folder], module) for folder in folders_for(module))
    ]
    assert not unnamed, "modules no test names in their folder: " + ", ".join(unnamed)


def test_the_naming_rule_reads_imports_as_python_writes_them():
    assert names("from service.runtime.rows import static", "service.runtime.rows.static")
    assert names(
        "from service.runtime.rows import (\n    slots,\n    static,\n)",
        "service.runtime.rows.static",
    )
    assert names("import service.worker.outbox as outbox", "service.worker.outbox")
    assert not names("from service.runtime.rows import statics", "service.runtime.rows.static")
    assert not names("from service.runtime import rows", "service.runtime.rows.static")


def _imported(path) -> set[str]:
    """The top-level names of the modules a file imports."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    return imported


def test_shared_test_code_lives_in_modules_of_their_own_names():
    """Every test folder is on the import path under pytest's default import mode, so a test
    module or a conftest imported by name can resolve to another folder's file of that name
    (three folders have a conftest): what tests share is in a module named once in the
    tree."""
    files = sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts)
    shared = [p for p in files if not p.name.startswith("test_") and p.name != "conftest.py"]
    stems = [p.stem for p in shared]
    assert len(stems) == len(set(stems)), f"shared test modules named twice: {sorted(stems)}"
    assert {"helpers", "servers"} <= set(stems)
    for path in files:
        wrong = {n for n in _imported(path) if n == "conftest" or n.startswith("test_")}
        assert not wrong, (
            f"{path.relative_to(TESTS)} imports {sorted(wrong)}: move it to a shared module"
        )
