"""Access tokens never reach the hub's logs: a filter that masks them in every record.

The websocket library logs each handshake's request line (``GET /room?token=...``) and
headers (``Authorization: Bearer ...``) at DEBUG level, and the request path can appear in
tracebacks. :func:`masking_logger` returns a logger whose records have every ``token=``
query value, bearer credential and inspector cookie replaced by :data:`MASK` before any
handler sees them; the hub passes it to ``websockets.serve`` and masks its own logger the same way.
"""

from __future__ import annotations

import logging
import re
from typing import Final

__all__ = ["MASK", "mask_secrets", "masking_logger"]

MASK: Final = "***"
"""What a token is shown as in logs."""

_TOKEN_PARAM: Final = re.compile(r"((?:^|[?&;\s/])token=)[^&;#\s'\"]*", re.IGNORECASE)
_BEARER: Final = re.compile(r"(\bbearer\s+)[^\s'\",;]+", re.IGNORECASE)
_INSPECT_COOKIE: Final = re.compile(r"(\bcrdt_inspect=)[^\s'\",;]*", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """``text`` with tokens masked: ``token=`` query values, bearer credentials, cookies.

    The inspector's cookie is ``crdt_inspect=`` in ``Cookie`` and ``Set-Cookie`` headers.
    """
    lowered = text.lower()
    if "token=" in lowered or "bearer" in lowered or "crdt_inspect=" in lowered:
        text = _TOKEN_PARAM.sub(rf"\g<1>{MASK}", text)
        text = _BEARER.sub(rf"\g<1>{MASK}", text)
        text = _INSPECT_COOKIE.sub(rf"\g<1>{MASK}", text)
    return text


class _MaskSecrets(logging.Filter):
    """Rewrites a record's message (and its formatted traceback) with tokens masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format: leave it to the handler
            return True
        masked = mask_secrets(text)
        if masked != text:
            record.msg, record.args = masked, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = mask_secrets(logging.Formatter().formatException(record.exc_info))
        return True


def masking_logger(name: str) -> logging.Logger:
    """The logger ``name``, with the masking filter added once (idempotent)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _MaskSecrets) for f in logger.filters):
        logger.addFilter(_MaskSecrets())
    return logger
