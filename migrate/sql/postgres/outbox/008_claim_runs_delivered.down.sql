-- The function as 007_claim_runs created it.
DROP FUNCTION IF EXISTS {{name "claim_runs"}}(int, bigint, smallint[], bigint[], text, text[], bigint[]);
-- txbox:up 7
