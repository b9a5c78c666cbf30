-- 009 added an overload with a window; 008's function stays.
DROP FUNCTION IF EXISTS {{name "claim_runs"}}(int, bigint, smallint[], bigint[], text, text[], bigint[], bigint, bigint);
