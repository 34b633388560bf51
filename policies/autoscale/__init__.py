"""Autoscaling policies: periodic decisions over a read-only fleet view
(``policies.fleet_view.FleetView``) -- nodes to add or remove, or to restart instead, with a
cause. One registry (``policies.autoscale.registry.AUTOSCALERS``), parsed by
``parse_autoscaler``."""
