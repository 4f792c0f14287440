"""Bridges between rlcockpit and other tools (DESIGN.md §2): the alias table that maps TRL, verl
and OpenRLHF metric keys to catalog names, importers for their log files and for TensorBoard, and
the exporter of stored runs. Importing this package stays light: pyarrow, tensorboard and the
store load only when an import or export runs."""

from __future__ import annotations

from rlcockpit.integrations.aliases import ALIASES, SOURCES, detect_source, import_name, to_catalog

__all__ = ["ALIASES", "SOURCES", "detect_source", "import_name", "to_catalog"]
