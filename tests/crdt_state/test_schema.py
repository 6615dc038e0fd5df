"""Typed states: validated writes, typed reads, refused merges and remote updates."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
from pycrdt import Array, Doc, Map
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crdt_state import (
    Branch,
    Change,
    ConflictError,
    CrdtStateError,
    InvalidUpdate,
    SchemaError,
    SharedState,
    StateSchema,
    WrongType,
    resolvers,
)


class Severity(StrEnum):
    LOW = "low"
    HIGH = "high"


class Finding(BaseModel):
    title: str
    severity: Severity = Severity.LOW


class Worker(BaseModel):
    name: str
    status: Literal["idle", "busy", "done"] = "idle"
    calls: Annotated[int, resolvers.counter] = 0


class Customer(BaseModel):
    name: str = "anon"
    tier: Literal["free", "gold"] = "free"


class Triage(BaseModel):
    calls: Annotated[int, resolvers.counter] = 0
    tags: Annotated[list[str], resolvers.union] = []
    best: Annotated[float, resolvers.maximum] = 0.0
    priority: int = Field(default=3, ge=1, le=5)
    customer: Customer = Customer()
    findings: list[Finding] = []
    workers: dict[str, Worker] = {}
    opened: datetime | None = None
    note: str | None = None
    either: int | str = 0


def fresh(**kwargs: Any) -> SharedState[Triage]:
    return SharedState(schema=Triage, **kwargs)


def decoded(state: SharedState) -> Any:
    """The state's document rebuilt from its full update: Map/Array kinds and values."""
    doc: Doc[Any] = Doc()
    doc.apply_update(state.get_update())
    return _shape(doc.get("state", type=Map))


def _shape(node: Any) -> Any:
    if isinstance(node, Map):
        return ("map", {k: _shape(v) for k, v in node.items()})
    if isinstance(node, Array):
        return ("array", [_shape(v) for v in node])
    return node


# -- defaults and layout -----------------------------------------------------------------
def test_defaults_initialise_state_in_model_layout() -> None:
    state = fresh()
    assert state.snapshot() == {
        "calls": 0,
        "tags": [],
        "best": 0,
        "priority": 3,
        "customer": {"name": "anon", "tier": "free"},
        "findings": [],
        "workers": {},
        "opened": None,
        "note": None,
        "either": 0,
    }
    kinds = decoded(state)[1]
    assert kinds["customer"][0] == "map"
    assert kinds["workers"][0] == "map"
    assert kinds["findings"][0] == "array"
    assert kinds["tags"][0] == "array"
    assert state.schema is Triage
    assert isinstance(state.model(), Triage)


def test_initialize_false_leaves_state_empty() -> None:
    state = SharedState(schema=Triage, initialize=False)
    assert state.snapshot() == {}
    assert state.model() == Triage()


def test_required_fields_are_not_defaulted_and_model_reports_them() -> None:
    class Job(BaseModel):
        owner: str
        retries: int = 0

    state = SharedState(schema=Job)
    assert state.snapshot() == {"retries": 0}
    with pytest.raises(SchemaError) as info:
        state.model()
    assert info.value.errors[0]["type"] == "missing"
    assert info.value.errors[0]["loc"] == ("owner",)
    with state.fork("a") as b:
        b.set("owner", "ana")
    assert state.model() == Job(owner="ana")


def test_invalid_default_is_left_to_the_model() -> None:
    class Odd(BaseModel):
        n: int = None  # type: ignore[assignment]
        m: int = 1

    state = SharedState(schema=Odd)
    assert state.snapshot() == {"m": 1}
    assert state.model().n is None


def test_schema_must_be_a_model() -> None:
    with pytest.raises(TypeError):
        SharedState(schema=dict)  # type: ignore[type-var]
    with pytest.raises(TypeError):
        StateSchema(int)  # type: ignore[arg-type]


