/* krizaka_outbox--1.4--1.5.sql: from version 1.4 to 1.5 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.5'" to load this file. \quit

/*
 * Each claim of a named subscription records the range of the log it
 * read, [from_seq, next_seq), so that the range of a claim that rolls
 * back is read again even when a later claim read on past it.  The row
 * each subscription has now is where it starts from: from_seq NULL.
 */
ALTER TABLE outbox.subscription_frontier ADD COLUMN from_seq bigint;

COMMENT ON TABLE outbox.subscription_frontier IS
    'The ranges of the log each named subscription has read, [from_seq, next_seq); its newest row is the read frontier.';

/*
 * The fresh messages that a claim of a named subscription leases at once
 * are kept as one row per read of the log, not a state row each (see
 * krizaka_outbox--1.5.sql).  The state rows of 1.4
 * stay as they are.
 */
CREATE TABLE outbox.subscription_lease (
    sub_id        integer     NOT NULL,
    first_seq     bigint      NOT NULL,
    lease_owner   text        NOT NULL,
    leased_until  timestamptz NOT NULL,
    seqs          bigint[]    NOT NULL,
    CONSTRAINT subscription_lease_pkey PRIMARY KEY (sub_id, first_seq)
);

CREATE INDEX subscription_lease_until_idx
    ON outbox.subscription_lease (leased_until, sub_id);

COMMENT ON TABLE outbox.subscription_lease IS
    'Fresh messages that a claim of a named subscription leased at once, one row per read of the log.';

/* the ordering keys whose head a lease row holds (see krizaka_outbox--1.5.sql) */
CREATE TABLE outbox.subscription_key (
    sub_id        integer NOT NULL,
    ordering_key  text    COLLATE pg_catalog."C" NOT NULL,
    seq           bigint  NOT NULL,
    CONSTRAINT subscription_key_pkey PRIMARY KEY (ordering_key, sub_id)
);

COMMENT ON TABLE outbox.subscription_key IS
    'The ordering keys whose head a lease row of outbox.subscription_lease holds, with its position.';

SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_lease', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_key', '');

/* its privileges: as outbox.claim_position's, below */

/*
 * Routes per subscription.  A topic may have a route for its default
 * subscription (subscription NULL) and one for each named subscription;
 * route_notify, route_remote, unroute and check_route take the
 * subscription as a new last argument, in new functions beside the old
 * ones, so that calls and grants written for 1.4 stay as they are.
 * Without a primary key, logical replication identifies a route by all of
 * its columns.
 */
ALTER TABLE outbox.routes ADD COLUMN subscription text;
ALTER TABLE outbox.routes DROP CONSTRAINT routes_pkey;
ALTER TABLE outbox.routes
    ADD CONSTRAINT routes_topic_subscription_key UNIQUE NULLS NOT DISTINCT (topic, subscription);
ALTER TABLE outbox.routes REPLICA IDENTITY FULL;

COMMENT ON TABLE outbox.routes IS
    'Delivery routes: one per topic and subscription (NULL: the default one), to a NOTIFY channel, to a command on a remote PostgreSQL server, or to an HTTP endpoint.';

