-- bench/plain.sql: the outbox a team writes itself in plain SQL, the "plain"
-- system of the benchmark.  Same columns as outbox.message; the id comes
-- from gen_random_uuid(), the default such tables use; fillfactor left at
-- its default.
--
-- One partial index serves the claim, in the claim's order, and holds only
-- the messages not yet delivered.
--
-- The statements the benchmark runs (bench/driver.c, bench/w1_plain.sql):
--
--   append (in the writer's transaction):
--     INSERT INTO plain.message (topic, event_type, payload) VALUES ($1, $2, $3)
--
--   claim (one statement, committed on its own):
--     UPDATE plain.message SET attempts = attempts + 1,
--            leased_until = now() + interval '60 seconds', lease_owner = $1
--      WHERE id IN (SELECT id FROM plain.message
--                    WHERE topic = $2 AND delivered_at IS NULL
--                      AND available_at <= now()
--                      AND (leased_until IS NULL OR leased_until < now())
--                    ORDER BY available_at, id LIMIT $3
--                    FOR UPDATE SKIP LOCKED)
--     RETURNING id, topic, event_type, payload, created_at, attempts
--
--   complete (one UPDATE for the whole batch, committed on its own, once
--   the batch was handled):
--     UPDATE plain.message SET delivered_at = now(), leased_until = NULL
--      WHERE id = ANY ($1::uuid[]) AND lease_owner = $2
--        AND delivered_at IS NULL

CREATE SCHEMA plain;

CREATE TABLE plain.message (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
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
);

CREATE INDEX message_pending_idx ON plain.message (topic, available_at, id)
    WHERE delivered_at IS NULL;

CREATE TABLE plain.orders (
    id           bigserial     PRIMARY KEY,
    customer_id  integer       NOT NULL,
    amount       numeric(12,2) NOT NULL,
    created_at   timestamptz   NOT NULL DEFAULT now()
);
