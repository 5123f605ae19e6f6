-- Attempts lose their lease index, so heartbeats and completions can be HOT updates; the reaper finds expired
-- leases through occurrences_running (d2_reap in operations.sql). The fillfactor is in schema.sql.
DROP INDEX IF EXISTS attempts_lease;
