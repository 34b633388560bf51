"""The fleet (issue 11, not built yet): node pools of replicas with lifecycles
(provisioning -> loading -> warming up -> active -> draining -> down) and their own
uptime, the arrival process that routes each request at its arrival time
(``Replica.submit``), client retries, and the periodic restart / autoscaling processes.
Routers and policies read ``sim.engine.view.ReplicaView`` and never mutate a replica."""
