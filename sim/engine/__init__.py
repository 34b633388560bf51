"""The engine's compiled core (``sim/build.py`` lists its modules for mypyc).

* ``batch`` -- what the scheduler works on: a request's group of sequences, a step, events.
* ``scheduler`` -- continuous batching over one allocator (admission and placement).
* ``growth`` -- the one owner of decode growth: the decode ticks' books and every
  growth decision and preemption.
* ``ticks`` -- the decode ticks' books (O(1) steps in the batch size).
* ``replica`` -- one serving replica as a SimPy process (exact and fast mode), fed by a
  caller or its own list, with a read-only view for routers and policies.
* ``recorder`` -- per-replica samples, the event log and request records.
"""
