"""Routing policies for the fleet (``sim.fleet.fleet.Fleet.route`` calls them at each
arrival, retry and redirect): one module per family (``simple``, ``load``, ``affinity``,
``fragmentation``), their configs (``config``) and one registry (``registry``), as
``policies.allocators``. A router reads ``sim.engine.view.ReplicaView`` objects through
``base.RouterView`` and returns the index of the replica to send a request to (or None
when no replica is up); it never mutates a replica. The contract is in ``base``."""
