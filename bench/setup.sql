-- bench/setup.sql: the four systems of the benchmark, side by side in one
-- database.  Each has a business table of its own (orders) next to its
-- queue, so that the systems share nothing but the cluster.
--
--   floor    floor.message: the same columns and fillfactor as
--            outbox.message with its primary key only, keys from a sequence
--            in time order (like UUIDv7): the statements without queue logic
--   plain    bench/plain.sql
--   pgq      PgQ (Debian's postgresql-15-pgq3, or built from Debian's
--            source for another major), business table in schema pgqapp
--   krizaka  the extension, business table in schema krizaka
--
-- public.bench_unrelated is the table W8's long transaction reads: a
-- snapshot taken of a table that has nothing to do with any queue.
--
-- psql -v with_pgq=off leaves PgQ out (a server PgQ could not be installed
-- into); it is in by default.

\set ON_ERROR_STOP on
SET client_min_messages = warning;
\if :{?with_pgq}
\else
\set with_pgq on
\endif

CREATE EXTENSION krizaka_outbox;
\if :with_pgq
CREATE EXTENSION pgq;
\endif

CREATE TABLE public.bench_unrelated (id integer PRIMARY KEY, note text NOT NULL);
INSERT INTO public.bench_unrelated SELECT g, 'report row ' || g FROM generate_series(1, 1000) g;

-- the ~200-byte message body every system carries
CREATE FUNCTION public.bench_payload(order_id bigint, customer_id integer,
                                     amount numeric, quantity integer)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('orderId', order_id, 'customerId', customer_id,
        'amount', amount, 'currency', 'EUR', 'quantity', quantity,
        'channel', 'web',
        'note', 'order created through the storefront; payment pending; ships from the main warehouse')
$$;

-- the uuid of floor key n: time-ordered, from a counter
CREATE FUNCTION public.bench_floor_key(n bigint)
RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(n), 12, '0'))::uuid
$$;

CREATE SCHEMA floor;
CREATE SEQUENCE floor.message_seq MINVALUE 0 START 0;
CREATE TABLE floor.message (
    id            uuid        PRIMARY KEY,
    topic         text        NOT NULL,
    event_type    text        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    leased_until  timestamptz,
    lease_owner   text,
    delivered_at  timestamptz,
    dead_at       timestamptz,
    last_error    text
) WITH (fillfactor = 30);
CREATE TABLE floor.orders (
    id           bigserial     PRIMARY KEY,
    customer_id  integer       NOT NULL,
    amount       numeric(12,2) NOT NULL,
    created_at   timestamptz   NOT NULL DEFAULT now()
);

\ir plain.sql

\if :with_pgq
CREATE SCHEMA pgqapp;
CREATE TABLE pgqapp.orders (
    id           bigserial     PRIMARY KEY,
    customer_id  integer       NOT NULL,
    amount       numeric(12,2) NOT NULL,
    created_at   timestamptz   NOT NULL DEFAULT now()
);
SELECT pgq.create_queue('orders');

-- Fill a PgQ queue with n events in batches of per_batch: each batch is
-- committed and closed by a tick of its own, as a ticker running beside the
-- producers would cut them.
CREATE PROCEDURE pgqapp.preload(queue text, n integer, per_batch integer)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgq.set_queue_config(queue, 'ticker_max_count', per_batch::text);
    FOR b IN 0 .. n / per_batch - 1 LOOP
        PERFORM pgq.insert_event(queue, 'evt.order.created.v1',
                                 public.bench_payload(b * per_batch + g, g, 12.50, 3)::text)
           FROM generate_series(1, per_batch) g;
        COMMIT;
        PERFORM pgq.ticker(queue);
        COMMIT;
    END LOOP;
END
$$;
\endif

CREATE SCHEMA krizaka;
CREATE TABLE krizaka.orders (
    id           bigserial     PRIMARY KEY,
    customer_id  integer       NOT NULL,
    amount       numeric(12,2) NOT NULL,
    created_at   timestamptz   NOT NULL DEFAULT now()
);

-- Append n messages to topic, 10000 per append_batch call.
CREATE PROCEDURE krizaka.preload(topic text, n integer)
LANGUAGE plpgsql AS $$
BEGIN
    FOR c IN 0 .. (n - 1) / 10000 LOOP
        PERFORM outbox.append_batch(topic, 'evt.order.created.v1',
            (SELECT array_agg(public.bench_payload(c * 10000 + g, g, 12.50, 3) ORDER BY g)
               FROM generate_series(1, least(10000, n - c * 10000)) g));
        COMMIT;
    END LOOP;
END
$$;

-- n retried messages, all due: appended, then claimed and failed once
-- each (the backlog a target's outage leaves behind), by the topic's
-- default subscription or by the named subscription sub (made before).
-- The failures back off by outbox.backoff_seconds (30 s, longer than the
-- failing takes, so none is claimed twice); their backoff is then moved an
-- hour back instead of waited for.
CREATE PROCEDURE krizaka.preload_retried(topic text, n integer, sub text DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    failed integer;
BEGIN
    CALL krizaka.preload(topic, n);
    LOOP
        PERFORM outbox.fail(c.id, 'preload', 'target unavailable', sub)
          FROM outbox.claim('preload', topic, 500, 600, sub) c;
        GET DIAGNOSTICS failed = ROW_COUNT;
        COMMIT;
        EXIT WHEN failed = 0;
    END LOOP;
    IF sub IS NULL THEN
        UPDATE outbox.message m SET available_at = m.available_at - interval '1 hour'
         WHERE m.topic = preload_retried.topic;
    ELSE
        UPDATE outbox.subscription_state x SET available_at = x.available_at - interval '1 hour'
          FROM outbox.subscription s
         WHERE x.sub_id = s.sub_id AND s.topic = preload_retried.topic AND s.name = sub;
    END IF;
    COMMIT;
END
$$;

-- n messages appended one by one through append: with keys > 0 on the
-- ordering keys k0 .. k<keys - 1> in turn; scheduled, each with an
-- available_at an hour ahead (deferred: read through the deferred messages
-- of the topic, not its stream), then all moved two hours back instead of
-- waited for (a backlog of scheduled messages that fell due).
CREATE PROCEDURE krizaka.preload_each(topic text, n integer, keys integer, scheduled boolean)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 0 .. n - 1 LOOP
        PERFORM outbox.append(topic, 'evt.order.created.v1', public.bench_payload(i, i, 12.50, 3),
                              available_at => CASE WHEN scheduled
                                              THEN now() + interval '1 hour' + i * interval '1 ms' END,
                              ordering_key => CASE WHEN keys > 0 THEN 'k' || (i % keys) END);
        IF i % 10000 = 9999 THEN
            COMMIT;
        END IF;
    END LOOP;
    COMMIT;
    IF scheduled THEN
        UPDATE outbox.message m SET available_at = m.available_at - interval '2 hours'
         WHERE m.topic = preload_each.topic;
        COMMIT;
    END IF;
END
$$;

-- n messages appended one by one, each with an available_at an hour ago:
-- due at its append, so fresh (read from the stream as one appended
-- without an available_at).
CREATE PROCEDURE krizaka.preload_past(topic text, n integer)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 0 .. n - 1 LOOP
        PERFORM outbox.append(topic, 'evt.order.created.v1', public.bench_payload(i, i, 12.50, 3),
                              available_at => now() - interval '1 hour' + i * interval '1 ms');
        IF i % 10000 = 9999 THEN
            COMMIT;
        END IF;
    END LOOP;
END
$$;
