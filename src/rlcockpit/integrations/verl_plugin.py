"""The entry point of group ``verl.plugins`` (pyproject.toml): ``import verl`` imports this module,
which registers the ``rlcockpit`` tracking backend (:func:`rlcockpit.integrations.verl.install`).

Loaded in every process that imports verl (the driver, its TaskRunner actor, every Ray worker), so
it only patches verl's ``Tracking`` class: nothing of rlcockpit's telemetry loads until a tracker
names the backend (``trainer.logger='["console","rlcockpit"]'``).
"""

from rlcockpit.integrations.verl import install

INSTALLED = install()