# -- typed reads and writes -------------------------------------------------------------
def test_typed_values_are_stored_json_safe_and_read_back_typed() -> None:
    state = fresh()
    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=2)))
    with state.fork("a") as b:
        b.set("opened", when)
        b.append("findings", Finding(title="disk", severity=Severity.HIGH), {"title": "cpu"})
        b.set("customer", Customer(name="Ada", tier="gold"))
        b.set("workers.w1", {"name": "w1"})
    snap = state.snapshot()
    assert snap["opened"] == "2024-05-01T12:30:00+02:00"
    assert snap["findings"] == [
        {"title": "disk", "severity": "high"},
        {"title": "cpu", "severity": "low"},
    ]
    assert snap["workers"] == {"w1": {"name": "w1", "status": "idle", "calls": 0}}
    model = state.model()
    assert isinstance(model, Triage)
    assert model.opened == when
    assert model.findings[0].severity is Severity.HIGH
    assert model.customer == Customer(name="Ada", tier="gold")
    assert model.workers["w1"] == Worker(name="w1")


def test_branch_model_sees_own_edits_validated() -> None:
    state = fresh()
    b = state.fork("a")
    b.set("customer.tier", "gold")
    b.append("tags", "x")
    m = b.model()
    assert isinstance(m, Triage)
    assert m.customer.tier == "gold" and m.tags == ["x"]
    assert state.model().customer.tier == "free"


def test_invalid_set_raises_schema_error_and_branch_is_unchanged() -> None:
    state = fresh()
    b = state.fork("a")
    with pytest.raises(SchemaError) as info:
        b.set("customer.tier", "platinum")
    err = info.value
    assert isinstance(err, CrdtStateError) and isinstance(err, ValueError)
    assert err.code == "schema"
    assert err.path == ("customer", "tier")
    assert err.errors == [
        {
            "type": "literal_error",
            "loc": ("customer", "tier"),
            "msg": "Input should be 'free' or 'gold'",
            "input": "platinum",
            "ctx": {"expected": "'free' or 'gold'"},
        }
    ]
    assert "customer.tier" in str(err)
    assert not b.dirty and b.ops() == []
    assert b.get("customer.tier") == "free"
    json.dumps(err.to_dict())  # JSON-friendly for an agent's tool loop


def test_constraint_errors_carry_context() -> None:
    b = fresh().fork("a")
    with pytest.raises(SchemaError) as info:
        b.set("priority", 9)
    (error,) = info.value.errors
    assert error["type"] == "less_than_equal"
    assert error["loc"] == ("priority",)
    assert error["ctx"] == {"le": 5}
    assert error["input"] == 9


def test_unknown_field_is_refused() -> None:
    b = fresh().fork("a")
    with pytest.raises(SchemaError) as info:
        b.set("customer.email", "x@y")
    assert info.value.errors[0]["type"] == "extra_forbidden"
    assert info.value.errors[0]["loc"] == ("customer", "email")
    with pytest.raises(SchemaError):
        b.set("nope", 1)
    assert not b.dirty


def test_extra_allow_accepts_unknown_fields() -> None:
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        n: int = 0

    state = SharedState(schema=Open)
    with state.fork("a") as b:
        b.set("anything.deep", [1, 2])
    assert state.snapshot() == {"n": 0, "anything": {"deep": [1, 2]}}


def test_paths_into_scalars_lists_and_unions_are_refused() -> None:
    b = fresh().fork("a")
    for path in ("calls.x", "tags.x", "either.x", "opened.year"):
        with pytest.raises(SchemaError) as info:
            b.set(path, 1)
        assert info.value.errors[0]["type"] == "path_type"
        assert info.value.errors[0]["loc"] == tuple(path.split("."))
    assert not b.dirty


def test_append_validates_item_by_item() -> None:
    b = fresh().fork("a")
    with pytest.raises(SchemaError) as info:
        b.append("findings", {"title": "ok"}, {"severity": "low"}, {"title": "t", "severity": "x"})
    locs = [e["loc"] for e in info.value.errors]
    assert locs == [("findings", 1, "title"), ("findings", 2, "severity")]
    assert b.get("findings") == [] and not b.dirty
    with pytest.raises(SchemaError) as info:
        b.append("calls", 1)
    assert info.value.errors[0]["type"] == "list_type"


def test_update_with_partial_dict_reports_all_errors_and_writes_nothing() -> None:
    b = fresh().fork("a")
    with pytest.raises(SchemaError) as info:
        b.update({"priority": 0, "customer.tier": "x", "note": "fine"})
    assert [e["loc"] for e in info.value.errors] == [("priority",), ("customer", "tier")]
    assert not b.dirty
    b.update({"priority": 5, "customer.tier": "gold", "note": "fine"})
    assert set(b.changes()) == {("priority",), ("customer", "tier"), ("note",)}


