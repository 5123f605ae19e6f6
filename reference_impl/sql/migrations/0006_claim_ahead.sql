-- d2_claim takes the claim-ahead window and returns each row's ready_at (operations.sql): its arguments and result
-- changed, so the old signature is dropped (or both would exist).
DROP FUNCTION IF EXISTS d2_claim(text, text, integer, double precision);
