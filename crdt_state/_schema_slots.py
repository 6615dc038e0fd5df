"""The type at each path of a typed state: slots walked from a pydantic model.

A :class:`Slot` describes what may be stored at one path of a state whose
schema is a pydantic model: its annotation, the pydantic field it comes from
(constraints, defaults), how it is laid out in the document and whether
writes below it must re-check it. The document layout follows the model:

================================  =============  ==========================
annotation                        ``kind``       document
================================  =============  ==========================
a ``BaseModel`` subclass          ``"model"``    ``Y.Map``, one key a field
``dict[K, V]`` / ``Mapping``      ``"mapping"``  ``Y.Map``, keys are ``str(K)``
``list[X]``, ``set[X]``, ...      ``"list"``     ``Y.Array``
``Any`` / ``object``              ``"any"``      whatever is written
a union of several types          ``"union"``    written as a whole
anything else                     ``"leaf"``     a scalar (or a blob)
================================  =============  ==========================

``Optional[X]`` and ``Annotated[X, ...]`` are looked through. Paths only
descend into models, mappings and ``Any``; a path into anything else is
refused with a :class:`~crdt_state.errors.SchemaError`.

Merge policies are taken from ``Annotated`` metadata: any callable that is
not a class and not pydantic's or annotated-types' own marker, such as
``calls: Annotated[int, resolvers.counter]``.
"""

from __future__ import annotations

import collections.abc as cabc
import types
import typing
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import BaseModel, PydanticUserError, RootModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from .errors import SchemaError
from .paths import Path, format_path

__all__ = ["Slot", "SlotKind", "error_entry", "is_policy", "unwrap"]

SlotKind: TypeAlias = Literal["model", "mapping", "list", "any", "union", "leaf"]

_MAPPINGS: frozenset[object] = frozenset(
    {dict, cabc.Mapping, cabc.MutableMapping, typing.Mapping, typing.MutableMapping, typing.Dict}  # noqa: UP006
)
_LISTS: frozenset[object] = frozenset(
    {
        list,
        set,
        frozenset,
        cabc.Sequence,
        cabc.MutableSequence,
        cabc.Set,
        cabc.MutableSet,
        typing.List,  # noqa: UP006
        typing.Sequence,
        typing.Set,  # noqa: UP006
        typing.FrozenSet,  # noqa: UP006
    }
)
_VALIDATOR_KINDS = ("field_validators", "model_validators", "validators", "root_validators")


def is_policy(item: object) -> bool:
    """True when an ``Annotated`` metadata item is a merge policy."""
    if isinstance(item, type) or not callable(item):
        return False
    module = type(item).__module__ or ""
    return not module.startswith(("pydantic", "annotated_types", "typing"))


def unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """``(core type, Annotated metadata, optional)`` with Annotated/Optional/aliases removed."""
    metadata: list[Any] = []
    optional = False
    tp = annotation
    while True:
        if type(tp).__name__ == "TypeAliasType":  # ``type X = ...`` (3.12) or typing_extensions
            tp = tp.__value__
            continue
        origin = typing.get_origin(tp)
        if origin is Annotated:
            args = typing.get_args(tp)
            tp = args[0]
            metadata.extend(args[1:])
            continue
        if origin is typing.Union or origin is types.UnionType:
            args = typing.get_args(tp)
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1 and len(args) > 1:
                optional = True
                tp = rest[0]
                continue
        return tp, metadata, optional


_UNTYPED: Final = (Any, object, dict, list, tuple, set, frozenset)
"""Annotations whose values pydantic keeps as they are (no type to read them back as)."""


def holds_any(annotation: Any, seen: frozenset[int] = frozenset()) -> bool:
    """Whether a value of ``annotation`` may hold values of no declared type.

    ``Any``, ``object`` and bare containers anywhere inside, through ``Optional``,
    ``Annotated``, unions, generic arguments and the fields of nested models: there a
    ``datetime`` is kept as given and would be stored as its JSON text (see
    :func:`~crdt_state._schema_errors.dump`).
    """
    if any(annotation is u for u in _UNTYPED):
        return True
    if id(annotation) in seen:
        return False
    seen = seen | {id(annotation)}
    if type(annotation).__name__ == "TypeAliasType":
        return holds_any(annotation.__value__, seen)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return any(holds_any(f.annotation, seen) for f in annotation.model_fields.values())
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Annotated:
        args = args[:1]
    return any(holds_any(a, seen) for a in args if a is not Ellipsis)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return repr(tp).replace("typing.", "")


