-- A pool's claims are split into sub-pools (pools.sub_pools, d2_sub_pool in operations.sql): the new column, and
-- the claim-bounds functions now take the sub-pool, so their one-argument signatures are dropped.
ALTER TABLE pools ADD COLUMN IF NOT EXISTS sub_pools integer NOT NULL DEFAULT 1 CHECK (sub_pools BETWEEN 1 AND 64);
DROP FUNCTION IF EXISTS d2_claim_bounds_stale(text);
DROP FUNCTION IF EXISTS d2_refresh_claim_bounds(text);
