"""``crdt-state mcp``: a shared state served to MCP clients as tools and resources.

- :mod:`sync.mcp.tools`: what the tools do, over a local or a remote state (pure of MCP);
- :mod:`sync.mcp.server`: the MCP SDK wiring (tools, resources, subscriptions, transports);
- :mod:`sync.mcp.cli`: the ``crdt-state mcp`` subcommand.

Importing this package imports neither the MCP SDK nor its submodules: the SDK is an
optional dependency (``pip install 'crdt-state[mcp]'``), needed only by
:mod:`sync.mcp.server`.
"""

__all__: list[str] = []
