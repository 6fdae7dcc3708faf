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
