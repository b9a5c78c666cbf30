-- Two more rules of the contract that SQLite's dynamic typing leaves to
-- triggers (see docs/sql-contract.md).
--
-- The lease: claim_token is NULL or text, claimed_until NULL or an integer
-- (unix microseconds) at most 2 hours ahead (outboxsql.MaxClaimLease, the
-- longest --claim-lease). A lease of text, or one years ahead, would hold
-- its row, and every later row of its key, out of every claim. The relay's
-- claim also treats such a lease as expired, so rows written before this
-- migration are claimed again.
--
-- Redriving: a dead row made pending again (dead_at set to NULL) must obey
-- the message's rules, as a pending row does; the contract's BEFORE UPDATE
-- trigger checks only the columns an UPDATE changes, so it would let a row
-- parked as invalid be redriven. The relay would park it again; refusing
-- it names the rule at once, as PostgreSQL's and MySQL's CHECKs do.

-- txbox:begin
CREATE TRIGGER {{ident "lease_insert"}}
BEFORE INSERT ON {{table}}
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'txbox: claim_token must be NULL or text')
    WHERE typeof(NEW.claim_token) NOT IN ('null', 'text');
    SELECT RAISE(ABORT, 'txbox: claimed_until must be NULL or an integer (unix microseconds) at most 2 hours ahead')
    WHERE NEW.claimed_until IS NOT NULL AND (typeof(NEW.claimed_until) <> 'integer'
        OR NEW.claimed_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + 7200000000);
END;
-- txbox:end

-- txbox:begin
CREATE TRIGGER {{ident "lease_update"}}
BEFORE UPDATE OF claim_token, claimed_until ON {{table}}
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'txbox: claim_token must be NULL or text')
    WHERE typeof(NEW.claim_token) NOT IN ('null', 'text');
    SELECT RAISE(ABORT, 'txbox: claimed_until must be NULL or an integer (unix microseconds) at most 2 hours ahead')
    WHERE NEW.claimed_until IS NOT NULL AND (typeof(NEW.claimed_until) <> 'integer'
        OR NEW.claimed_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + 7200000000);
END;
-- txbox:end

-- txbox:begin
CREATE TRIGGER {{ident "contract_redrive"}}
BEFORE UPDATE OF dead_at ON {{table}}
FOR EACH ROW WHEN OLD.dead_at IS NOT NULL AND NEW.dead_at IS NULL AND NEW.published_at IS NULL
BEGIN
    SELECT RAISE(ABORT, 'txbox: message_id must be text of 1 to 256 bytes')
    WHERE typeof(NEW.message_id) <> 'text' OR length(CAST(NEW.message_id AS BLOB)) NOT BETWEEN 1 AND 256;
    SELECT RAISE(ABORT, 'txbox: message_id must not contain control characters')
    WHERE NEW.message_id GLOB '*[' || char(1) || '-' || char(31, 127) || ']*';
    SELECT RAISE(ABORT, 'txbox: topic must be text of 1 to 256 bytes')
    WHERE typeof(NEW.topic) <> 'text' OR length(CAST(NEW.topic AS BLOB)) NOT BETWEEN 1 AND 256;
    SELECT RAISE(ABORT, 'txbox: topic must not contain white space or control characters')
    WHERE NEW.topic GLOB '*[' || char(1) || '-' || char(32, 127, 160, 8232, 8233) || ']*';
    SELECT RAISE(ABORT, 'txbox: ordering_key must be NULL or text of at most 256 bytes')
    WHERE NEW.ordering_key IS NOT NULL AND (typeof(NEW.ordering_key) <> 'text' OR length(CAST(NEW.ordering_key AS BLOB)) > 256);
    SELECT RAISE(ABORT, 'txbox: ordering_key must not contain control characters')
    WHERE NEW.ordering_key GLOB '*[' || char(1) || '-' || char(31, 127) || ']*';
    SELECT RAISE(ABORT, 'txbox: headers must be a JSON object in text')
    WHERE NOT CASE WHEN typeof(NEW.headers) = 'text' AND json_valid(NEW.headers) THEN json_type(NEW.headers) = 'object' ELSE 0 END;
END;
-- txbox:end
