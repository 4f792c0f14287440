"""Built-in detectors, one per file; each registers itself with ``@register``."""
