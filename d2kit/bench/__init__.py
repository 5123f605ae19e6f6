"""Load tests and benchmarks: the design's arithmetic checked against the real system.

* ``harness``  -- the rig: a scratch database, a cluster of real processes, offered load on the database clock,
  and measurements read back from the recorded history (fire lag, throughput, CPU, peak RSS).
* ``scenarios`` -- the experiments ``make bench`` runs: sustained 833/s, maximum rate, drain, batch curve,
  held snapshot.
* ``scale``    -- claim and materialise latency with 10k vs 10M scheduled jobs.
* ``peers``    -- the same no-op workload through pgqueuer and procrastinate, in their own virtualenv.
* ``loadtest`` -- ``make load``: Locust against the HTTP API while a cluster runs.
* ``results``  -- the result JSON (one schema, one writer) and the time-series chart.
* ``machine_load`` -- the machine's load before and during each part: was the bench alone?
* ``check``    -- ``d2kit load check``: every number the design states next to what was measured, stale or not.
* ``cli``      -- the ``d2kit load`` and ``d2kit bench`` command groups.
"""
