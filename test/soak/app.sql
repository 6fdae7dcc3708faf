--
-- test/soak/app.sql: the outbox database of the soak test
-- (test/t/060_soak.pl).
--
-- Producers (soak.produce) append in transactions of which a share roll
-- back.  Every id a transaction appends goes into soak.produced in the same
-- transaction, so after the run the committed appends are exactly the rows
-- of soak.produced; the ids of a transaction that rolled back are written
-- to soak.rolled_back afterwards.
--
-- Pull workers (soak.pull) claim the topic "pull", sometimes extend the
-- lease, deliver each message by calling soak.consume in the consumer
-- database over a connection of their own, and complete (one by one or
-- with complete_many), fail (when the delivery failed) or walk away without
-- a word (as if they had died after delivering).  Anything an owner is
-- refused on a lease it holds is recorded as an anomaly.
--
-- The topic "remote" is delivered by the background worker through a
-- remote route to the same soak.consume.
--
-- Run by psql with the variables consumer_conn (a connection string of the
-- consumer database) and consumer_host, consumer_port, consumer_user (for
-- the foreign server the background worker delivers through).
--
CREATE EXTENSION krizaka_outbox;
CREATE EXTENSION dblink;
CREATE SCHEMA soak;

-- settings the test changes while it runs (one row)
CREATE TABLE soak.control (
    stop_producers boolean NOT NULL DEFAULT false,
    stop_pullers boolean NOT NULL DEFAULT false,
    rollback_percent integer NOT NULL DEFAULT 25,
    abandon_percent integer NOT NULL DEFAULT 5,
    consumer_conn text NOT NULL
);
INSERT INTO soak.control (consumer_conn) VALUES (:'consumer_conn');

CREATE TABLE soak.produced (
    seq bigserial PRIMARY KEY,
    id uuid NOT NULL UNIQUE,
    topic text NOT NULL,
    producer text NOT NULL
);
CREATE TABLE soak.rolled_back (id uuid NOT NULL, producer text NOT NULL);
CREATE TABLE soak.reappended (id uuid NOT NULL, producer text NOT NULL);
-- every revival: the message was dead from dead_at until revived_at
CREATE TABLE soak.revived (
    id uuid NOT NULL,
    dead_at timestamptz NOT NULL,
    revived_at timestamptz NOT NULL,
    how text NOT NULL
);
-- what pull workers did besides complete and fail
CREATE TABLE soak.worker_event (
    owner text NOT NULL,
    id uuid,
    what text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- the background worker delivers "remote" to the consumer database
CREATE SERVER consumer FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host :'consumer_host', port :'consumer_port', dbname 'consumer');
CREATE USER MAPPING FOR CURRENT_USER SERVER consumer OPTIONS (user :'consumer_user');
SELECT outbox.route_remote('remote', 'consumer', $$SELECT soak.consume($1, $2, 'worker')$$);

-- A producer: one transaction after another until told to stop.
CREATE PROCEDURE soak.produce(p_name text)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint := 0;
    ids uuid[];
    v_id uuid;
    v_topic text;
    r float8;
    pick record;
BEGIN
    LOOP
        EXIT WHEN (SELECT stop_producers FROM soak.control);
        n := n + 1;
        v_topic := CASE WHEN random() < 0.5 THEN 'remote' ELSE 'pull' END;
        r := random();
        IF r < 0.55 THEN
            -- one message, with an id chosen here
            v_id := gen_random_uuid();
            PERFORM outbox.append(v_topic, 'evt.soak.one.v1',
                                  jsonb_build_object('producer', p_name, 'n', n), v_id);
            ids := ARRAY[v_id];
        ELSIF r < 0.70 THEN
            -- one message, with a generated id
            ids := ARRAY[outbox.append(v_topic, 'evt.soak.generated.v1',
                                       jsonb_build_object('producer', p_name, 'n', n))];
        ELSIF r < 0.85 THEN
            -- a batch of one to five
            ids := ARRAY(SELECT outbox.append_batch(v_topic, 'evt.soak.batch.v1',
                             ARRAY(SELECT jsonb_build_object('producer', p_name, 'n', n, 'k', k)
                                     FROM generate_series(1, 1 + (random() * 4)::int) k)));
        ELSIF r < 0.95 THEN
            -- delayed by up to three seconds
            v_id := gen_random_uuid();
            PERFORM outbox.append(v_topic, 'evt.soak.delayed.v1',
                                  jsonb_build_object('producer', p_name, 'n', n), v_id,
                                  clock_timestamp() + random() * interval '3 s');
            ids := ARRAY[v_id];
        ELSE
            -- a committed message appended again with the same content: a no-op
            SELECT m.id, m.topic, m.event_type, m.payload INTO pick
              FROM soak.produced p JOIN outbox.message m USING (id)
             WHERE p.seq >= (SELECT (max(seq) * random())::bigint FROM soak.produced)
             ORDER BY p.seq LIMIT 1;
            IF FOUND THEN
                PERFORM outbox.append(pick.topic, pick.event_type, pick.payload, pick.id);
                INSERT INTO soak.reappended VALUES (pick.id, p_name);
            END IF;
            ids := '{}';
        END IF;
        INSERT INTO soak.produced (id, topic, producer) SELECT u, v_topic, p_name FROM unnest(ids) u;
        IF random() * 100 < (SELECT rollback_percent FROM soak.control) THEN
            ROLLBACK;
            INSERT INTO soak.rolled_back SELECT u, p_name FROM unnest(ids) u;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.02 + random() * 0.04);
        COMMIT;
    END LOOP;
