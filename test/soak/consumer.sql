--
-- test/soak/consumer.sql: the consumer database of the soak test
-- (test/t/060_soak.pl).
--
-- Every delivery, by the background worker's remote route or by a pull
-- worker, runs soak.consume(envelope, topic, via) here: it records the
-- attempt in soak.attempt over a connection of its own (committed at once,
-- so the record stays whatever happens to the delivery), fails on purpose
-- for a share of deliveries, and applies the effect (a row of soak.effect)
-- under outbox.consume_once in the delivery's transaction.  soak.effect has
-- no unique key, so an effect applied twice would show as two rows.
--
-- Run by psql with the variable log_conn: the connection string of this
-- database, for the attempt log.
--
CREATE EXTENSION krizaka_outbox;
CREATE EXTENSION dblink;
CREATE SCHEMA soak;

-- settings the test changes while it runs (one row)
CREATE TABLE soak.control (
    fail_percent integer NOT NULL,   -- deliveries that fail on purpose
    log_conn text NOT NULL           -- where the attempt log is written
);
INSERT INTO soak.control VALUES (20, :'log_conn');

-- one row per delivery attempt that reached the consumer: "delivered"
-- when it starts, then "failed" (injected failure) or "duplicate"
-- (consume_once said it was already applied)
CREATE TABLE soak.attempt (
    n bigserial PRIMARY KEY,
    message_id uuid NOT NULL,
    topic text NOT NULL,
    via text NOT NULL,
    what text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- the effect of each message, applied once
CREATE TABLE soak.effect (
    message_id uuid NOT NULL,
    topic text NOT NULL,
    via text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Record an attempt through the session's own log connection, committed
-- at once: it survives the rollback of the delivery.
CREATE FUNCTION soak.log_attempt(id uuid, topic text, via text, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT coalesce('soak_log' = ANY (public.dblink_get_connections()), false) THEN
        PERFORM public.dblink_connect('soak_log', (SELECT log_conn FROM soak.control));
    END IF;
    PERFORM public.dblink_exec('soak_log',
        format('INSERT INTO soak.attempt (message_id, topic, via, what) VALUES (%L, %L, %L, %L)',
               id, topic, via, what));
END
$$;

-- Deliver one envelope: log it, maybe fail, apply the effect once.
CREATE FUNCTION soak.consume(env jsonb, topic text, via text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    id uuid := (env ->> 'id')::uuid;
BEGIN
    PERFORM soak.log_attempt(id, topic, via, 'delivered');
    IF random() * 100 < (SELECT fail_percent FROM soak.control) THEN
        PERFORM soak.log_attempt(id, topic, via, 'failed');
        RAISE EXCEPTION 'injected failure of % via %', id, via;
    END IF;
    IF outbox.consume_once('soak', id) THEN
        INSERT INTO soak.effect (message_id, topic, via) VALUES (id, topic, via);
        RETURN 'applied';
    END IF;
    PERFORM soak.log_attempt(id, topic, via, 'duplicate');
    RETURN 'duplicate';
END
$$;
