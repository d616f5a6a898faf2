"""The kiln Python package's layering: no import cycle between its modules,
and no module using a private name (``_name``) that another module defines.

Every python/kiln/**/*.py is parsed with ``ast`` (nothing is imported, so no
build is needed). Every import counts, those deferred into function bodies
too: a deferred import is still a dependency, and two modules that import
each other, however late, are one tangle that cannot be read or tested apart.
The shared piece belongs in a lower module both import.
"""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "python", "kiln")

# The native extension: _ffi exists to load it and hand it to every module.
SHARED_PRIVATE = {"_kiln"}


def _modules(package_dir, package="kiln"):
    """{dotted module name: path} of every .py under the package (packages by their __init__)."""
    out = {}
    for dirpath, dirs, files in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(dirpath, package_dir)
        prefix = [package] + ([] if rel == "." else rel.split(os.sep))
        for f in files:
            if f.endswith(".py"):
                parts = prefix if f == "__init__.py" else prefix + [f[:-3]]
                out[".".join(parts)] = os.path.join(dirpath, f)
    return out


def _is_package(name, modules):
    return modules.get(name, "").endswith("__init__.py")


def _base(name, node, modules):
    """The module a `from ... import` names, absolute (None: outside kiln)."""
    if node.level == 0:
        return node.module
    parts = name.split(".") if _is_package(name, modules) else name.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(name, tree, modules, package):
    """(imported kiln module, line, names taken from it) for every import statement in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package:
                    yield alias.name, node.lineno, []
        elif isinstance(node, ast.ImportFrom):
            base = _base(name, node, modules)
            if not base or base.split(".")[0] != package:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:  # a submodule
                    yield sub, node.lineno, []
                else:
                    yield base, node.lineno, [alias.name]


def _executed(target, importer, modules):
    """The modules an import of `target` runs: it and every package above it, except the
    importer's own ancestors (always initialised before the importer runs)."""
    parts = target.split(".")
    out = []
    for k in range(1, len(parts) + 1):
        mod = ".".join(parts[:k])
        ancestor = importer == mod or importer.startswith(mod + ".")
        if mod in modules and (k == len(parts) or not ancestor):
            out.append(mod)
    return out


def import_graph(package_dir, package="kiln"):
    """{module: {imported module: first line}}, every import of the package's own modules counted."""
    modules = _modules(package_dir, package)
    graph = {m: {} for m in modules}
    for name, path in modules.items():
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for target, line, _ in _imports(name, tree, modules, package):
            for mod in _executed(target, name, modules):
                if mod != name:
                    graph[name].setdefault(mod, line)
    return graph


def find_cycles(graph):
    """Each cycle once (a strongly connected component of several modules, shown as one loop through it)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(_loop(graph, set(comp)))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def _loop(graph, comp):
    """A closed path through the component, from its first module back to it."""
    start = min(comp)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in comp)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return path + [start]
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return path + [nxt[0]]
        path.append(fresh[0])
        seen.add(fresh[0])


def _private(n):
    return n.startswith("_") and not (n.startswith("__") and n.endswith("__"))


def _defined(tree):
    """The private names a module defines: its top-level functions, classes and variables, the
    methods and class attributes of its classes, and what it assigns to ``self._x``; and those
    it binds by import."""
    names, imported = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                        names.add(sub.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in names if _private(n)}, {n for n in imported if _private(n)}


def private_uses(package_dir, package="kiln"):
    """Lines that use a private name across modules: ``from kiln.x import _y``, or ``obj._y``
    where another module defines ``_y`` and this one does not."""
    modules = _modules(package_dir, package)
    trees = {m: ast.parse(open(p, encoding="utf-8").read(), p) for m, p in modules.items()}
    defined, imported = {}, {}
    for m, t in trees.items():
        defined[m], imported[m] = _defined(t)
    problems = []
    for name, tree in sorted(trees.items()):
        rel = os.path.relpath(modules[name], os.path.dirname(package_dir))
        for target, line, taken in _imports(name, tree, modules, package):
            for n in taken:
                if _private(n) and n not in SHARED_PRIVATE:
                    problems.append(f"{rel}:{line}: imports {n}, private to {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in SHARED_PRIVATE \
                    and node.attr not in defined[name] | imported[name]:
                owners = sorted(m for m, d in defined.items() if node.attr in d)
                if owners:
                    problems.append(f"{rel}:{node.lineno}: uses .{node.attr}, private to {' / '.join(owners)}")
    return problems


def _module_level(body):
    """The statements that run at import, those under if/try/with included (not function bodies)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(node, field, []))
            for handler in getattr(node, "handlers", []):
                yield from _module_level(handler.body)


