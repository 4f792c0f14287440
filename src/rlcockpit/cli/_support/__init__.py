"""Helpers of the command modules, not commands themselves.

Every module directly under ``rlcockpit.cli`` registers sub-commands (``COMMAND_MODULES``); what
they share or delegate lives here:

- ``demo_users``: the demo's two people (operator, approver) and their sign-in links
- ``demo_guide``: the demo's incident guide printed in the terminal
- ``ops``: wiring of the ops stack (Prometheus, Alertmanager, logs, traces) into a training run
- ``remote``: the HTTP client of the commands that talk to a running cockpit
- ``reference``: docs/cli.md generated from the parser (``python -m rlcockpit.cli._support.reference``)
"""
