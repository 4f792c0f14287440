"""The read API's routers, one module per topic (api.md)."""
