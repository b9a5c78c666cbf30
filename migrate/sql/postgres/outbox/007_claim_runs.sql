-- Key runs: a claim that takes several consecutive messages of one key
-- (docs/ordering.md, "Runs of one key").
--
-- The relay's set-based claim (claim in internal/outboxsql/sql/postgres.sql)
-- takes only the head of each key and walks the pending rows in id order
-- until it has a batch. When the backlog holds fewer keys than a batch, it
-- finds them all and walks on to the end of the backlog for more: every
-- claim reads the whole backlog (50,000 rows of 20 keys: 20 rows for 225 ms
-- of database time per claim). This function walks the same rows in the
-- same order but also takes a key's next rows behind its head, as long as
-- they follow one another (no row of the key in between is dead or waiting
-- for a retry), and stops as soon as it has p_limit rows.
--
-- It locks each row as it takes it (SKIP LOCKED): a row another relay
-- holds is passed over, and with it the rest of its key. Each row it
-- returns says, in prev, the row of the same key it follows in this claim
-- (NULL for a key's head and rows without a key). The relay publishes a row
-- only after the broker acknowledged its prev, and not at all when its prev
-- failed: a key's rows still reach the broker in order, one at a time.
--
-- p_keys and p_floors, when given, name for some keys a row the caller
-- knows delivered: every earlier row of the key is delivered too (a key's
-- rows are delivered in order), so the head probe of such a key looks only
-- above it. The entries of delivered rows stay in the key's index until
-- VACUUM, and while another transaction holds the database's horizon back
-- each is a heap fetch: a probe from the key's first entry would read every
-- row of the key delivered since, on every claim.
--
-- With lanes (p_owner not NULL), keyed rows are taken only from the lanes
-- of p_lanes whose epoch is still p_epochs and whose owner is still
-- p_owner, as claim_lanes does.
CREATE FUNCTION {{name "claim_runs"}}(p_limit int, p_from bigint, p_lanes smallint[], p_epochs bigint[], p_owner text,
                                      p_keys text[], p_floors bigint[])
RETURNS TABLE (id bigint, message_id text, topic text, ordering_key text, payload bytea, headers text,
               attempts integer, created_at timestamptz, prev bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r     record;
    ids   bigint[] := '{}';
    prevs bigint[] := '{}';
    -- The keys met so far: the id of the key's last row taken, or 0 when
    -- the key is blocked (its next row must wait for a later claim).
    seen  jsonb := '{}';
    floor jsonb;
    last  bigint;
    mine  smallint[];
    ready timestamptz := now();
BEGIN
    SELECT coalesce(jsonb_object_agg(f.k, f.seq), '{}') INTO floor
    FROM unnest(p_keys, p_floors) f(k, seq) WHERE f.k IS NOT NULL;
    IF p_owner IS NOT NULL THEN
        SELECT coalesce(array_agg(l.lane), '{}') INTO mine
        FROM {{name "lanes"}} l
        JOIN unnest(p_lanes, p_epochs) w(lane, epoch) ON w.lane = l.lane AND w.epoch = l.epoch
        WHERE l.owner = p_owner;
    END IF;
    FOR r IN
        SELECT o.id, o.ordering_key AS k, o.next_attempt_at AS due
        FROM {{table}} o
        WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= p_from
          AND (p_owner IS NULL OR o.ordering_key IS NULL OR (hashtext(o.ordering_key) & 15)::smallint = ANY(mine))
        ORDER BY o.id
    LOOP
        IF r.k IS NULL THEN
            CONTINUE WHEN r.due > ready;
            last := NULL;
        ELSE
            last := (seen ->> r.k)::bigint;
            CONTINUE WHEN last = 0;
            -- Blocked: not due, or an undelivered row of the key lies
            -- before it and after the key's last row taken (in flight at
            -- another relay, dead, or below p_from), or its floor. Read as
            -- the key's next entry in its index, as claim does (see there).
            IF r.due > ready OR r.id <> (
                SELECT p.id FROM {{table}} p
                WHERE p.ordering_key = r.k AND p.published_at IS NULL AND p.id > coalesce(last, (floor ->> r.k)::bigint, -1)
                ORDER BY p.ordering_key, p.id LIMIT 1) THEN
                seen := seen || jsonb_build_object(r.k, 0);
                CONTINUE;
            END IF;
        END IF;
        -- Lock it now: a row another relay holds is skipped, and with it
        -- the rest of its key (its next rows are not taken, nor locked, so
        -- relays racing for the same rows neither wait nor hold each
        -- other's next ones), and the walk goes on past it.
        PERFORM 1 FROM {{table}} o
        WHERE o.id = r.id AND o.published_at IS NULL AND o.dead_at IS NULL
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF r.k IS NOT NULL THEN
                seen := seen || jsonb_build_object(r.k, 0);
            END IF;
            CONTINUE;
        END IF;
        ids := ids || r.id;
        prevs := prevs || last;
        IF r.k IS NOT NULL THEN
            seen := seen || jsonb_build_object(r.k, r.id);
        END IF;
        EXIT WHEN cardinality(ids) >= p_limit;
    END LOOP;
    RETURN QUERY
        SELECT o.id, o.message_id, o.topic, coalesce(o.ordering_key, ''), o.payload,
               nullif(o.headers, '{}')::text, o.attempts, o.created_at, c.prev
        FROM unnest(ids, prevs) c(id, prev)
        JOIN {{table}} o ON o.id = c.id
        ORDER BY o.id;
END
$$;
