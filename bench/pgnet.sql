-- bench/pgnet.sql: webhooks the way a team sends them with pg_net, the
-- reference of W9 that runs in the database like HTTP routes do.  Loaded
-- only when pg_net is installed in the server (pg_available_extensions)
-- and preloaded; pg_net's worker works in database bench
-- (pg_net.database_name).
--
-- bench_pgnet.post(url, payload) is what a trigger on the business table
-- (or the loop that produces) calls, in the producing transaction: it
-- builds the same envelope as outbox.envelope ({id, type, occurredAt,
-- payload}), signs it the Standard Webhooks way with the secret of
-- bench_pgnet.secret (pgcrypto's hmac), and queues one net.http_post;
-- pg_net's worker sends the queued requests after the commit.  The
-- webhook-timestamp is the time of the producing transaction: pg_net sends
-- the headers it was given.

\set ON_ERROR_STOP on
SET client_min_messages = warning;

CREATE EXTENSION IF NOT EXISTS pg_net;
CREATE EXTENSION IF NOT EXISTS pgcrypto;
CREATE SCHEMA bench_pgnet;

-- the key of the endpoint's secret: the part after whsec_, base64-decoded
CREATE TABLE bench_pgnet.secret (key bytea NOT NULL);

CREATE FUNCTION bench_pgnet.post(url text, payload jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    id text := gen_random_uuid()::text;
    ts text := extract(epoch FROM now())::bigint::text;
    body jsonb := jsonb_build_object(
        'id', id, 'type', 'evt.order.created.v1',
        'occurredAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'payload', payload);
    headers jsonb := jsonb_build_object('Content-Type', 'application/json',
        'webhook-id', id, 'webhook-timestamp', ts);
    k bytea;
BEGIN
    SELECT s.key INTO k FROM bench_pgnet.secret s;
    IF k IS NOT NULL THEN
        headers := headers || jsonb_build_object('webhook-signature',
            'v1,' || encode(hmac(convert_to(id || '.' || ts || '.' || body::text, 'UTF8'), k, 'sha256'), 'base64'));
    END IF;
    RETURN net.http_post(url, body, headers => headers);
END
$$;
