"""Hub options a user gets wrong: refused before the hub starts, with a typed error."""

from __future__ import annotations

from pathlib import Path

import pytest

from sync.server import Hub, HubConfigError


@pytest.mark.parametrize("db", ["", "  "])
def test_an_empty_db_is_refused_not_taken_for_the_current_directory(db: str) -> None:
    with pytest.raises(HubConfigError) as info:
        Hub(port=0, db=db)
    assert info.value.code == "db"
    assert repr(db) in str(info.value) and "db=None" in str(info.value)


def test_db_none_keeps_rooms_in_memory_and_a_directory_is_a_directory(tmp_path: Path) -> None:
    assert Hub(port=0, db=None).db is None
    assert Hub(port=0, db=tmp_path / "rooms").db == tmp_path / "rooms"
    assert Hub(port=0, db=str(tmp_path)).db == tmp_path
