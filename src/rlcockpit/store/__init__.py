"""Stores chosen by URI: ``sqlite:///path/to.db`` (default). See :func:`open_store`."""
