"""Every test here runs a real Node.js Yjs client: without Node (or the npm packages)
they fail where ``scripts/test.sh`` set them up (``CRDT_STATE_REQUIRE_INTEROP``), and are
skipped elsewhere, naming what is missing."""

from __future__ import annotations

import pytest
from yjs_node import interop_required, node_missing_reason


@pytest.fixture(autouse=True)
def _node_available() -> None:
    reason = node_missing_reason()
    if reason is not None:
        if interop_required():
            pytest.fail(reason)
        pytest.skip(reason)
