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


async def test_a_db_where_room_files_cannot_be_made_is_refused_at_start(tmp_path: Path) -> None:
    """It used to start, then answer every client "1011 internal error"."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    with pytest.raises(HubConfigError) as info:
        await Hub(port=0, db=a_file).start()
    assert info.value.code == "db" and "is a file" in str(info.value)
    # nobody, not even root, makes directories in /proc
    with pytest.raises(HubConfigError) as info:
        await Hub(port=0, db=Path("/proc/crdt-state-test/rooms")).start()
    assert info.value.code == "db" and "cannot be created" in str(info.value)
    async with Hub(port=0, db=tmp_path / "new" / "rooms") as hub:  # made when missing
        assert hub.db is not None and hub.db.is_dir()
