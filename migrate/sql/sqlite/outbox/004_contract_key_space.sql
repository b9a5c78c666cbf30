-- Two rules of the message contract (see docs/sql-contract.md) that
-- 002_contract left to the relay, now refused at INSERT:
--
-- An ordering_key of '': it must be NULL, or text of 1 to 256 bytes. The
-- relay published such a row without a key; pending ones become NULL here,
-- which is how they go out.
--
-- Every white space in a topic that Go's unicode.IsSpace reports: besides
-- space and the control characters, U+0085, U+00A0, U+1680, U+2000 to
-- U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
--
-- The three contract triggers of 002_contract and 003_lease are made again
-- with the new rules, under the same names and otherwise as they were:
-- BEFORE INSERT checks every rule, BEFORE UPDATE only the columns an UPDATE
-- changes, and a redrive (dead_at set to NULL) the message's rules. As
-- before, creating them reads no row: a pending row whose topic breaks the
-- new rule is parked dead by the relay when it claims it.
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
UPDATE {{table}} SET ordering_key = NULL
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key = '';

DROP TRIGGER IF EXISTS {{ident "contract_insert"}};
DROP TRIGGER IF EXISTS {{ident "contract_update"}};
DROP TRIGGER IF EXISTS {{ident "contract_redrive"}};

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

-- txbox:begin
CREATE TRIGGER {{ident "contract_redrive"}}
BEFORE UPDATE OF dead_at ON {{table}}
FOR EACH ROW WHEN OLD.dead_at IS NOT NULL AND NEW.dead_at IS NULL AND NEW.published_at IS NULL
BEGIN{{template "rules" "redrive"}}END;
-- txbox:end
