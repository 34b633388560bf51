"""Routing policies (issue 11, not built yet): one module per family and one registry,
as ``policies.allocators``. A router reads ``sim.engine.view.ReplicaView`` objects and
returns the replica to send a request to (or a refusal); it never mutates a replica."""
