"""The cluster's public names and error family: stable codes, catchable as families."""

from __future__ import annotations

import pickle

import pytest

import sync.server.cluster as cluster
from crdt_state import CrdtStateError
from sync import SyncError
from sync.server.cluster import (
    ClusterError,
    ClusterSchemaError,
    ClusterUnavailable,
    Fenced,
    LeaseLost,
    LossReason,
)

STABLE_CODES = {
    ClusterError: "cluster",
    Fenced: "fenced",
    LeaseLost: "lease_lost",
    ClusterUnavailable: "cluster_unavailable",
    ClusterSchemaError: "cluster_schema",
}


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from sync.server.cluster import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(cluster.__all__)
    assert len(cluster.__all__) == len(set(cluster.__all__))


@pytest.mark.parametrize(("error", "code"), STABLE_CODES.items())
def test_codes_are_stable_and_errors_belong_to_both_roots(
    error: type[ClusterError], code: str
) -> None:
    assert error.code == code
    assert issubclass(error, CrdtStateError) and issubclass(error, SyncError)


@pytest.mark.parametrize(
    "error",
    [
        Fenced("r", 3, 4),
        LeaseLost("r", "hub#1", LossReason.EXPIRED),
        ClusterUnavailable("redis", "redis did not answer"),
    ],
)
def test_errors_survive_pickling_with_their_details(error: ClusterError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert again.to_dict() == error.to_dict()
    assert str(again).startswith(f"[{error.code}]")


def test_unavailable_is_a_connection_error() -> None:
    with pytest.raises(ConnectionError):
        raise ClusterUnavailable("postgres", "down")
    assert LeaseLost("r", "t", LossReason.TAKEN).details["reason"] == "taken"
