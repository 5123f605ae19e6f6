-- Route by observed duration: where a recurring job's next occurrences go when its recent run times say 'long'
-- (d2_route_by_duration in operations.sql). NULL, the default, keeps every existing job in its declared pool.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS routed_pool text REFERENCES pools (name);
