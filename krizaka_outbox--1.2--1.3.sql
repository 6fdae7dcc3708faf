/* krizaka_outbox--1.2--1.3.sql: from 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.3'" to load this file. \quit

/*
 * HTTP routes: a third target, its URL and CA file, and the fingerprint of
 * the secret it signs with (see krizaka_outbox--1.3.sql).  The routes in
 * place keep their target; their new columns stay NULL.
 */
ALTER TABLE outbox.routes
    ADD COLUMN url text,
    ADD COLUMN ca_file text,
    ADD COLUMN secret_fingerprint text;

ALTER TABLE outbox.routes DROP CONSTRAINT routes_target_check;
ALTER TABLE outbox.routes ADD CONSTRAINT routes_target_check CHECK (
        (target OPERATOR(pg_catalog.=) 'notify' AND channel IS NOT NULL
            AND server IS NULL AND command IS NULL AND url IS NULL)
        OR (target OPERATOR(pg_catalog.=) 'remote' AND channel IS NULL
            AND server IS NOT NULL AND command IS NOT NULL AND url IS NULL)
        OR (target OPERATOR(pg_catalog.=) 'http' AND channel IS NULL
            AND server IS NULL AND command IS NULL AND url IS NOT NULL));

COMMENT ON TABLE outbox.routes IS
    'Delivery routes: one per topic, to a NOTIFY channel, to a command on a remote PostgreSQL server, or to an HTTP endpoint.';

/*
 * outbox.route_secrets: what an HTTP route signs with and the headers it
 * sends, kept apart from outbox.routes so that roles that may read the
 * routes never read a secret (or a credential in a header).  Only the
 * extension's owner reads this table: it is granted to nobody, not even
 * the database owner.  previous_secret signs beside secret until
 * previous_until, while a secret is rotated.
 */
CREATE TABLE outbox.route_secrets (
    topic            text        NOT NULL,
    secret           text,
    previous_secret  text,
    previous_until   timestamptz,
    headers          jsonb,
    CONSTRAINT route_secrets_pkey PRIMARY KEY (topic)
);

COMMENT ON TABLE outbox.route_secrets IS
    'The signing secrets and headers of HTTP routes; readable by the extension''s owner only.';

SELECT pg_catalog.pg_extension_config_dump('outbox.route_secrets', '');

/*
 * outbox.route_http_stats: the calls of each HTTP route by the class of
 * their answer (calls_failed: no answer at all), and their time, counted
 * once per batch.  Counters, for rates over time; not kept by pg_dump.
 */
CREATE TABLE outbox.route_http_stats (
    topic                  text             NOT NULL,
    calls_2xx              bigint           NOT NULL DEFAULT 0,
    calls_3xx              bigint           NOT NULL DEFAULT 0,
    calls_4xx              bigint           NOT NULL DEFAULT 0,
    calls_5xx              bigint           NOT NULL DEFAULT 0,
    calls_failed           bigint           NOT NULL DEFAULT 0,
    latency_seconds_total  double precision NOT NULL DEFAULT 0,
    last_status            integer,
    last_latency_ms        double precision,
    last_call_at           timestamptz,
    CONSTRAINT route_http_stats_pkey PRIMARY KEY (topic)
);

COMMENT ON TABLE outbox.route_http_stats IS
    'Per HTTP route: calls by class of answer (failed: none), their total time in seconds, and the last call.';

CREATE FUNCTION outbox.route_http(topic text, url text, secret text DEFAULT NULL,
                                  headers jsonb DEFAULT NULL, ca_file text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_http'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_http(text, text, text, jsonb, text) IS
    'Public: deliver topic by POSTing each envelope to url, signed with secret (Standard Webhooks), with headers; replaces the topic''s route.';

CREATE FUNCTION outbox.rotate_http_secret(topic text, new_secret text,
                                          keep_old_for interval DEFAULT '24 hours')
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_rotate_http_secret'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.rotate_http_secret(text, text, interval) IS
    'Public: sign the HTTP route of topic with new_secret from now on, and with its old secret as well for keep_old_for.';

CREATE FUNCTION outbox.webhook_signature(secret text, msg_id text, ts bigint, body text)
RETURNS text
AS 'MODULE_PATHNAME', 'outbox_webhook_signature'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION outbox.webhook_signature(text, text, bigint, text) IS
    'Public: the webhook-signature (v1) that a route with secret sends for message msg_id at unix time ts with body.';

REVOKE ALL ON TABLE outbox.route_secrets, outbox.route_http_stats FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.route_http(text, text, text, jsonb, text),
    outbox.rotate_http_secret(text, text, interval),
    outbox.webhook_signature(text, text, bigint, text) FROM PUBLIC;

/*
 * As a fresh installation does: a database owner who is not a superuser
 * may use the new functions and read the counters, and grant them on; the
 * secrets are the extension owner's alone.  Default privileges of the
 * updating role give nothing to anyone else.
 */
DO $do$
DECLARE
    dbowner name;
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee, c.oid::pg_catalog.regclass AS rel
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY['outbox.route_secrets'::pg_catalog.regclass,
                                                      'outbox.route_http_stats'::pg_catalog.regclass])
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s', r.rel,
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(r.grantee)) END);
    END LOOP;
    SELECT ro.rolname INTO dbowner
      FROM pg_catalog.pg_database d
      JOIN pg_catalog.pg_roles ro ON ro.oid OPERATOR(pg_catalog.=) d.datdba
     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
       AND NOT ro.rolsuper;
    IF FOUND THEN
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION outbox.route_http(text, text, text, jsonb, text), '
            'outbox.rotate_http_secret(text, text, interval), '
            'outbox.webhook_signature(text, text, bigint, text) TO %I WITH GRANT OPTION', dbowner);
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE outbox.route_http_stats TO %I WITH GRANT OPTION', dbowner);
    END IF;
END
$do$;