def test_update_with_model_writes_only_edited_fields() -> None:
    state = fresh()
    b = state.fork("a")
    m = b.model()
    assert isinstance(m, Triage)
    m.note = "edited"
    m.customer = Customer(name="Bo")
    b.update(m)
    assert set(b.changes()) == {("note",), ("customer",)}
    with pytest.raises(TypeError):
        b.update(Customer())


def test_typed_read_modify_write_keeps_concurrent_edits() -> None:
    state = fresh()
    a, c = state.fork("a"), state.fork("c")
    ma = a.model()
    assert isinstance(ma, Triage)
    ma.note = "from a"
    a.update(ma)
    c.set("priority", 1)
    c.merge()
    a.merge()  # no conflict: a only wrote the field it edited
    assert state.model().note == "from a"
    assert state.model().priority == 1


def test_commit_validates_values() -> None:
    state = fresh()
    with pytest.raises(SchemaError):
        state.commit({"priority": "high"}, state.token, "a")
    result = state.commit({"priority": "4"}, state.token, "a")
    assert result.applied == (("priority",),)
    assert state.get("priority") == 4


def test_strict_model_reads_stored_datetimes() -> None:
    class Strict(BaseModel):
        model_config = ConfigDict(strict=True)
        at: datetime = datetime(2020, 1, 1, tzinfo=UTC)
        n: int = 0

    state = SharedState(schema=Strict)
    with state.fork("a") as b:
        b.set("at", "2021-02-03T04:05:06Z")  # the stored form is accepted too
        with pytest.raises(SchemaError):
            b.set("n", "7")
    assert state.model() == Strict(at=datetime(2021, 2, 3, 4, 5, 6, tzinfo=UTC))


def test_int_keyed_dict_keys_are_validated() -> None:
    class Scores(BaseModel):
        by_id: dict[int, float] = {}

    state = SharedState(schema=Scores)
    with state.fork("a") as b:
        b.set("by_id.7", 1.5)
        with pytest.raises(SchemaError) as info:
            b.set("by_id.seven", 1.0)
        assert info.value.errors[0]["loc"] == ("by_id", "seven")
    assert state.model() == Scores(by_id={7: 1.5})


# -- merges --------------------------------------------------------------------------------
def test_deleting_required_field_is_refused_at_merge() -> None:
    class Job(BaseModel):
        owner: str = Field()
        worker: Worker | None = None

    state = SharedState(schema=Job)
    with state.fork("a") as b:
        b.set("owner", "ana")
        b.set("worker", {"name": "w"})
    before, token = state.read()
    for path in ("owner", "worker.name"):
        b = state.fork("x")
        b.delete(path)
        with pytest.raises(SchemaError) as info:
            b.merge()
        assert info.value.errors[0]["type"] == "missing"
        assert info.value.errors[0]["loc"] == tuple(path.split("."))
        assert b.status == "open"
        assert state.read() == (before, token)


def test_deleting_field_with_default_reads_default() -> None:
    state = fresh()
    with state.fork("a") as b:
        b.delete("note")
        b.delete("customer.tier")
    assert "note" not in state
    assert state.model().customer.tier == "free"


def test_creating_dict_entry_without_required_field_is_refused_at_merge() -> None:
    state = fresh()
    b = state.fork("a")
    b.set("workers.w9.status", "busy")  # the value itself is fine...
    with pytest.raises(SchemaError) as info:
        b.merge()  # ...but the worker it creates has no name
    assert info.value.errors[0]["loc"] == ("workers", "w9", "name")
    assert b.status == "open"
    b.set("workers.w9.name", "nine")
    b.merge()
    assert state.model().workers["w9"] == Worker(name="nine", status="busy")


def test_resolver_returning_bad_value_is_refused_state_unchanged_branch_open() -> None:
    state = fresh(resolvers={"priority": lambda c: 99})
    a, b = state.fork("a"), state.fork("b")
    a.set("priority", 2)
    a.merge()
    before = state.read()
    b.set("priority", 4)
    b.set("note", "also here")
    with pytest.raises(SchemaError) as info:
        b.merge()
    assert info.value.errors[0]["loc"] == ("priority",)
    assert info.value.errors[0]["input"] == 99
    assert state.read() == before
    assert b.status == "open"
    result = b.merge(resolvers={"priority": resolvers.maximum})
    assert result.conflicts[0].resolution == 4
    assert state.get("note") == "also here"


