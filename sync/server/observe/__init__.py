"""Seeing a hub's state: health, readiness, Prometheus metrics, the live inspector page.

- :mod:`sync.server.observe.routes`: the HTTP routes and the inspector's token rule;
- :mod:`sync.server.observe.metrics`: :class:`HubMetrics` (``GET /metrics``);
- :mod:`sync.server.observe.events`: the JSON events of the inspector feed (pure);
- :mod:`sync.server.observe.feed`: one page's live feed of a room;
- :mod:`sync.server.observe.inspector`: :class:`Inspector`, the hub's hooks into all this.
"""

from sync.server.observe.inspector import HubView, Inspector, ReadinessCheck
from sync.server.observe.metrics import HubMetrics

__all__ = ["HubMetrics", "HubView", "Inspector", "ReadinessCheck"]
