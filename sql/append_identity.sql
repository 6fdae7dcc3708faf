--
-- append_identity: outbox.append is SECURITY INVOKER and switches to its
-- owner in its C code, as SECURITY DEFINER would.  A role granted EXECUTE
-- alone appends; what runs inside (the table's defaults, an operator's
-- trigger, the statements) runs as the owner under search_path
-- pg_catalog, pg_temp, whatever the caller's; the caller gets its identity
-- and its search_path back, after an error too.
--
SELECT regress.reset();
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_outbox_caller;
DROP ROLE IF EXISTS regress_outbox_nobody;
RESET client_min_messages;
CREATE ROLE regress_outbox_caller NOLOGIN;
CREATE ROLE regress_outbox_nobody NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_caller;
GRANT EXECUTE ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text)
    TO regress_outbox_caller;
CREATE SCHEMA regress_caller AUTHORIZATION regress_outbox_caller;
GRANT USAGE ON SCHEMA regress TO regress_outbox_caller;   -- err() and id()

-- the contract pgTAP asserts, restated where the reason is
SELECT prosecdef, proconfig FROM pg_proc
 WHERE oid = 'outbox.append(text,text,jsonb,uuid,timestamptz,text)'::regprocedure;

-- who is running, and under which search_path ('owner': the owner of append)
CREATE FUNCTION regress.who() RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN CASE WHEN current_user = (SELECT p.proowner::regrole::name FROM pg_catalog.pg_proc p
                                      WHERE p.oid = 'outbox.append(text,text,jsonb,uuid,timestamptz,text)'::pg_catalog.regprocedure)
                THEN 'owner' ELSE current_user::text END
           || ' / ' || pg_catalog.current_setting('search_path');
END
$$;
-- the same as a SQL function, which planning inlines into a default
CREATE FUNCTION regress.who_sql() RETURNS text
LANGUAGE sql AS $$
    SELECT pg_catalog.current_setting('search_path')
$$;

-- the caller runs with a search_path of its own in front
SET ROLE regress_outbox_caller;
SET search_path = regress_caller, public;
CREATE TABLE regress_caller.message (id uuid);
CREATE FUNCTION regress_caller.now() RETURNS timestamptz
LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;

-- no right on the table, none needed: a new id (written straight into the
-- table) and a given one (the INSERT)
SELECT regress.err('SELECT count(*) FROM outbox.message');
SELECT outbox.append('ident', 'evt.ident.v1', '1') IS NOT NULL AS appended_new;
SELECT outbox.append('ident', 'evt.ident.v1', '2', regress.id(2)) AS appended_given;
SELECT current_user, current_setting('search_path') AS search_path;
RESET ROLE;
RESET search_path;
SELECT topic, payload, created_at > '2001-01-01' AS created_now FROM outbox.message ORDER BY seq;

-- an operator's columns with defaults: a built-in one (no pin needed), a
-- PL/pgSQL and an inlined SQL function (pinned)
ALTER TABLE outbox.message ADD COLUMN by_user name DEFAULT current_user,
                           ADD COLUMN by_plpgsql text DEFAULT regress.who(),
                           ADD COLUMN by_sql text DEFAULT regress.who_sql();
SET ROLE regress_outbox_caller;
SET search_path = regress_caller, public;
SELECT outbox.append('ident', 'evt.ident.v1', '3', regress.id(3)) AS given;
SELECT outbox.append('ident', 'evt.ident.v1', '4') IS NOT NULL AS new;
SELECT current_user, current_setting('search_path') AS search_path;
RESET ROLE;
RESET search_path;
SELECT payload, by_user = (SELECT proowner::regrole::name FROM pg_proc
                             WHERE oid = 'outbox.append(text,text,jsonb,uuid,timestamptz,text)'::regprocedure) AS by_owner,
       by_plpgsql, by_sql
  FROM outbox.message WHERE payload IN ('3', '4') ORDER BY seq;

-- only the built-in default left: written straight into the table, as the owner
ALTER TABLE outbox.message DROP COLUMN by_plpgsql, DROP COLUMN by_sql;
SET ROLE regress_outbox_caller;
SET search_path = regress_caller, public;
SELECT outbox.append('ident', 'evt.ident.v1', '5') IS NOT NULL AS new;
RESET ROLE;
RESET search_path;
SELECT payload, by_user = (SELECT proowner::regrole::name FROM pg_proc
                             WHERE oid = 'outbox.append(text,text,jsonb,uuid,timestamptz,text)'::regprocedure) AS by_owner
  FROM outbox.message WHERE payload = '5';
ALTER TABLE outbox.message DROP COLUMN by_user;

-- an operator's trigger (the table takes the INSERT) sees the owner and
-- the pinned path, for a new id and for a given one
CREATE TABLE regress.trigger_seen (payload jsonb, seen text);
CREATE FUNCTION regress.note_append() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress.trigger_seen VALUES (NEW.payload, regress.who());
    RETURN NEW;
END
$$;
CREATE TRIGGER note_append BEFORE INSERT ON outbox.message
    FOR EACH ROW EXECUTE FUNCTION regress.note_append();
SET ROLE regress_outbox_caller;
SET search_path = regress_caller, public;
SELECT outbox.append('ident', 'evt.ident.v1', '6') IS NOT NULL AS new;
SELECT outbox.append('ident', 'evt.ident.v1', '7', regress.id(7)) AS given;
RESET ROLE;
RESET search_path;
SELECT * FROM regress.trigger_seen ORDER BY payload;

-- an error inside append, caught by the caller: its identity and
-- search_path are its own again, and nothing was written
CREATE OR REPLACE FUNCTION regress.note_append() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refused by trigger as %', regress.who();
END
$$;
SET ROLE regress_outbox_caller;
SET search_path = regress_caller, public;
DO $$
BEGIN
    PERFORM outbox.append('ident', 'evt.ident.v1', '8');
EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'caught "%"; now % / %', SQLERRM, current_user, current_setting('search_path');
END
$$;
SELECT regress.err($$SELECT outbox.append('ident', 'evt.ident.v1', '9', regress.id(9))$$);
SELECT current_user, current_setting('search_path') AS search_path;
RESET ROLE;
RESET search_path;
DROP TRIGGER note_append ON outbox.message;
SELECT count(*) AS refused_rows FROM outbox.message WHERE payload IN ('8', '9');

-- the owner is the function's, looked up again when it changes: an owner
-- without rights on the table cannot append, through either path
ALTER FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text) OWNER TO regress_outbox_nobody;
SET ROLE regress_outbox_caller;
SELECT regress.err($$SELECT outbox.append('ident', 'evt.ident.v1', '10')$$);
SELECT regress.err($$SELECT outbox.append('ident', 'evt.ident.v1', '11', regress.id(11))$$);
RESET ROLE;
ALTER FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text) OWNER TO CURRENT_USER;
SET ROLE regress_outbox_caller;
SELECT outbox.append('ident', 'evt.ident.v1', '12') IS NOT NULL AS new;
RESET ROLE;
SELECT payload FROM outbox.message WHERE topic = 'ident' ORDER BY seq;

DROP FUNCTION regress.who(), regress.who_sql(), regress.note_append();
DROP TABLE regress.trigger_seen;
DROP SCHEMA regress_caller CASCADE;
REVOKE ALL ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text)
    FROM regress_outbox_caller;
REVOKE ALL ON SCHEMA outbox FROM regress_outbox_caller;
REVOKE ALL ON SCHEMA regress FROM regress_outbox_caller;
DROP ROLE regress_outbox_caller, regress_outbox_nobody;
SELECT regress.reset();
