--
-- setup: helpers for the other tests, kept in schema regress so that they
-- stay out of the way of the search_path tests
--

-- names are checked character by character: the tests need UTF8
SELECT getdatabaseencoding();

CREATE SCHEMA regress;

-- Run one statement and report how it failed: "SQLSTATE: message", followed
-- by the detail and hint when there are any, or "no error".
CREATE FUNCTION regress.err(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    state text;
    msg text;
    detail text;
    hint text;
BEGIN
    BEGIN
        EXECUTE stmt;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
        RETURN state || ': ' || msg
            || CASE WHEN detail <> '' THEN ' DETAIL: ' || detail ELSE '' END
            || CASE WHEN hint <> '' THEN ' HINT: ' || hint ELSE '' END;
    END;
    RETURN 'no error';
END
$$;

-- A fingerprint of everything stored, to show that a rejected call changed
-- nothing.
CREATE FUNCTION regress.state() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(coalesce((SELECT string_agg(m::text, '|' ORDER BY m.id) FROM outbox.message m), '')
               || '#' ||
               coalesce((SELECT string_agg(p::text, '|' ORDER BY p.consumer, p.message_id)
                           FROM outbox.processed p), ''))
$$;

-- A fixed message id, so that results can be printed: regress.id(1) is
-- 00000000-0000-7000-8000-000000000001.
CREATE FUNCTION regress.id(n integer) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    SELECT ('00000000-0000-7000-8000-' || lpad(n::text, 12, '0'))::uuid
$$;

-- Start a test from empty tables.
CREATE FUNCTION regress.reset() RETURNS void
LANGUAGE sql AS $$
    TRUNCATE outbox.message, outbox.processed
$$;

-- the helpers themselves
SELECT regress.err('SELECT 1/0');
SELECT regress.err('SELECT 1');
SELECT regress.id(42);
SELECT regress.reset();
SELECT regress.state() = md5('#') AS empty;

-- What the named subscriptions hold of their messages, one row per
-- message: their state rows, and their leases by range (a fresh message
-- without an ordering key that a claim leased: attempt 1).  A function, not
-- a view, so that DROP EXTENSION does not depend on it.
CREATE FUNCTION regress.held()
RETURNS TABLE (sub_id integer, seq bigint, id uuid, ordering_key text,
               available_at timestamptz, blocked boolean, hole boolean,
               attempts integer, leased_until timestamptz, lease_owner text,
               dead_at timestamptz, last_error text, by_range boolean)
LANGUAGE sql AS $$
    SELECT x.sub_id, x.seq, x.id, x.ordering_key, x.available_at, x.blocked, x.hole,
           x.attempts, x.leased_until, x.lease_owner, x.dead_at, x.last_error, false
      FROM outbox.subscription_state x
    UNION ALL
    SELECT l.sub_id, q.seq, m.id, m.ordering_key, l.leased_until, false, false,
           1, l.leased_until, l.lease_owner, NULL, NULL, true
      FROM outbox.subscription_lease l
      JOIN outbox.subscription s ON s.sub_id = l.sub_id
     CROSS JOIN LATERAL unnest(l.seqs) AS q(seq)
      JOIN outbox.message m ON m.topic = s.topic AND m.seq = q.seq
$$;
