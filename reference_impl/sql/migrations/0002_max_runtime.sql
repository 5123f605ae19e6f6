-- A maximum runtime per job, defaulting per pool: past it an attempt is cancelled, then ends timed_out
-- (the new attempt state is inserted by schema.sql's state_transitions, which runs right after this).
ALTER TABLE pools ADD COLUMN IF NOT EXISTS max_runtime interval NOT NULL DEFAULT '10 minutes'
    CHECK (max_runtime > '0');
UPDATE pools SET max_runtime = '7 hours' WHERE name = 'long';
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS max_runtime interval CHECK (max_runtime > '0');
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS deadline timestamptz;