def test_explicit_resolvers_take_precedence_over_annotations() -> None:
    state = fresh(resolvers={"calls": resolvers.first_writer_wins})
    a, b = state.fork("a"), state.fork("b")
    a.set("calls", 5)
    b.set("calls", 7)
    a.merge()
    b.merge()
    assert state.get("calls") == 5
    plain = fresh()
    a, b = plain.fork("a"), plain.fork("b")
    a.set("calls", 5)
    b.set("calls", 7)
    a.merge()
    b.merge()
    assert plain.get("calls") == 12


def test_unannotated_field_conflict_still_raises() -> None:
    state = fresh()
    a, b = state.fork("a"), state.fork("b")
    a.set("note", "x")
    b.set("note", "y")
    a.merge()
    with pytest.raises(ConflictError):
        b.merge()


def test_nested_policies_from_dict_values() -> None:
    state = fresh()
    with state.fork("s") as s:
        s.set("workers.w1", {"name": "w1"})
    a, b = state.fork("a"), state.fork("b")
    a.set("workers.w1.calls", 2)
    b.set("workers.w1.calls", 3)
    a.merge()
    b.merge()
    assert state.model().workers["w1"].calls == 5
    assert StateSchema(Triage).policies() == {
        "calls": resolvers.counter,
        "tags": resolvers.union,
        "best": resolvers.maximum,
        "workers.*.calls": resolvers.counter,
    }


def test_root_model_validator_refuses_merge() -> None:
    class Range(BaseModel):
        lo: int = 0
        hi: int = 10

        @model_validator(mode="after")
        def ordered(self) -> Range:
            if self.lo > self.hi:
                raise ValueError("lo must not exceed hi")
            return self

    state = SharedState(schema=Range)
    b = state.fork("a")
    b.set("lo", 11)  # fine alone
    with pytest.raises(SchemaError) as info:
        b.merge()
    assert info.value.errors[0]["type"] == "value_error"
    assert info.value.errors[0]["loc"] == ()
    assert state.snapshot() == {"lo": 0, "hi": 10}
    b.set("hi", 20)
    b.merge()
    assert state.model() == Range(lo=11, hi=20)


def test_nested_field_validator_runs_at_merge() -> None:
    class Box(BaseModel):
        low: int = 0
        high: int = 1

        @field_validator("high")
        @classmethod
        def above(cls, v: int, info: Any) -> int:
            if v <= info.data.get("low", 0):
                raise ValueError("high must exceed low")
            return v

    class Holder(BaseModel):
        box: Box = Box()

    state = SharedState(schema=Holder)
    b = state.fork("a")
    b.set("box.low", 5)
    with pytest.raises(SchemaError) as info:
        b.merge()
    assert info.value.errors[0]["loc"] == ("box", "high")


def test_merges_validate_only_what_they_touch() -> None:
    seen: list[str] = []

    class Item(BaseModel):
        name: str

        @field_validator("name")
        @classmethod
        def count(cls, v: str) -> str:
            seen.append(v)
            return v

    class Big(BaseModel):
        items: list[Item] = []
        by_key: dict[str, Item] = {}

    state = SharedState(schema=Big)
    with state.fork("a") as b:
        b.extend("items", [{"name": f"i{n}"} for n in range(50)])
        b.update({f"by_key.k{n}": {"name": f"k{n}"} for n in range(50)})
    seen.clear()
    with state.fork("a") as b:
        b.append("items", {"name": "new"})
        b.set("by_key.k3", {"name": "k3b"})
    # an appended item is validated once (when written); a set value once more at merge,
    # and neither the 50 other items nor the 50 other entries are validated again
    assert sorted(seen) == ["k3b", "k3b", "new"]
    assert len(state.model().items) == 51


# -- remote updates -----------------------------------------------------------------------
def test_apply_update_refuses_invalid_remote_writes_and_keeps_state() -> None:
    typed = fresh()
    plain = SharedState()
    plain.apply_update(typed.get_update())
    with plain.fork("rogue") as b:
        b.set("customer.tier", "platinum")
        b.set("priority", 2)
    before = typed.read()
    with pytest.raises(SchemaError) as info:
        typed.apply_update(plain.get_update())
    assert [e["loc"] for e in info.value.errors] == [("customer", "tier")]
    assert typed.read() == before
    # a valid later update that overwrites the bad value is accepted in full
    with plain.fork("rogue") as b:
        b.set("customer.tier", "gold")
    typed.apply_update(plain.get_update())
    assert typed.model().customer.tier == "gold"
    assert typed.get("priority") == 2


