-- Delivery semantics per job: at_least_once (as before) or at_most_once, whose occurrence is never started twice
-- (d2_settle makes it dead when its one attempt does not succeed). Existing jobs keep at_least_once.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS delivery text NOT NULL DEFAULT 'at_least_once'
    CHECK (delivery IN ('at_least_once', 'at_most_once'));
ALTER TABLE jobs ADD CONSTRAINT at_most_once_is_one_attempt CHECK (delivery = 'at_least_once' OR max_attempts = 1);