-- the route of a topic in the stats is the default subscription's
CREATE OR REPLACE VIEW outbox.topic_stats AS
WITH counts AS (
    SELECT m.topic,
           pg_catalog.count(*) FILTER (
               WHERE m.delivered_at IS NULL AND m.dead_at IS NULL
                 AND m.available_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                 AND (m.leased_until IS NULL
                      OR m.leased_until OPERATOR(pg_catalog.<=) pg_catalog.now())) AS due,
           pg_catalog.count(*) FILTER (
               WHERE m.delivered_at IS NULL AND m.dead_at IS NULL
                 AND m.available_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS delayed,
           pg_catalog.count(*) FILTER (
               WHERE m.delivered_at IS NULL AND m.dead_at IS NULL
                 AND m.available_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                 AND m.leased_until OPERATOR(pg_catalog.>) pg_catalog.now()) AS leased,
           pg_catalog.count(*) FILTER (WHERE m.dead_at IS NOT NULL) AS dead,
           pg_catalog.count(*) FILTER (WHERE m.delivered_at IS NOT NULL) AS delivered,
           pg_catalog.min(m.created_at) FILTER (
               WHERE m.delivered_at IS NULL AND m.dead_at IS NULL) AS oldest_created_at
      FROM outbox.message m
     GROUP BY m.topic
)
SELECT c.topic,
       c.due,
       c.delayed,
       c.leased,
       c.dead,
       c.delivered,
       CASE WHEN pg_catalog.isfinite(c.oldest_created_at)
            THEN pg_catalog.now() OPERATOR(pg_catalog.-) c.oldest_created_at
       END AS oldest_undelivered_age,
       r.paused_until,
       CASE WHEN pg_catalog.isfinite(c.oldest_created_at)
            THEN pg_catalog.date_part('epoch',
                     pg_catalog.now() OPERATOR(pg_catalog.-) c.oldest_created_at)
       END AS oldest_undelivered_age_seconds
  FROM counts c
  LEFT JOIN outbox.routes r ON r.topic OPERATOR(pg_catalog.=) c.topic AND r.subscription IS NULL
 WHERE NOT EXISTS (SELECT 1 FROM outbox.subscription t
                    WHERE t.topic OPERATOR(pg_catalog.=) c.topic AND t.name IS NULL
                      AND t.paused_until IS NULL);

COMMENT ON VIEW outbox.topic_stats IS
    'Per topic: messages due, delayed, leased, dead and delivered, the age of the oldest undelivered one, the pause of its route, and that age in seconds.';

CREATE OR REPLACE VIEW outbox.subscription_stats AS
SELECT d.topic,
       NULL::text AS subscription,
       d.pending,
       d.in_flight,
       d.dead,
       CASE WHEN pg_catalog.isfinite(d.oldest_created_at)
            THEN pg_catalog.now() OPERATOR(pg_catalog.-) d.oldest_created_at
       END AS oldest_pending_age,
       NULL::timestamptz AS last_claim_at,
       GREATEST(p.paused_until, r.paused_until) AS paused_until,
       CASE WHEN GREATEST(p.paused_until, r.paused_until) OPERATOR(pg_catalog.>) pg_catalog.now()
            THEN 'paused' ELSE 'active' END AS state
  FROM (SELECT m.topic,
               pg_catalog.count(*) FILTER (
                   WHERE m.delivered_at IS NULL AND m.dead_at IS NULL) AS pending,
               pg_catalog.count(*) FILTER (
                   WHERE m.delivered_at IS NULL AND m.dead_at IS NULL
                     AND m.leased_until OPERATOR(pg_catalog.>) pg_catalog.now()) AS in_flight,
               pg_catalog.count(*) FILTER (WHERE m.dead_at IS NOT NULL) AS dead,
               pg_catalog.min(m.created_at) FILTER (
                   WHERE m.delivered_at IS NULL AND m.dead_at IS NULL) AS oldest_created_at
          FROM outbox.message m
         GROUP BY m.topic) d
  LEFT JOIN outbox.routes r ON r.topic OPERATOR(pg_catalog.=) d.topic AND r.subscription IS NULL
  LEFT JOIN outbox.subscription p ON p.topic OPERATOR(pg_catalog.=) d.topic AND p.name IS NULL
 WHERE p.topic IS NULL OR p.paused_until IS NOT NULL
UNION ALL
SELECT s.topic,
       s.name,
       st.pending OPERATOR(pg_catalog.+) ls.pending OPERATOR(pg_catalog.+) un.unread,
       st.in_flight OPERATOR(pg_catalog.+) ls.in_flight,
       st.dead,
       pg_catalog.now() OPERATOR(pg_catalog.-)
           LEAST(st.oldest_created_at, ls.oldest_created_at, un.oldest_created_at),
       (SELECT f.claimed_at FROM outbox.subscription_frontier f
         WHERE f.sub_id OPERATOR(pg_catalog.=) s.sub_id
         ORDER BY f.next_seq DESC LIMIT 1),
       s.paused_until,
       CASE WHEN s.expired_at IS NOT NULL THEN 'expired'
            WHEN s.paused_until OPERATOR(pg_catalog.>) pg_catalog.now() THEN 'paused'
            ELSE 'active' END
  FROM outbox.subscription s
  CROSS JOIN LATERAL (
        SELECT pg_catalog.count(*) FILTER (WHERE x.dead_at IS NULL AND NOT x.hole) AS pending,
               pg_catalog.count(*) FILTER (
                   WHERE x.dead_at IS NULL
                     AND x.leased_until OPERATOR(pg_catalog.>) pg_catalog.now()) AS in_flight,
               pg_catalog.count(*) FILTER (WHERE x.dead_at IS NOT NULL) AS dead,
               pg_catalog.min(m.created_at) FILTER (WHERE x.dead_at IS NULL) AS oldest_created_at
          FROM outbox.subscription_state x
          LEFT JOIN outbox.message m
                 ON m.topic OPERATOR(pg_catalog.=) s.topic
                AND m.seq OPERATOR(pg_catalog.=) x.seq
         WHERE x.sub_id OPERATOR(pg_catalog.=) s.sub_id) st
  CROSS JOIN LATERAL (
        SELECT COALESCE(pg_catalog.sum(pg_catalog.cardinality(l.seqs)), 0) AS pending,
               COALESCE(pg_catalog.sum(pg_catalog.cardinality(l.seqs)) FILTER (
                   WHERE l.leased_until OPERATOR(pg_catalog.>) pg_catalog.now()), 0) AS in_flight,
               pg_catalog.min(m.created_at) AS oldest_created_at
          FROM outbox.subscription_lease l
          LEFT JOIN outbox.message m
                 ON m.topic OPERATOR(pg_catalog.=) s.topic
                AND m.seq OPERATOR(pg_catalog.=) l.seqs[1]
         WHERE l.sub_id OPERATOR(pg_catalog.=) s.sub_id) ls
  CROSS JOIN LATERAL (
        SELECT pg_catalog.count(*) AS unread,
               pg_catalog.min(m.created_at) AS oldest_created_at
          FROM outbox.message m
         WHERE m.topic OPERATOR(pg_catalog.=) s.topic
           AND m.seq OPERATOR(pg_catalog.>=) (SELECT f.next_seq FROM outbox.subscription_frontier f WHERE f.sub_id OPERATOR(pg_catalog.=) s.sub_id ORDER BY f.next_seq DESC LIMIT 1)) un
 WHERE s.name IS NOT NULL;

COMMENT ON VIEW outbox.subscription_stats IS
    'Per topic and subscription (NULL: the default one): messages pending (leased ones included), in flight, dead, the age of the oldest pending one, the last claim, the pause and the state.';

/*
 * HTTP routes per subscription too: their secrets and counters are kept
 * per topic and subscription, as the routes are; route_http and
 * rotate_http_secret take the subscription in new functions beside the
 * old ones.
 */
ALTER TABLE outbox.route_secrets ADD COLUMN subscription text;
ALTER TABLE outbox.route_secrets DROP CONSTRAINT route_secrets_pkey;
ALTER TABLE outbox.route_secrets
    ADD CONSTRAINT route_secrets_topic_subscription_key UNIQUE NULLS NOT DISTINCT (topic, subscription);
ALTER TABLE outbox.route_secrets REPLICA IDENTITY FULL;

ALTER TABLE outbox.route_http_stats ADD COLUMN subscription text;
ALTER TABLE outbox.route_http_stats DROP CONSTRAINT route_http_stats_pkey;
ALTER TABLE outbox.route_http_stats
    ADD CONSTRAINT route_http_stats_topic_subscription_key UNIQUE NULLS NOT DISTINCT (topic, subscription);
ALTER TABLE outbox.route_http_stats REPLICA IDENTITY FULL;

COMMENT ON TABLE outbox.route_http_stats IS
    'Per HTTP route (topic and subscription, NULL: the default one): calls by class of answer (failed: none), their total time in seconds, and the last call.';

CREATE FUNCTION outbox.route_http(topic text, url text, secret text, headers jsonb,
                                  ca_file text, subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_http'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_http(text, text, text, jsonb, text, text) IS
    'Public: deliver the subscription of topic (NULL: the default one; a named one is made when missing) by POSTing each envelope to url, signed with secret (Standard Webhooks), with headers; replaces its route.';

CREATE FUNCTION outbox.rotate_http_secret(topic text, new_secret text, keep_old_for interval,
                                          subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_rotate_http_secret'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.rotate_http_secret(text, text, interval, text) IS
    'Public: sign the HTTP route of the subscription of topic (NULL: the default one) with new_secret from now on, and with its old secret as well for keep_old_for.';

CREATE FUNCTION outbox.route_notify(topic text, channel text, subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_notify'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_notify(text, text, text) IS
    'Public: deliver the subscription of topic (NULL: the default one; a named one is made when missing) by pg_notify(channel, envelope); replaces its route.';

CREATE FUNCTION outbox.route_remote(topic text, server name, command text, subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_remote'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_remote(text, name, text, text) IS
    'Public: deliver the subscription of topic (NULL: the default one; a named one is made when missing) by running command on the foreign server, with $1 = envelope (jsonb) and $2 = topic; replaces its route.';

CREATE FUNCTION outbox.check_route(topic text, subscription text)
RETURNS TABLE (step text, ok boolean, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'outbox_check_route'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.check_route(text, text) IS
    'Public: try the route of the subscription of topic (NULL: the default one) as delivery would, delivering nothing.';

CREATE FUNCTION outbox.unroute(topic text, subscription text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_unroute'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.unroute(text, text) IS
    'Public: remove the route of the subscription of topic (NULL: the default one). Returns false when it had none.';

REVOKE ALL ON FUNCTION outbox.route_notify(text, text, text),
    outbox.route_remote(text, name, text, text),
    outbox.route_http(text, text, text, jsonb, text, text),
    outbox.rotate_http_secret(text, text, interval, text),
    outbox.check_route(text, text),
    outbox.unroute(text, text) FROM PUBLIC;

/*
 * The new functions get exactly the grants of the old ones beside them,
 * grant options included, and nothing from the default privileges of the
 * updating role.
 */
DO $do$
DECLARE
    f record;
    g record;
BEGIN
    FOR f IN
        SELECT 'outbox.route_notify(text, text)'::pg_catalog.regprocedure AS old,
               'outbox.route_notify(text, text, text)'::pg_catalog.regprocedure AS new
        UNION ALL
        SELECT 'outbox.route_remote(text, name, text)'::pg_catalog.regprocedure,
               'outbox.route_remote(text, name, text, text)'::pg_catalog.regprocedure
        UNION ALL
        SELECT 'outbox.check_route(text)'::pg_catalog.regprocedure,
               'outbox.check_route(text, text)'::pg_catalog.regprocedure
        UNION ALL
        SELECT 'outbox.unroute(text)'::pg_catalog.regprocedure,
               'outbox.unroute(text, text)'::pg_catalog.regprocedure
        UNION ALL
        SELECT 'outbox.route_http(text, text, text, jsonb, text)'::pg_catalog.regprocedure,
               'outbox.route_http(text, text, text, jsonb, text, text)'::pg_catalog.regprocedure
        UNION ALL
        SELECT 'outbox.rotate_http_secret(text, text, interval)'::pg_catalog.regprocedure,
               'outbox.rotate_http_secret(text, text, interval, text)'::pg_catalog.regprocedure
    LOOP
        FOR g IN
            SELECT DISTINCT a.grantee
              FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
             WHERE p.oid OPERATOR(pg_catalog.=) f.new
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', f.new,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END);
        END LOOP;
        FOR g IN
            SELECT a.grantee, a.is_grantable
              FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
             WHERE p.oid OPERATOR(pg_catalog.=) f.old
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f.new,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$do$;

/*
 * The default subscription of a topic can be paused: its row in
 * outbox.subscription (name NULL) has paused_until set, where a dropped
 * one's has NULL.
 */
COMMENT ON TABLE outbox.subscription IS
    'Named subscriptions: independent readers of a topic, each with its start and its pause; a row with name NULL: the topic''s default subscription was dropped (paused_until NULL) or is paused.';

/*
 * Purge finds the markers of consume_once older than its horizon through
 * their insert time: without an index, each purge read every marker.
 * Markers are inserted in time order and never updated, so a BRIN index
 * stays a few pages and costs an insert almost nothing.
 */
CREATE INDEX processed_at_idx ON outbox.processed USING brin (processed_at);

/*
 * Where the search of each topic's claim position starts when none is
 * kept (src/outbox_store_saved.c): empty at first, each topic's next
 * search reads it from its first message kept, as before, and saves what
 * it finds.
 */
CREATE TABLE outbox.claim_position (
    topic     text        NOT NULL,
    position  bigint      NOT NULL,
    saved_at  timestamptz NOT NULL,
    CONSTRAINT claim_position_pkey PRIMARY KEY (topic)
) WITH (fillfactor = 50);

COMMENT ON TABLE outbox.claim_position IS
    'Where the search of each topic''s claim position starts when none is kept: every message of the topic below position is finished or deferred.';

REVOKE ALL ON TABLE outbox.claim_position, outbox.subscription_lease, outbox.subscription_key
    FROM PUBLIC;

/*
 * As a fresh installation does: a database owner who is not a superuser
 * may read them, and grant that on.  Default privileges of the updating
 * role give nothing to anyone else.
 */
DO $do$
DECLARE
    dbowner name;
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT c.oid::pg_catalog.regclass AS rel, a.grantee
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY['outbox.claim_position'::pg_catalog.regclass,
                                                      'outbox.subscription_lease'::pg_catalog.regclass,
                                                      'outbox.subscription_key'::pg_catalog.regclass])
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
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE outbox.claim_position, outbox.subscription_lease, outbox.subscription_key TO %I WITH GRANT OPTION',
            dbowner);
    END IF;
END
$do$;
