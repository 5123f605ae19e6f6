"""D2 Kit reference scheduler: PostgreSQL + scheduler replicas + worker processes.

Where each idea lives (one place each):

==========================  =====================================================
schema and state machines   ``sql/schema.sql``
claim / heartbeat / fence   ``sql/operations.sql`` (d2_claim, d2_heartbeat, d2_complete)
reaper (lease expiry)       ``sql/operations.sql`` d2_reap, run by ``reaper.py``
history and retention       ``sql/schema.sql`` execution_history; ``sql/operations.sql`` d2_archive and
                            d2_rotate_history, run by ``cleaner.py``
materialiser (replicas)     ``materializer.py`` + d2_materialise
routing by run time         ``sql/operations.sql`` d2_route_by_duration, run by ``router.py``
catch-up and overlap        ``policies.py``; d2_enqueue applies the overlap policy, also to a manual run
                            (d2_trigger)
jobs: validation and calls  ``jobs.py`` (shared by the CLI and the API)
local cluster, supervised   ``cluster.py`` (real processes), ``supervisor.py`` (``d2kit up`` restarts them)
cron, time zones, DST       ``schedule.py``
worker lease trust          ``lease.py``
worker process              ``worker.py``
scheduler process           ``scheduler.py``: its maintenance services (``maintenance.py``)
names the schema constrains ``states.py`` (checked against schema.sql by a test)
schema upgrades             ``sql/migrations/`` applied by ``db.init_schema`` (``d2kit db upgrade``)
==========================  =====================================================
"""
