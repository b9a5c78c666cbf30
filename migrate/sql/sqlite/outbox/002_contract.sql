-- The message contract in the table (see docs/sql-contract.md): a plain-SQL
-- writer that breaks a rule gets an error at INSERT, "txbox: <column> …".
-- SQLite cannot add a CHECK to an existing table, so two triggers hold the
-- rules: BEFORE INSERT checks every rule; BEFORE UPDATE checks only the
-- columns an UPDATE changes (and fires only when one is set), so the relay's own UPDATEs (claim lease,
-- marks, rejects, which never touch the message's columns) pass on any
-- row, and an old row that breaks a rule can still be parked dead, redriven
-- or deleted. Creating the triggers reads no row: existing rows that break
-- a rule are parked dead by the relay when it claims them, with "invalid
-- row: <reason>" in last_error; but the relay never claims a pending row
-- whose next_attempt_at is not an integer (text sorts after every number,
-- so the row is never due), so this migration parks those itself.
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
-- U+001F and U+007F, as in Validate; topics also refuse the white space
-- Validate refuses (space, U+00A0, U+2028, U+2029).
{{define "rules"}}{{$u := eq . "update"}}{{$p := "NEW.published_at IS NULL AND NEW.dead_at IS NULL AND "}}
    SELECT RAISE(ABORT, 'txbox: message_id must be text of 1 to 256 bytes')
    WHERE {{$p}}{{if $u}}NEW.message_id IS NOT OLD.message_id AND {{end}}(typeof(NEW.message_id) <> 'text' OR length(CAST(NEW.message_id AS BLOB)) NOT BETWEEN 1 AND 256);
    SELECT RAISE(ABORT, 'txbox: message_id must not contain control characters')
    WHERE {{$p}}{{if $u}}NEW.message_id IS NOT OLD.message_id AND {{end}}NEW.message_id GLOB '*[' || char(1) || '-' || char(31, 127) || ']*';
    SELECT RAISE(ABORT, 'txbox: topic must be text of 1 to 256 bytes')
    WHERE {{$p}}{{if $u}}NEW.topic IS NOT OLD.topic AND {{end}}(typeof(NEW.topic) <> 'text' OR length(CAST(NEW.topic AS BLOB)) NOT BETWEEN 1 AND 256);
    SELECT RAISE(ABORT, 'txbox: topic must not contain white space or control characters')
    WHERE {{$p}}{{if $u}}NEW.topic IS NOT OLD.topic AND {{end}}NEW.topic GLOB '*[' || char(1) || '-' || char(32, 127, 160, 8232, 8233) || ']*';
    SELECT RAISE(ABORT, 'txbox: ordering_key must be NULL or text of at most 256 bytes')
    WHERE {{$p}}{{if $u}}NEW.ordering_key IS NOT OLD.ordering_key AND {{end}}NEW.ordering_key IS NOT NULL AND (typeof(NEW.ordering_key) <> 'text' OR length(CAST(NEW.ordering_key AS BLOB)) > 256);
    SELECT RAISE(ABORT, 'txbox: ordering_key must not contain control characters')
    WHERE {{$p}}{{if $u}}NEW.ordering_key IS NOT OLD.ordering_key AND {{end}}NEW.ordering_key GLOB '*[' || char(1) || '-' || char(31, 127) || ']*';
    SELECT RAISE(ABORT, 'txbox: payload must be a blob or text')
    WHERE {{if $u}}NEW.payload IS NOT OLD.payload AND {{end}}typeof(NEW.payload) NOT IN ('blob', 'text');
    SELECT RAISE(ABORT, 'txbox: headers must be a JSON object in text')
    WHERE {{$p}}{{if $u}}NEW.headers IS NOT OLD.headers AND {{end}}NOT CASE WHEN typeof(NEW.headers) = 'text' AND json_valid(NEW.headers) THEN json_type(NEW.headers) = 'object' ELSE 0 END;
    SELECT RAISE(ABORT, 'txbox: created_at must be an integer (unix microseconds)')
    WHERE {{if $u}}NEW.created_at IS NOT OLD.created_at AND {{end}}typeof(NEW.created_at) <> 'integer';
    SELECT RAISE(ABORT, 'txbox: attempts must be an integer')
    WHERE {{if $u}}NEW.attempts IS NOT OLD.attempts AND {{end}}typeof(NEW.attempts) <> 'integer';
    SELECT RAISE(ABORT, 'txbox: next_attempt_at must be NULL or an integer (unix microseconds)')
    WHERE {{if $u}}NEW.next_attempt_at IS NOT OLD.next_attempt_at AND {{end}}typeof(NEW.next_attempt_at) NOT IN ('null', 'integer');
    SELECT RAISE(ABORT, 'txbox: published_at must be NULL or an integer (unix microseconds)')
    WHERE {{if $u}}NEW.published_at IS NOT OLD.published_at AND {{end}}typeof(NEW.published_at) NOT IN ('null', 'integer');
    SELECT RAISE(ABORT, 'txbox: dead_at must be NULL or an integer (unix microseconds)')
    WHERE {{if $u}}NEW.dead_at IS NOT OLD.dead_at AND {{end}}typeof(NEW.dead_at) NOT IN ('null', 'integer');
{{end}}
UPDATE {{table}}
SET dead_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
    last_error = 'invalid row: next_attempt_at holds "' || CAST(next_attempt_at AS TEXT) || '", not an integer'
WHERE published_at IS NULL AND dead_at IS NULL
  AND next_attempt_at IS NOT NULL AND typeof(next_attempt_at) <> 'integer';

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
