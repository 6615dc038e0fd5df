"""The public surface: exported names, and the error family with stable codes."""

from __future__ import annotations

import importlib
import inspect
import pathlib

import pytest

import crdt_state
from crdt_state import conflicts, errors

# Codes are part of the API (programs and prompts match on them): pinned here.
STABLE_CODES = {
    "CrdtStateError": "crdt_state_error",
    "InvalidPath": "invalid_path",
    "PathNotFound": "path_not_found",
    "DuplicatePath": "duplicate_path",
    "WrongType": "wrong_type",
    "UnsupportedValue": "unsupported_value",
    "InvalidUpdate": "invalid_update",
    "SchemaError": "schema",
    "BranchClosed": "branch_closed",
    "WriteInListener": "write_in_listener",
    "RequestReused": "request_reused",
    "ReadOnlyStore": "read_only_store",
    "UnknownBase": "unknown_base",
    "StaleBase": "stale_base",
    "ConflictError": "conflict",
    "RetryExhausted": "retry_exhausted",
}

FIXED_NAMES = {
    "SharedState",
    "Branch",
    "VersionVector",
    "MergeResult",
    "Conflict",
    "Retry",
    "RetryExhausted",
    "ConflictError",
    "CrdtStateError",
    "InvalidPath",
    "UnsupportedValue",
    "resolvers",
}


def test_all_names_exist_and_import() -> None:
    assert len(crdt_state.__all__) == len(set(crdt_state.__all__))
    for name in crdt_state.__all__:
        assert hasattr(crdt_state, name), name
        namespace: dict[str, object] = {}
        exec(f"from crdt_state import {name}", namespace)
        assert namespace[name] is getattr(crdt_state, name)
    assert set(crdt_state.__all__) >= FIXED_NAMES


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from crdt_state import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(crdt_state.__all__)


def test_resolvers_module_exports_builtins() -> None:
    module = crdt_state.resolvers
    for name in (
        "last_writer_wins",
        "first_writer_wins",
        "maximum",
        "minimum",
        "counter",
        "union",
        "retry",
        "raise_conflict",
    ):
        assert name in module.__all__
        assert callable(getattr(module, name))


@pytest.mark.parametrize(
    "module_name",
    sorted(
        path.stem
        for path in pathlib.Path(crdt_state.__file__).parent.glob("*.py")
        if not path.stem.startswith("_")
    ),
)
def test_submodule_all_names_exist(module_name: str) -> None:
    module = importlib.import_module(f"crdt_state.{module_name}")
    for name in module.__all__:
        assert hasattr(module, name), f"crdt_state.{module_name}.{name}"


def _error_classes() -> list[type[BaseException]]:
    """Every exception class of the library (the conflict errors live with Conflict)."""
    return [
        obj
        for module in (errors, conflicts)
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == module.__name__
    ]


def test_every_error_has_a_stable_unique_code() -> None:
    classes = _error_classes()
    assert set(STABLE_CODES) <= {cls.__name__ for cls in classes}
    codes = [cls.code for cls in classes]  # type: ignore[attr-defined]
    assert len(codes) == len(set(codes))
    for cls in classes:
        assert issubclass(cls, crdt_state.CrdtStateError)
        if cls.__name__ in STABLE_CODES:
            assert cls.code == STABLE_CODES[cls.__name__]
        code = cls.code
        assert isinstance(code, str) and code.isidentifier() and code.islower()
        assert cls.__name__ in crdt_state.__all__
        assert cls.__doc__


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("InvalidPath", KeyError),
        ("PathNotFound", KeyError),
        ("WrongType", TypeError),
        ("UnsupportedValue", TypeError),
        ("InvalidUpdate", ValueError),
        ("SchemaError", ValueError),
        ("BranchClosed", RuntimeError),
        ("UnknownBase", LookupError),
        ("StaleBase", LookupError),
        ("RetryExhausted", crdt_state.ConflictError),
    ],
)
def test_errors_subclass_the_fitting_builtin(name: str, builtin: type[BaseException]) -> None:
    assert issubclass(getattr(crdt_state, name), builtin)


def test_errors_carry_code_path_and_details() -> None:
    error = crdt_state.InvalidPath("bad key", path=("a", "b"), details={"value": "x"})
    assert str(error) == "[invalid_path] at 'a.b': bad key"
    assert error.to_dict() == {
        "code": "invalid_path",
        "message": "bad key",
        "path": ["a", "b"],
        "details": {"value": "x"},
    }
    exhausted = crdt_state.RetryExhausted("gave up", attempts=3)
    assert exhausted.attempts == 3 and exhausted.retry is True
    assert exhausted.to_dict()["code"] == "retry_exhausted"
    assert exhausted.to_dict()["details"] == {"attempts": 3}


SYNC_ROOT = pathlib.Path(crdt_state.__file__).parent.parent.joinpath("sync")


@pytest.mark.parametrize(
    "module_name",
    sorted(
        ".".join(("sync", *path.relative_to(SYNC_ROOT).with_suffix("").parts))
        for path in SYNC_ROOT.rglob("*.py")
        if not path.stem.startswith("_")
    ),
)
def test_sync_submodule_all_names_exist(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in getattr(module, "__all__", ()):
        assert hasattr(module, name), f"{module_name}.{name}"


def test_every_module_declares_all() -> None:
    root = pathlib.Path(crdt_state.__file__).parent.parent
    missing = [
        str(path.relative_to(root))
        for package in ("crdt_state", "sync")
        for path in (root / package).rglob("*.py")
        if path.stem not in ("__init__", "cli", "__main__")
        and (package == "sync" or path.parent == root / package)
        and "__all__" not in path.read_text(encoding="utf-8")
    ]
    assert not missing
