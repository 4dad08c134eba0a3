"""quants mcp: the Model Context Protocol server over the stable API (crawler.api).

May import: base, profile, library, api.
Details: docs/internals/base.md#mcp_server
"""