END
$$;

-- A pull worker: claim, deliver, record the outcome, until told to stop.
CREATE PROCEDURE soak.pull(p_owner text)
LANGUAGE plpgsql AS $$
DECLARE
    ctl soak.control;
    batch outbox.message[];
    m outbox.message;
    delivered boolean;
    err text;
    many boolean;
    done uuid[];
    k integer;
BEGIN
    PERFORM dblink_connect('to_consumer', (SELECT consumer_conn FROM soak.control));
    LOOP
        SELECT * INTO ctl FROM soak.control;
        EXIT WHEN ctl.stop_pullers;
        SELECT array_agg(c ORDER BY c.available_at, c.id) INTO batch
          FROM outbox.claim(p_owner, 'pull', 5, 15) c;
        COMMIT;
        IF batch IS NULL THEN
            PERFORM pg_sleep(0.1);
            COMMIT;
            CONTINUE;
        END IF;

        many := random() < 0.3;
        done := '{}';
        FOREACH m IN ARRAY batch LOOP
            -- a careful worker never starts a delivery on a lease about to end
            IF clock_timestamp() > m.leased_until - interval '5 s' THEN
                INSERT INTO soak.worker_event (owner, id, what) VALUES (p_owner, m.id, 'late');
                COMMIT;
                CONTINUE;
            END IF;
            IF random() < 0.1 THEN
                IF outbox.extend(m.id, p_owner, 20) THEN
                    INSERT INTO soak.worker_event (owner, id, what) VALUES (p_owner, m.id, 'extended');
                ELSE
                    INSERT INTO soak.worker_event (owner, id, what) VALUES (p_owner, m.id, 'ANOMALY: extend refused');
                END IF;
                COMMIT;
            END IF;

            BEGIN
                PERFORM t.r FROM dblink('to_consumer',
                    format('SELECT soak.consume(%L::jsonb, %L, %L)', outbox.envelope(m), m.topic, p_owner))
                    AS t(r text);
                delivered := true;
            EXCEPTION WHEN OTHERS THEN
                delivered := false;
                err := SQLERRM;
            END;

            IF NOT delivered THEN
                IF NOT outbox.fail(m.id, p_owner, err) THEN
                    INSERT INTO soak.worker_event (owner, id, what) VALUES (p_owner, m.id, 'ANOMALY: fail refused');
                END IF;
            ELSIF random() * 100 < ctl.abandon_percent THEN
                INSERT INTO soak.worker_event (owner, id, what) VALUES (p_owner, m.id, 'abandoned');
            ELSIF many THEN
                done := done || m.id;
            ELSIF NOT outbox.complete(m.id, p_owner) THEN
                INSERT INTO soak.worker_event (owner, id, what) VALUES (p_owner, m.id, 'ANOMALY: complete refused');
            END IF;
            COMMIT;
        END LOOP;

        IF cardinality(done) > 0 THEN
            k := outbox.complete_many(done, p_owner);
            IF k <> cardinality(done) THEN
                INSERT INTO soak.worker_event (owner, what)
                VALUES (p_owner, format('ANOMALY: complete_many did %s of %s', k, cardinality(done)));
            END IF;
            COMMIT;
        END IF;
    END LOOP;
END
$$;

-- An operator: give every dead message another life, and write down when
-- it was dead.  Either one by one (retry_dead), or a topic at a time
-- (retry_dead_topic) with the table locked against claims meanwhile, so
-- that no message dies unrecorded between the list and the revival.
CREATE PROCEDURE soak.revive(by_topic boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t text;
    listed bigint;
    revived bigint;
BEGIN
    IF NOT by_topic THEN
        FOR r IN SELECT id, dead_at FROM outbox.message WHERE dead_at IS NOT NULL ORDER BY id FOR UPDATE LOOP
            IF NOT outbox.retry_dead(r.id) THEN
                RAISE EXCEPTION 'retry_dead refused dead message %', r.id;
            END IF;
            INSERT INTO soak.revived VALUES (r.id, r.dead_at, clock_timestamp(), 'retry_dead');
        END LOOP;
    ELSE
        LOCK TABLE outbox.message IN EXCLUSIVE MODE;
        FOR t IN SELECT DISTINCT topic FROM outbox.message WHERE dead_at IS NOT NULL ORDER BY 1 LOOP
            INSERT INTO soak.revived
            SELECT id, dead_at, clock_timestamp(), 'retry_dead_topic'
              FROM outbox.message WHERE topic = t AND dead_at IS NOT NULL;
            GET DIAGNOSTICS listed = ROW_COUNT;
            revived := outbox.retry_dead_topic(t);
            IF revived <> listed THEN
                RAISE EXCEPTION 'retry_dead_topic(%) revived % of % dead messages', t, revived, listed;
            END IF;
        END LOOP;
    END IF;
END
$$;
