"""The fleet simulation: node pools of replicas with lifecycles (provisioning ->
loading -> warming up -> active -> draining -> down) and their own uptime, the arrival
process that routes each request at its arrival time (``Replica.submit``), client
retries, and the periodic restart / autoscaling decisions applied. Routers and policies
read ``sim.engine.view.ReplicaView`` / ``policies.fleet_view.FleetView`` and never mutate
a replica. The postmortem (:mod:`sim.postmortem`) and telemetry (:mod:`sim.telemetry`)
read the fleet; the fleet reads neither."""
