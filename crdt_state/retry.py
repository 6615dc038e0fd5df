"""Retry schedules: capped exponential backoff with full jitter (pure logic)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .errors import WrongType

__all__ = ["Retry"]


@dataclass(frozen=True)
class Retry:
    """How often, and after how long, a conflicting agent step is re-run.

    Attempt ``n`` (counting the first run as 1) that ends in a retry waits a
    random time in ``[0, min(max_delay, base_delay * 2 ** (n - 1))]`` before
    the next run ("full jitter", which spreads herds of retrying agents).
    After ``attempts`` runs, ``transact`` raises ``RetryExhausted``.
    """

    attempts: int = 5
    base_delay: float = 0.01
    max_delay: float = 1.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("attempts", "base_delay", "max_delay"):
            value = getattr(self, name)
            wanted = int if name == "attempts" else (int, float)
            if not isinstance(value, wanted) or isinstance(value, bool):
                raise WrongType(
                    f"Retry.{name} must be a number{' (int)' if name == 'attempts' else ''},"
                    f" not {type(value).__name__}",
                    details={name: repr(value)[:40]},
                )
        if self.attempts < 1:
            raise ValueError("Retry.attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("Retry delays must not be negative")

    def cap(self, attempt: int) -> float:
        """The largest wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_delay, self.base_delay * 2.0 ** min(attempt - 1, 62)))

    def delay(self, attempt: int) -> float:
        """A jittered wait after failed attempt number ``attempt`` (1-based)."""
        return self.rng.uniform(0.0, self.cap(attempt))
