-- Databases made before the schema was versioned (any `.pgdata/` from before this migration).
-- schema.sql runs right after this and recreates, with today's definition, every index dropped here.

-- Why the materialiser could not plan a job (it is parked, not dropped).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS schedule_error text;
-- Retention (d2_forget_jobs) needs to know when a one-shot job's last execution was archived.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS history_until timestamptz;

-- Indexes whose definition changed under the same name: IF NOT EXISTS kept the old one, and the old
-- occurrences_unfinished is the plan trap schema.sql warns about (130 ms per claim behind a backlog).
DROP INDEX IF EXISTS occurrences_ready;
DROP INDEX IF EXISTS occurrences_running;
DROP INDEX IF EXISTS occurrences_unfinished;
DROP INDEX IF EXISTS occurrences_open;  -- renamed occurrences_unfinished, with a predicate that is not the state

-- Retention used to delete history row by row; history now leaves by dropping whole days (d2_rotate_history).
DROP FUNCTION IF EXISTS d2_clean(interval, integer);

-- Constraints added since the first schema. The data is made to satisfy them first: a terminal occurrence
-- has its finish time, an unfinished one has none.
UPDATE occurrences SET finished_at = coalesce(finished_at, created_at)
 WHERE state NOT IN ('waiting', 'ready', 'running') AND finished_at IS NULL;
UPDATE occurrences SET finished_at = NULL WHERE state IN ('waiting', 'ready', 'running') AND finished_at IS NOT NULL;
ALTER TABLE occurrences DROP CONSTRAINT IF EXISTS finished_iff_terminal;
ALTER TABLE occurrences ADD CONSTRAINT finished_iff_terminal
    CHECK ((finished_at IS NULL) = (state IN ('waiting', 'ready', 'running')));
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_materialized_through_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_materialized_through_check CHECK (isfinite(materialized_through));

-- The first state-machine triggers looked each transition up per row; schema.sql now compiles them from
-- state_transitions into WHEN clauses (occurrences_state_machine_birth / _move, and the same for attempts).
DROP TRIGGER IF EXISTS occurrences_state_machine ON occurrences;
DROP TRIGGER IF EXISTS attempts_state_machine ON attempts;
DROP FUNCTION IF EXISTS enforce_state_transition();