def test_apply_update_refuses_unknown_keys_and_required_deletes() -> None:
    class Job(BaseModel):
        owner: str = Field()
        n: int = 0

    typed = SharedState(schema=Job)
    b: Branch[BaseModel]  # a typed branch first, then plain ones
    with typed.fork("a") as b:
        b.set("owner", "ana")
    for edit in ("extra", "delete"):
        plain = SharedState()
        plain.apply_update(typed.get_update())
        with plain.fork("x") as b:
            if edit == "extra":
                b.set("surprise", 1)
            else:
                b.delete("owner")
        before = typed.read()
        with pytest.raises(SchemaError) as info:
            typed.apply_update(plain.get_update())
        assert info.value.errors[0]["type"] == ("extra_forbidden" if edit == "extra" else "missing")
        assert typed.read() == before


def test_apply_update_garbage_is_invalid_update() -> None:
    typed = fresh()
    with pytest.raises(InvalidUpdate):
        typed.apply_update(b"\x01\x02garbage")


def test_replicas_with_schema_converge() -> None:
    a = SharedState(schema=Triage)
    b = SharedState(schema=Triage, initialize=False)
    b.apply_update(a.get_update())
    with a.fork("x") as br:
        br.append("findings", {"title": "one"})
    b.apply_update(a.get_update())
    assert b.model() == a.model()


# -- wire format and JSON schema -----------------------------------------------------------
def test_schema_and_plain_states_build_identical_documents() -> None:
    typed = SharedState(schema=Triage, client_id=4242)
    plain = SharedState(client_id=4242)
    defaults = StateSchema(Triage).defaults()
    with plain.fork("schema") as b:
        for key, value in defaults.items():
            b.set(key, value)
    edits: list[Change] = [
        Change("set", ("opened",), datetime(2024, 1, 2, tzinfo=UTC)),
        Change("append", ("findings",), [Finding(title="t", severity=Severity.HIGH)]),
        Change("set", ("workers", "w"), Worker(name="w", status="busy")),
        Change("set", ("customer", "tier"), "gold"),
    ]
    typed.commit(edits, typed.token, "agent")
    schema = StateSchema(Triage)
    plain.commit(
        [
            Change(c.kind, c.path, schema.prepare_items(c.path, c.value))
            if c.kind == "append"
            else Change(c.kind, c.path, schema.prepare(c.path, c.value))
            for c in edits
        ],
        plain.token,
        "agent",
    )
    assert decoded(typed) == decoded(plain)
    assert typed.snapshot() == plain.snapshot()
    assert typed.get_update() == plain.get_update()


def test_json_schema_is_the_models() -> None:
    state = fresh()
    assert state.json_schema() == Triage.model_json_schema()
    assert state.json_schema()["properties"]["priority"]["maximum"] == 5
    with pytest.raises(TypeError):
        SharedState().json_schema()
    with pytest.raises(TypeError):
        SharedState().model()


def test_writing_inside_an_optional_model_that_is_none() -> None:
    class Holder(BaseModel):
        customer: Customer | None = None

    state = SharedState(schema=Holder)
    assert state.snapshot() == {"customer": None}
    with state.fork("a") as b:
        with pytest.raises(WrongType):  # below a None value, as in an untyped state
            b.set("customer.tier", "gold")
        b.set("customer", {"tier": "gold"})
        b.set("customer.name", "Ada")  # now a map: its fields are paths
    assert state.model() == Holder(customer=Customer(name="Ada", tier="gold"))


def test_constrained_list_is_checked_whole_at_merge() -> None:
    class Short(BaseModel):
        items: list[int] = Field(default=[], max_length=2)

    state = SharedState(schema=Short)
    a, b = state.fork("a"), state.fork("b")
    a.extend("items", [1, 2])
    b.append("items", 3)  # fine on its own branch...
    a.merge()
    with pytest.raises(SchemaError) as info:
        b.merge()  # ...but the merged list would hold three items
    assert info.value.errors[0]["type"] == "too_long"
    assert info.value.errors[0]["loc"] == ("items",)
    assert state.get("items") == [1, 2]
    assert b.status == "open"
