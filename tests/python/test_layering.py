"""The floors of the tree: every library is one top-level folder, and no
library includes a header of a library built above it.

Each `#include "kiln/..."` in a library's include/, src/ and tools/ is
resolved against the include/ folders of all libraries (an include path names
a concept; the folder that holds the header names its library), and the
owner must be the library itself or one it is allowed to use. Inside the core
the same holds for its subfolders (support < ir < arith < pass < te < codegen
< interp < driver). Reads the source tree only; needs no build.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each library and the libraries it may use (directly or not), in build
# order: the same edges as the target_link_libraries lines of the folders'
# CMakeLists.txt.
# The graph compiler takes its default schedules from the operator library's
# schedule rules and its tuned ones from the tuning database: it never uses
# the tuner (which needs XGBoost); the tuner builds on the graph (tune_model).
ALLOWED = {
    "runtime": set(),
    "core": {"runtime"},
    "tuning_db": {"runtime"},
    "ops": {"tuning_db", "core", "runtime"},
    "graph": {"ops", "tuning_db", "core", "runtime"},
    "tuner": {"graph", "ops", "tuning_db", "core", "runtime"},
    "dist": {"graph", "ops", "tuning_db", "core", "runtime"},
}

# The core's subfolders, lowest first: a subfolder includes only its own
# headers and those of subfolders before it.
CORE_FLOORS = ["support", "ir", "arith", "pass", "te", "codegen", "interp", "driver"]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"(kiln/[^"]+)"', re.M)


def _sources(root, lib):
    for sub in ("include", "src", "tools"):
        top = os.path.join(root, lib, sub)
        for dirpath, _, files in os.walk(top):
            for f in files:
                if f.endswith((".h", ".cpp", ".cc", ".inc")):
                    yield os.path.join(dirpath, f)


def _owners(root, libraries):
    """Maps each public header's include path to the libraries that hold it."""
    owners = {}
    for lib in libraries:
        inc = os.path.join(root, lib, "include", "kiln")
        for dirpath, _, files in os.walk(inc):
            for f in files:
                path = os.path.relpath(os.path.join(dirpath, f), inc)
                owners.setdefault(path, []).append(lib)
    return owners


def _core_floor(root, path):
    rel = os.path.relpath(path, os.path.join(root, "core"))
    parts = rel.split(os.sep)
    # core/include/kiln/<floor>/... or core/src/<floor>/...
    floor = parts[2] if parts[0] == "include" else parts[1]
    return floor


def violations(root, allowed=ALLOWED, core_floors=CORE_FLOORS):
    """Every include that breaks the floors, as readable lines (empty: none)."""
    problems = []
    owners = _owners(root, allowed)
    for path, libs in owners.items():
        if len(libs) > 1:
            problems.append(f"kiln/{path} is held by more than one library: {', '.join(libs)}")
    for lib in allowed:
        for src in _sources(root, lib):
            text = open(src, encoding="utf-8", errors="replace").read()
            for inc in INCLUDE_RE.findall(text):
                rel = os.path.relpath(src, root)
                held_by = owners.get(inc[len("kiln/"):])
                if not held_by:
                    problems.append(f"{rel}: includes {inc}, which no library's include/ holds")
                    continue
                owner = held_by[0]
                if owner != lib and owner not in allowed[lib]:
                    problems.append(f"{rel}: {lib} includes {inc} of {owner}, a library above it")
                if lib == "core" and owner == "core":
                    me = _core_floor(root, src)
                    them = inc.split("/")[1]
                    if me in core_floors and them in core_floors and \
                            core_floors.index(them) > core_floors.index(me):
                        problems.append(f"{rel}: core/{me} includes {inc} of core/{them}, a floor above it")
    return problems


LINK_RE = re.compile(r"target_link_libraries\(\s*(kiln\w*)\s+([^)]*)\)")


def _library_of_target(name):
    """The folder of a library target (kiln: the core), or None for other targets."""
    return "core" if name == "kiln" else name[len("kiln_"):] if name.startswith("kiln_") else None


def link_violations(root, allowed=ALLOWED):
    """Every kiln library a library's CMakeLists.txt links that it may not use."""
    problems = []
    for lib in allowed:
        text = open(os.path.join(root, lib, "CMakeLists.txt"), encoding="utf-8").read()
        for target, deps in LINK_RE.findall(text):
            if _library_of_target(target) != lib:
                continue  # an executable or helper of the folder
            for dep in deps.split():
                used = _library_of_target(dep)
                if used in allowed and used != lib and used not in allowed[lib]:
                    problems.append(f"{lib}/CMakeLists.txt: {target} links {dep}, a library above it")
    return problems


def test_no_library_links_a_higher_floor():
    # The graph compiler in particular builds without the tuner (and XGBoost).
    problems = link_violations(ROOT)
    assert not problems, "\n".join(problems)


def test_the_check_finds_an_upward_link(tmp_path):
    root = str(tmp_path)
    _write(root, "core/CMakeLists.txt", "target_link_libraries(kiln PUBLIC kiln_runtime)\n")
    _write(root, "graph/CMakeLists.txt", "target_link_libraries(kiln_graph PUBLIC kiln kiln_tuner PRIVATE onnx_proto)\n"
                                         "target_link_libraries(kiln-tool PRIVATE kiln_tuner)\n")
    _write(root, "tuner/CMakeLists.txt", "target_link_libraries(kiln_tuner PUBLIC kiln_graph)\n")
    allowed = {"core": set(), "graph": {"core"}, "tuner": {"graph", "core"}}
    assert link_violations(root, allowed) == ["graph/CMakeLists.txt: kiln_graph links kiln_tuner, a library above it"]


def test_every_library_is_a_top_level_folder_with_include_and_src():
    for lib in ALLOWED:
        assert os.path.isfile(os.path.join(ROOT, lib, "CMakeLists.txt")), lib
        assert os.path.isdir(os.path.join(ROOT, lib, "include", "kiln")), lib
        assert os.path.isdir(os.path.join(ROOT, lib, "src")), lib
    # The old mixed folders are gone.
    for old in ("include", "src", "schedules"):
        assert not os.path.exists(os.path.join(ROOT, old)), f"{old}/ should have moved into a library folder"


def test_no_library_includes_a_higher_floor():
    problems = violations(ROOT)
    assert not problems, "\n".join(problems)


def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def test_the_check_finds_an_upward_include(tmp_path):
    # A tiny tree with one violation of each kind: the check must name them all.
    root = str(tmp_path)
    _write(root, "runtime/include/kiln/runtime/module.h", "")
    _write(root, "core/include/kiln/ir/expr.h", '#include "kiln/pass/gpu.h"\n')
    _write(root, "core/include/kiln/pass/gpu.h", '#include "kiln/ir/expr.h"\n')
    _write(root, "core/src/ir/expr.cpp", '#include "kiln/runtime/module.h"\n#include "kiln/graph/graph.h"\n')
    _write(root, "graph/include/kiln/graph/graph.h", '#include "kiln/ir/expr.h"\n')
    _write(root, "graph/src/graph.cpp", '#include "kiln/graph/missing.h"\n')
    allowed = {"runtime": set(), "core": {"runtime"}, "graph": {"core", "runtime"}}
    problems = violations(root, allowed, ["ir", "pass"])
    assert len(problems) == 3, problems
    assert any("core/ir includes kiln/pass/gpu.h of core/pass" in p for p in problems)
    assert any("core includes kiln/graph/graph.h of graph" in p for p in problems)
    assert any("kiln/graph/missing.h, which no library's include/ holds" in p for p in problems)
