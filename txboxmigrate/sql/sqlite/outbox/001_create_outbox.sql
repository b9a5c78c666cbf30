-- The outbox table: one row per message. See docs/reference/sql-contract.md.
-- Times are unix microseconds. A row inserted with only topic and payload is
-- valid: the id, headers and times come from the defaults.
CREATE TABLE {{table}} (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id      TEXT    NOT NULL DEFAULT (lower(hex(randomblob(16)))),
    topic           TEXT    NOT NULL CHECK (topic <> ''),
    ordering_key    TEXT,
    payload         BLOB    NOT NULL,
    headers         TEXT    NOT NULL DEFAULT '{}',
    created_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    last_error      TEXT,
    published_at    INTEGER,
    dead_at         INTEGER,
    claim_token     TEXT,
    claimed_until   INTEGER
);

-- The rows still to deliver, those due at once (next_attempt_at NULL) in id
-- order, then the ones scheduled or retried by due time: the claim reads
-- due rows only, never a row whose time is ahead.
CREATE INDEX {{index "pending"}} ON {{table}} (next_attempt_at, id)
    WHERE published_at IS NULL AND dead_at IS NULL;

CREATE INDEX {{index "key"}} ON {{table}} (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND published_at IS NULL;

CREATE INDEX {{index "published"}} ON {{table}} (published_at)
    WHERE published_at IS NOT NULL;

-- The message contract in the table (see docs/reference/sql-contract.md): a plain-SQL
-- writer that breaks a rule gets an error at INSERT, "txbox: <column> …".
-- Two triggers hold the rules: BEFORE INSERT checks every rule; BEFORE UPDATE checks only the
-- columns an UPDATE changes (and fires only when one is set), so the relay's own UPDATEs (claim lease,
-- marks, rejects, which never touch the message's columns) pass on any
-- row, and an old row that breaks a rule can still be parked dead, redriven
-- or deleted. A row that breaks a rule anyway (written before the
-- triggers, or by hand with them dropped) is parked dead by the relay when
-- it claims it, with "invalid row: <reason>" in last_error.
--
-- As on the other databases, the message's rules (message_id, topic,
-- ordering_key, headers) bind rows still to deliver, published_at and
-- dead_at NULL: that is every row a writer adds, and a published or dead
-- row is history.
--
-- Besides the message contract (txbox.Message.Validate), the triggers
-- enforce the column types, which SQLite's dynamic typing does not: the
-- times and attempts are integers, message_id, topic, ordering_key and
-- headers are text, payload is a blob or text. Lengths are in bytes
-- (length of the value cast to a blob). Control characters are U+0001 to
-- U+001F and U+007F, as in Validate; topics also refuse every white space
-- Validate refuses (Go's unicode.IsSpace: space, U+0085, U+00A0, U+1680,
-- U+2000 to U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). An
-- ordering_key is NULL or text of 1 to 256 bytes: '' is refused. The
-- redrive trigger below checks the message's rules with the same template.
{{define "rules"}}{{$u := eq . "update"}}{{$r := eq . "redrive"}}{{$p := "NEW.published_at IS NULL AND NEW.dead_at IS NULL AND "}}{{if $r}}{{$p = ""}}{{end}}
    SELECT RAISE(ABORT, 'txbox: message_id must be text of 1 to 256 bytes')
    WHERE {{$p}}{{if $u}}NEW.message_id IS NOT OLD.message_id AND {{end}}(typeof(NEW.message_id) <> 'text' OR length(CAST(NEW.message_id AS BLOB)) NOT BETWEEN 1 AND 256);
    SELECT RAISE(ABORT, 'txbox: message_id must not contain control characters')
    WHERE {{$p}}{{if $u}}NEW.message_id IS NOT OLD.message_id AND {{end}}NEW.message_id GLOB '*[' || char(1) || '-' || char(31, 127) || ']*';
    SELECT RAISE(ABORT, 'txbox: topic must be text of 1 to 256 bytes')
    WHERE {{$p}}{{if $u}}NEW.topic IS NOT OLD.topic AND {{end}}(typeof(NEW.topic) <> 'text' OR length(CAST(NEW.topic AS BLOB)) NOT BETWEEN 1 AND 256);
    SELECT RAISE(ABORT, 'txbox: topic must not contain white space or control characters')
    WHERE {{$p}}{{if $u}}NEW.topic IS NOT OLD.topic AND {{end}}NEW.topic GLOB '*[' || char(1) || '-' || char(32, 127, 133, 160, 5760, 8192) || '-' || char(8202, 8232, 8233, 8239, 8287, 12288) || ']*';
    SELECT RAISE(ABORT, 'txbox: ordering_key must be NULL or text of 1 to 256 bytes')
    WHERE {{$p}}{{if $u}}NEW.ordering_key IS NOT OLD.ordering_key AND {{end}}NEW.ordering_key IS NOT NULL AND (typeof(NEW.ordering_key) <> 'text' OR length(CAST(NEW.ordering_key AS BLOB)) NOT BETWEEN 1 AND 256);
    SELECT RAISE(ABORT, 'txbox: ordering_key must not contain control characters')
    WHERE {{$p}}{{if $u}}NEW.ordering_key IS NOT OLD.ordering_key AND {{end}}NEW.ordering_key GLOB '*[' || char(1) || '-' || char(31, 127) || ']*';{{if not $r}}
    SELECT RAISE(ABORT, 'txbox: payload must be a blob or text')
    WHERE {{if $u}}NEW.payload IS NOT OLD.payload AND {{end}}typeof(NEW.payload) NOT IN ('blob', 'text');{{end}}
    SELECT RAISE(ABORT, 'txbox: headers must be a JSON object in text')
    WHERE {{$p}}{{if $u}}NEW.headers IS NOT OLD.headers AND {{end}}NOT CASE WHEN typeof(NEW.headers) = 'text' AND json_valid(NEW.headers) THEN json_type(NEW.headers) = 'object' ELSE 0 END;{{if not $r}}
    SELECT RAISE(ABORT, 'txbox: created_at must be an integer (unix microseconds)')
    WHERE {{if $u}}NEW.created_at IS NOT OLD.created_at AND {{end}}typeof(NEW.created_at) <> 'integer';
    SELECT RAISE(ABORT, 'txbox: attempts must be an integer')
    WHERE {{if $u}}NEW.attempts IS NOT OLD.attempts AND {{end}}typeof(NEW.attempts) <> 'integer';
    SELECT RAISE(ABORT, 'txbox: next_attempt_at must be NULL or an integer (unix microseconds)')
    WHERE {{if $u}}NEW.next_attempt_at IS NOT OLD.next_attempt_at AND {{end}}typeof(NEW.next_attempt_at) NOT IN ('null', 'integer');
    SELECT RAISE(ABORT, 'txbox: published_at must be NULL or an integer (unix microseconds)')
    WHERE {{if $u}}NEW.published_at IS NOT OLD.published_at AND {{end}}typeof(NEW.published_at) NOT IN ('null', 'integer');
    SELECT RAISE(ABORT, 'txbox: dead_at must be NULL or an integer (unix microseconds)')
    WHERE {{if $u}}NEW.dead_at IS NOT OLD.dead_at AND {{end}}typeof(NEW.dead_at) NOT IN ('null', 'integer');{{end}}
{{end}}
-- txbox:begin
CREATE TRIGGER {{ident "contract_insert"}} BEFORE INSERT ON {{table}}
FOR EACH ROW
BEGIN{{template "rules" "insert"}}END;
-- txbox:end

-- txbox:begin
CREATE TRIGGER {{ident "contract_update"}}
BEFORE UPDATE OF message_id, topic, ordering_key, payload, headers, created_at, attempts, next_attempt_at, published_at, dead_at ON {{table}}
FOR EACH ROW
BEGIN{{template "rules" "update"}}END;
-- txbox:end

-- Two more rules of the contract that SQLite's dynamic typing leaves to
-- triggers (see docs/reference/sql-contract.md).
--
-- The lease: claim_token is NULL or text, claimed_until NULL or an integer
-- (unix microseconds) at most 2 hours ahead (outboxsql.MaxClaimLease, the
-- longest --claim-lease). A lease of text, or one years ahead, would hold
-- its row, and every later row of its key, out of every claim. The relay's
-- claim also treats such a lease as expired.
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
BEGIN{{template "rules" "redrive"}}END;
-- txbox:end