def shadowed_submodules(package_dir, package="kiln"):
    """Names a package's __init__ binds to something other than its submodule of that name (``kiln.x``
    would be a module or a function depending on what ran first, as kiln.tune_model once was)."""
    modules = _modules(package_dir, package)
    problems = []
    for name, path in sorted(modules.items()):
        if not path.endswith("__init__.py"):
            continue
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in _module_level(tree.body):
            bound = []
            if isinstance(node, ast.ImportFrom):
                base = _base(name, node, modules)
                bound = [(a.asname or a.name) for a in node.names if f"{base}.{a.name}" not in modules or
                         (a.asname and a.asname != a.name)]
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound = [node.name]
            elif isinstance(node, ast.Assign):
                bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for n in bound:
                if f"{name}.{n}" in modules:
                    problems.append(f"{name}.{n} is a module, but {os.path.relpath(path, os.path.dirname(package_dir))}:"
                                    f"{node.lineno} binds the name to something else")
    return problems


def test_no_import_cycle():
    cycles = find_cycles(import_graph(PACKAGE))
    assert not cycles, "import cycles (a deferred import counts; move the shared piece to a lower module):\n" + \
        "\n".join("  " + " -> ".join(c) for c in cycles)


def test_no_private_name_used_across_modules():
    problems = private_uses(PACKAGE)
    assert not problems, "private names used outside the module that defines them (make the name public, or move " \
        "the code that needs it into that module):\n" + "\n".join("  " + p for p in problems)


def test_no_submodule_shadowed_by_a_name():
    problems = shadowed_submodules(PACKAGE)
    assert not problems, "rename the module or the name:\n" + "\n".join("  " + p for p in problems)


def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def test_the_checks_find_a_deferred_cycle_and_a_private_use(tmp_path):
    # A tiny package: a -> b at import, b -> a inside a function; c reaches into a's private
    # function and b's private attribute. pkg/sub/__init__ and pkg/sub/d form a cycle too.
    pkg = str(tmp_path / "pkg")
    _write(pkg, "__init__.py", "from . import a\n")
    _write(pkg, "a.py", "from . import b\n\ndef _helper():\n    return 1\n")
    _write(pkg, "b.py", "class B:\n    def __init__(self):\n        self._state = 0\n\n"
                        "def f():\n    from .a import _helper\n    return _helper()\n")
    _write(pkg, "c.py", "from pkg import a, b\n\ndef g(x):\n    return b.B()._state + a._helper() + x._own\n\n"
                        "class C:\n    def __init__(self):\n        self._own = 1\n")
    _write(pkg, "sub/__init__.py", "from .d import D\n")
    _write(pkg, "sub/d.py", "from . import E\n\nclass D:\n    pass\n")
    _write(pkg, "e.py", "from .sub import d\n")  # only down: no cycle
    cycles = find_cycles(import_graph(pkg, "pkg"))
    assert sorted(cycles) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.sub", "pkg.sub.d", "pkg.sub"]], cycles
    problems = private_uses(pkg, "pkg")
    assert shadowed_submodules(pkg, "pkg") == []
    _write(pkg, "f.py", "def f():\n    pass\n")
    _write(pkg, "__init__.py", "from . import a\nif a:\n    from .f import f\n")  # pkg.f: the module or the function?
    assert shadowed_submodules(pkg, "pkg") == ["pkg.f is a module, but pkg/__init__.py:3 binds the name to something else"]
    assert sorted(problems) == ["pkg/b.py:6: imports _helper, private to pkg.a",
                                "pkg/c.py:4: uses ._helper, private to pkg.a",
                                "pkg/c.py:4: uses ._state, private to pkg.b"], problems  # c's own _own is no problem