def error_entry(kind: str, loc: Path | tuple[Any, ...], msg: str, value: Any) -> dict[str, Any]:
    """One error in pydantic's shape: ``{"type", "loc", "msg", "input"}``."""
    return {"type": kind, "loc": tuple(loc), "msg": msg, "input": value}


@dataclass(eq=False)
class Slot:
    """What may be stored at one (generalised) path of a typed state.

    ``path`` is generalised: mapping keys appear as ``"*"``. ``field`` is the
    pydantic field the slot comes from (``None`` for mapping values, the
    root and ``Any`` children); ``config`` the model config of the model that
    owns the field.
    """

    path: Path
    annotation: Any
    field: FieldInfo | None = None
    config: Any = None
    kind: SlotKind = "leaf"
    core: Any = None
    metadata: list[Any] = dc_field(default_factory=list)
    _children: dict[str, Slot] = dc_field(default_factory=dict, repr=False)
    _adapter: TypeAdapter[Any] | None = dc_field(default=None, repr=False)
    _untyped: bool | None = dc_field(default=None, repr=False)

    @classmethod
    def make(
        cls, path: Path, annotation: Any, field_info: FieldInfo | None = None, config: Any = None
    ) -> Slot:
        core, metadata, _ = unwrap(annotation)
        if field_info is not None:
            metadata = [*field_info.metadata, *metadata]
        return cls(path, annotation, field_info, config, _kind_of(core), core, metadata)

    @classmethod
    def root(cls, model: type[BaseModel]) -> Slot:
        return cls((), model, None, None, "model", model, [])

    # -- properties ------------------------------------------------------------------
    @property
    def required(self) -> bool:
        """True when the owning model has no default for this field."""
        return self.field is not None and self.field.is_required()

    @property
    def policy(self) -> Any:
        """The merge policy declared on this slot (the last one given), or ``None``."""
        found = [m for m in self.metadata if is_policy(m)]
        return found[-1] if found else None

    @property
    def constrained(self) -> bool:
        """True when the slot carries constraints or validators beyond its type."""
        if any(not is_policy(m) for m in self.metadata):
            return True
        return self.field is not None and self.field.discriminator is not None

    @property
    def guarded(self) -> bool:
        """True when a write *below* this slot must re-validate the slot's whole value.

        That is the case for models with field or model validators (they may
        look at several fields) and for constrained containers.
        """
        if self.constrained:
            return True
        if self.kind == "model":
            decorators = self.core.__pydantic_decorators__
            return any(getattr(decorators, name, None) for name in _VALIDATOR_KINDS)
        return False

    @property
    def untyped_inside(self) -> bool:
        """Whether values here may hold values of no declared type (:func:`holds_any`)."""
        if self._untyped is None:
            self._untyped = holds_any(self.annotation)
        return self._untyped

    @property
    def plain_list(self) -> bool:
        """True for an unconstrained ``list[X]``: items validated one by one suffice."""
        return (
            self.kind == "list"
            and typing.get_origin(self.core) in (list, cabc.Sequence, cabc.MutableSequence)
            and not self.constrained
        )

    @property
    def model(self) -> type[BaseModel]:
        assert self.kind == "model"
        model: type[BaseModel] = self.core
        return model

    # -- validation ------------------------------------------------------------------
    @property
    def adapter(self) -> TypeAdapter[Any]:
        """A pydantic adapter for this slot's type and field constraints (built once)."""
        if self._adapter is None:
            tp: Any = self.annotation
            if self.field is not None:
                tp = Annotated[self.annotation, self.field]
            adapter: TypeAdapter[Any] | None = None
            if self.config:
                try:
                    adapter = TypeAdapter(tp, config=self.config)
                except PydanticUserError:  # the type brings its own config (a model)
                    adapter = None
            self._adapter = adapter or TypeAdapter(tp)
        return self._adapter

    def item_slot(self) -> Slot:
        """The slot of one item of a list slot."""
        found = self._children.get("[]")
        if found is None:
            args = typing.get_args(self.core)
            item = args[0] if args else Any
            found = Slot.make((*self.path, "[]"), item, None, self.config)
            self._children["[]"] = found
        return found

    def value_slot(self) -> Slot:
        """The slot of one value of a mapping slot (its path ends in ``*``)."""
        found = self._children.get("*")
        if found is None:
            args = typing.get_args(self.core)
            value_type = args[1] if len(args) == 2 else Any
            found = Slot.make((*self.path, "*"), value_type, None, self.config)
            self._children["*"] = found
        return found

    # -- walking ---------------------------------------------------------------------
    def child(self, key: str, at: Path) -> Slot:
        """The slot of ``key`` below this one; ``at`` is the real path (for errors)."""
        if self.kind == "any":
            return self
        if self.kind == "model":
            found = self._children.get(key)
            if found is not None:
                return found
            fields = self.model.model_fields
            if key in fields:
                found = Slot.make(
                    (*self.path, key), fields[key].annotation, fields[key], self.model.model_config
                )
                self._children[key] = found
                return found
            if self.model.model_config.get("extra") == "allow":
                return Slot((*self.path, key), Any, kind="any", core=Any)
            raise SchemaError(
                f"{self.model.__name__} has no field {key!r}",
                path=at,
                errors=[error_entry("extra_forbidden", at, "Extra inputs are not permitted", key)],
            )
        if self.kind == "mapping":
            args = typing.get_args(self.core)
            _check_key(args[0] if len(args) == 2 else str, key, at)
            return self.value_slot()
        if self.kind == "union":
            reason = f"a union ({_type_name(self.core)}) is written as a whole"
        else:
            reason = f"a value of type {_type_name(self.core)} has no fields"
        raise SchemaError(
            f"cannot write inside {format_path(at[:-1])}: {reason}",
            path=at,
            errors=[error_entry("path_type", at, f"Cannot write inside this value: {reason}", key)],
        )

    def walk_policies(self, out: dict[Path, Any], stack: tuple[type, ...] = ()) -> None:
        """Collect ``{generalised path: policy}`` for this slot and everything below it."""
        policy = self.policy
        if policy is not None and self.path:
            out.setdefault(self.path, policy)
        if self.kind == "model":
            if self.core in stack:
                return
            for name in self.model.model_fields:
                self.child(name, (*self.path, name)).walk_policies(out, (*stack, self.core))
        elif self.kind == "mapping":
            self.value_slot().walk_policies(out, stack)


def _kind_of(core: Any) -> SlotKind:
    if core is Any or core is object:
        return "any"
    if isinstance(core, type) and issubclass(core, BaseModel):
        return "leaf" if issubclass(core, RootModel) else "model"
    origin = typing.get_origin(core)
    if core in _MAPPINGS or origin in _MAPPINGS:
        return "mapping"
    if core in _LISTS or origin in _LISTS:
        return "list"
    if origin is tuple:
        args = typing.get_args(core)
        return "list" if len(args) == 2 and args[1] is Ellipsis else "leaf"
    if origin is typing.Union or origin is types.UnionType:
        return "union"
    return "leaf"


_KEY_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _check_key(key_type: Any, key: str, at: Path) -> None:
    if key_type is str or key_type is Any:
        return
    adapter = _KEY_ADAPTERS.get(key_type)
    if adapter is None:
        adapter = _KEY_ADAPTERS.setdefault(key_type, TypeAdapter(key_type))
    try:
        adapter.validate_strings(key)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise SchemaError(
            f"invalid key {key!r}: {first['msg']}",
            path=at,
            errors=[error_entry(first["type"], at, f"Invalid key: {first['msg']}", key)],
        ) from None
