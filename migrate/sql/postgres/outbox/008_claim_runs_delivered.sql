-- The run claim of 007_claim_runs, with one fix: a row that another relay
-- delivered while the walk went on no longer blocks its key.
--
-- The walk reads the pending rows as they were when it began; each head
-- probe reads them as they are now. When another relay delivered a row
-- after the walk began, the probe found the key's head further on, and the
-- walk took the key as blocked for the rest of the claim: it then stepped
-- over every later row of that key. With several relays draining one keyed
-- backlog, claims found every key blocked this way and walked the whole
-- backlog for nothing (200,000 rows read, none claimed, 0.7 s; seen with
-- auto_explain in `txbox bench scale --shapes 1000-keys --relays 4`). Now a
-- row found delivered is passed over and its key stays open.
--
-- And a key's probe starts at its floor row itself (p_floors: a row the
-- caller knows delivered), not above it: a database crash can undo the
-- mark, and the row is then the key's head again. A pending row met below
-- the floor makes that floor stale for the rest of the claim (the crash
-- undid earlier marks too): the key is probed from its start, so it
-- neither skips that row nor stays blocked while the caller keeps the
-- floor.
CREATE OR REPLACE FUNCTION {{name "claim_runs"}}(p_limit int, p_from bigint, p_lanes smallint[], p_epochs bigint[], p_owner text,
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
    head  bigint;
    bound bigint;
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
            -- Not due: the key waits.
            IF r.due > ready THEN
                seen := seen || jsonb_build_object(r.k, 0);
                CONTINUE;
            END IF;
            -- Probe from the floor row itself; a pending row below it: the
            -- floor is stale (a mark undone by a database crash, see Floors
            -- in internal/outboxsql/store.go); probe the key from its start.
            bound := coalesce(last, (floor ->> r.k)::bigint - 1, -1);
            IF bound >= r.id THEN
                floor := floor - r.k;
                bound := -1;
            END IF;
            -- The key's next undelivered row above bound: the key's next
            -- entry in its index, as claim reads it (see there).
            head := (SELECT p.id FROM {{table}} p
                     WHERE p.ordering_key = r.k AND p.published_at IS NULL AND p.id > bound
                     ORDER BY p.ordering_key, p.id LIMIT 1);
            -- Delivered since the walk began (by another relay): the key's
            -- head, if any, lies further on, and the key stays open.
            CONTINUE WHEN head IS NULL OR head > r.id;
            -- Blocked: an undelivered row of the key lies before it (in
            -- flight at another relay, dead, or below p_from).
            IF head < r.id THEN
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
