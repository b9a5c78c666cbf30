DROP FUNCTION IF EXISTS {{name "claim_runs"}}(int, bigint, smallint[], bigint[], text, text[], bigint[]);
