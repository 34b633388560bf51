"""Restart policies (issue 11, not built yet): periodic decisions over read-only replica
views (``sim.engine.view.ReplicaView``) -- which replica to restart, drained or killed,
and why. One registry, as ``policies.allocators``."""
