-- The run claim of 008_claim_runs_delivered, with a window of ids and a
-- map of keys that costs the same whatever the number of keys.
--
-- A window: the walk reads the pending rows with ids from the first one at
-- or above p_from up to p_window ids past it, or past p_reach when that is
-- higher, and never more than ten windows past that first row, as the plain
-- claim does (claim in internal/outboxsql/sql/postgres.sql). Before it, a
-- claim that found fewer rows than a batch (keys in flight at other relays)
-- walked the whole backlog in one statement. When the claim comes back short
-- and pending rows lie past its window, a last row of its own, with id 0,
-- carries the first of them in prev.
--
-- The map: the walk kept each key's state in a jsonb object and added to it
-- by concatenation, which copies the object: a claim that met 1,000 keys
-- spent about 45 ms doing so (4 relays, 1,000 keys: 160 ms per claim). The
-- keys met are now kept in a hash table of two arrays (open addressing,
-- doubled when half full), which PL/pgSQL updates in place.
--
-- And a key whose rows another relay delivered while the walk went on is
-- probed again only at the head the probe found, not at each of its rows:
-- each of those probes stepped over the same delivered entries, which the
-- walk's own snapshot keeps from being marked dead.
--
-- The 7-argument function of 008 stays for relays of the previous release.
CREATE OR REPLACE FUNCTION {{name "claim_runs"}}(p_limit int, p_from bigint, p_lanes smallint[], p_epochs bigint[], p_owner text,
                                      p_keys text[], p_floors bigint[], p_reach bigint, p_window bigint)
RETURNS TABLE (id bigint, message_id text, topic text, ordering_key text, payload bytea, headers text,
               attempts integer, created_at timestamptz, prev bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r     record;
    ids   bigint[] := '{}';
    prevs bigint[] := '{}';
    -- The keys met so far: ks[i] a key, vs[i] the id of its last row taken,
    -- or 0 when it is blocked (its next row must wait for a later claim),
    -- or -h when its rows below h were found delivered since the walk
    -- began (h: the key's head then), or NULL when none of these yet; n
    -- keys in size slots.
    size  int := 256;
    ks    text[] := array_fill(NULL::text, ARRAY[256]);
    vs    bigint[] := array_fill(NULL::bigint, ARRAY[256]);
    oks   text[];
    ovs   bigint[];
    n     int := 0;
    i     int;
    floor jsonb;
    first bigint;
    stop  bigint;
    last  bigint;
    head  bigint;
    bound bigint;
    mine  smallint[];
    ready timestamptz := now();
BEGIN
    SELECT min(w.id) INTO first FROM {{table}} w
    WHERE w.published_at IS NULL AND w.dead_at IS NULL AND w.id >= p_from;
    IF first IS NULL THEN
        RETURN;
    END IF;
    stop := least(greatest(first, coalesce(p_reach, 0)) + p_window, first + 10 * p_window);
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
        WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= first AND o.id < stop
          AND (p_owner IS NULL OR o.ordering_key IS NULL OR (hashtext(o.ordering_key) & 15)::smallint = ANY(mine))
        ORDER BY o.id
    LOOP
        IF r.k IS NULL THEN
            CONTINUE WHEN r.due > ready;
            last := NULL;
        ELSE
            IF 2 * n >= size THEN
                oks := ks;
                ovs := vs;
                size := 2 * size;
                ks := array_fill(NULL::text, ARRAY[size]);
                vs := array_fill(NULL::bigint, ARRAY[size]);
                FOR j IN 1 .. size / 2 LOOP
                    CONTINUE WHEN oks[j] IS NULL;
                    i := (hashtext(oks[j]) & (size - 1)) + 1;
                    WHILE ks[i] IS NOT NULL LOOP
                        i := i % size + 1;
                    END LOOP;
                    ks[i] := oks[j];
                    vs[i] := ovs[j];
                END LOOP;
            END IF;
            i := (hashtext(r.k) & (size - 1)) + 1;
            WHILE ks[i] IS NOT NULL AND ks[i] <> r.k LOOP
                i := i % size + 1;
            END LOOP;
            IF ks[i] IS NULL THEN
                ks[i] := r.k;
                n := n + 1;
            END IF;
            last := vs[i];
            CONTINUE WHEN last = 0;
            bound := NULL;
            IF last < 0 THEN
                -- Delivered since the walk began, as the probe below found.
                CONTINUE WHEN r.id < -last;
                bound := -last - 1;
                last := NULL;
            END IF;
            -- Not due: the key waits.
            IF r.due > ready THEN
                vs[i] := 0;
                CONTINUE;
            END IF;
            -- Probe from the floor row itself; a pending row below it: the
            -- floor is stale (a mark undone by a database crash, see Floors
            -- in internal/outboxsql/store.go); probe the key from its start.
            bound := coalesce(last, bound, (floor ->> r.k)::bigint - 1, -1);
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
            -- head, if any, lies further on, and the key stays open; its
            -- rows up to that head are passed over without a probe each
            -- (every one of them was a probe over the same delivered
            -- entries, which the walk's own snapshot keeps from being
            -- marked dead: 4 relays on 20 keys, 380 buffers per probe).
            IF head IS NULL THEN
                vs[i] := 0;
                CONTINUE;
            ELSIF head > r.id THEN
                vs[i] := -head;
                CONTINUE;
            END IF;
            -- Blocked: an undelivered row of the key lies before it (in
            -- flight at another relay, dead, or below the window).
            IF head < r.id THEN
                vs[i] := 0;
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
                vs[i] := 0;
            END IF;
            CONTINUE;
        END IF;
        ids := ids || r.id;
        prevs := prevs || last;
        IF r.k IS NOT NULL THEN
            vs[i] := r.id;
        END IF;
        EXIT WHEN cardinality(ids) >= p_limit;
    END LOOP;
    RETURN QUERY
        SELECT o.id, o.message_id, o.topic, coalesce(o.ordering_key, ''), o.payload,
               nullif(o.headers, '{}')::text, o.attempts, o.created_at, c.prev
        FROM unnest(ids, prevs) c(id, prev)
        JOIN {{table}} o ON o.id = c.id
        ORDER BY o.id;
    IF cardinality(ids) < p_limit THEN
        RETURN QUERY
            SELECT 0::bigint, '', '', '', ''::bytea, NULL::text, 0, now(), x.id
            FROM {{table}} x
            WHERE x.published_at IS NULL AND x.dead_at IS NULL AND x.id >= stop
            ORDER BY x.id LIMIT 1;
    END IF;
END
$$;
