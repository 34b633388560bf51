"""Restart policies: periodic decisions over a read-only fleet view
(``policies.fleet_view.FleetView``) -- which nodes to restart now, and why. One registry
(``policies.restart.registry.RESTART_POLICIES``), parsed by ``parse_restart``."""
