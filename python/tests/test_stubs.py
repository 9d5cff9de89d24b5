"""The type stubs (depot/_core.pyi) name what the extension has, and the extension nothing the
stubs leave out: an editor completing from them is not misled."""

import ast
import os

import depot
from depot import _core


def stub_names():
    path = os.path.join(os.path.dirname(depot.__file__), "_core.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.AnnAssign):
            if not node.target.id.startswith("_"):
                names[node.target.id] = set()
    return names


def public(obj):
    return {n for n in vars(obj) if not n.startswith("_")} | (
        {"__enter__", "__exit__", "__len__", "__cuda_array_interface__", "__dlpack__",
         "__dlpack_device__"} & set(vars(obj)))


def test_stubs_match_the_extension():
    stubs = stub_names()
    module = {n for n in vars(_core) if not n.startswith("_")}
    assert set(stubs) == module
    for name in ("DeviceFrame", "Object", "Draft", "Subscription", "Client"):
        assert stubs[name] - {"__init__"} == public(getattr(_core, name)), name
