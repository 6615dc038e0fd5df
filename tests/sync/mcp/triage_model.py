"""A pydantic state model for the MCP tests (loaded by ``crdt-state mcp --schema``)."""

from __future__ import annotations

from pydantic import BaseModel


class Ticket(BaseModel):
    """A typed state: a priority and free-form fields."""

    priority: int = 0
    notes: dict[str, str] = {}
