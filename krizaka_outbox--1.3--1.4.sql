/* krizaka_outbox--1.3--1.4.sql: from version 1.3 to 1.4 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.4'" to load this file. \quit

/*
 * Subscriptions.  A topic's messages form a log in position order (seq); a
 * named subscription reads it on its own, with its own leases, attempts,
 * backoff, dead letters and per-key order.  The topic's default
 * subscription (subscription => NULL) keeps its state in outbox.message,
 * as before.
 *
 * outbox.subscription: one row per named subscription, and one with name
 * NULL for each topic whose default subscription was dropped
 * (unsubscribe(topic, NULL)): then purge does not wait for the default
 * subscription, and claims of it are refused.  start_seq: the first
 * position a named subscription read.  A claim holds the row's lock until
 * it commits, so that the claims of a subscription take turns; the row is
 * not updated by claims (a held snapshot would keep every version of it).
 * expired_at: purge found it lagging more than
 * outbox.subscription_max_lag; it holds no message back any more, and its
 * claims are refused.
 *
 * outbox.subscription_frontier: the read frontier of each named
 * subscription, its newest row: the messages of its topic at or after
 * next_seq have not been read yet; a message before it is done for the
 * subscription unless it has a row in outbox.subscription_state.  A claim
 * that reads the log inserts the new frontier and deletes the one it
 * read, so the newest is the first entry of the index however many old
 * ones a held snapshot keeps.  claimed_at: when that claim ran.
 */
CREATE SEQUENCE outbox.subscription_id_seq AS integer;

CREATE TABLE outbox.subscription (
    sub_id        integer     NOT NULL DEFAULT pg_catalog.nextval('outbox.subscription_id_seq'::pg_catalog.regclass),
    topic         text        NOT NULL,
    name          text,
    start_seq     bigint      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    paused_until  timestamptz,
    expired_at    timestamptz,
    CONSTRAINT subscription_pkey PRIMARY KEY (sub_id),
    CONSTRAINT subscription_topic_name_key UNIQUE NULLS NOT DISTINCT (topic, name)
) WITH (fillfactor = 50);

ALTER SEQUENCE outbox.subscription_id_seq OWNED BY outbox.subscription.sub_id;

COMMENT ON TABLE outbox.subscription IS
    'Named subscriptions: independent readers of a topic, each with its start and its pause; a row with name NULL: the topic''s default subscription was dropped.';

CREATE TABLE outbox.subscription_frontier (
    sub_id        integer     NOT NULL,
    next_seq      bigint      NOT NULL,
    claimed_at    timestamptz,
    CONSTRAINT subscription_frontier_pkey PRIMARY KEY (sub_id, next_seq)
);

COMMENT ON TABLE outbox.subscription_frontier IS
    'The read frontier of each named subscription: its newest row.';

/*
 * outbox.subscription_state: the messages a named subscription has read
 * and is not done with: leased, waiting for a retry or for their
 * available_at, blocked behind an earlier message of their ordering key,
 * or dead.  Done, the row goes: the table holds what is in flight, not the
 * history.  available_at is when the row is due next (its schedule, its
 * retry, or the end of its lease); blocked rows wait for the key's head to
 * be done or dead.  A hole is a message whose append was still in progress
 * when a claim read past it: it is handed out once it commits, and goes
 * when it rolls back.
 */
CREATE TABLE outbox.subscription_state (
    sub_id        integer     NOT NULL,
    seq           bigint      NOT NULL,
    id            uuid        NOT NULL,
    ordering_key  text        COLLATE pg_catalog."C",
    available_at  timestamptz NOT NULL,
    blocked       boolean     NOT NULL DEFAULT false,
    hole          boolean     NOT NULL DEFAULT false,
    attempts      integer     NOT NULL DEFAULT 0,
    leased_until  timestamptz,
    lease_owner   text,
    dead_at       timestamptz,
    last_error    text,
    CONSTRAINT subscription_state_pkey PRIMARY KEY (sub_id, seq)
);

-- complete, fail, extend and retry_dead find a message by id
CREATE UNIQUE INDEX subscription_state_id_idx
    ON outbox.subscription_state (id, sub_id);
-- the due read of a claim: the rows a claim may lease, by when they are
-- due.  A leased row is not in it (it is found by its lease's end when
-- that passes), so the rows completed under their first lease, most of
-- them, never enter it.
CREATE INDEX subscription_state_due_idx
    ON outbox.subscription_state (sub_id, available_at)
    WHERE dead_at IS NULL AND NOT blocked AND NOT hole AND leased_until IS NULL;
-- the appends a claim passed over while they were in progress
CREATE INDEX subscription_state_hole_idx
    ON outbox.subscription_state (sub_id, seq)
    WHERE hole;
-- the head of each ordering key, and the rows it blocks
CREATE INDEX subscription_state_key_idx
    ON outbox.subscription_state (sub_id, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND dead_at IS NULL;
-- leases that ran out: taken over, or made dead after the last allowed
-- attempt.  By the lease's end first: the calls that find a lease by its
-- message's id must not take this index for a subscription's leases.
CREATE INDEX subscription_state_lease_idx
    ON outbox.subscription_state (leased_until, sub_id)
    WHERE leased_until IS NOT NULL AND dead_at IS NULL;
-- dead letters, for retry_dead_topic, the stats and purge
CREATE INDEX subscription_state_dead_idx
    ON outbox.subscription_state (dead_at, sub_id)
    WHERE dead_at IS NOT NULL;

COMMENT ON TABLE outbox.subscription_state IS
    'What each named subscription has read and is not done with: leased, retrying, scheduled, blocked by its ordering key, or dead.';

SELECT pg_catalog.pg_extension_config_dump('outbox.subscription', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_state', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_frontier', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_id_seq', '');

/*
 * outbox.topic_stats counts the default subscription's state: a topic whose
 * default subscription was dropped has none, and is not shown (its
 * messages would count as due for ever).
 */
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
  LEFT JOIN outbox.routes r ON r.topic OPERATOR(pg_catalog.=) c.topic
 WHERE NOT EXISTS (SELECT 1 FROM outbox.subscription t
                    WHERE t.topic OPERATOR(pg_catalog.=) c.topic AND t.name IS NULL);

CREATE FUNCTION outbox.subscribe(topic text, subscription text,
                                 since timestamptz DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_subscribe'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.subscribe(text, text, timestamptz) IS
    'Public: add a subscription to topic that reads the messages appended from now on (since NULL), or every message still kept created at or after since; NULL brings back a dropped default subscription. False when it exists already.';

CREATE FUNCTION outbox.unsubscribe(topic text, subscription text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_unsubscribe'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.unsubscribe(text, text) IS
    'Public: drop a subscription of topic with everything it had in flight; NULL drops the default one, which purge then no longer waits for. False when there was none.';

CREATE FUNCTION outbox.pause(topic text, subscription text,
                             until timestamptz DEFAULT 'infinity')
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_pause'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.pause(text, text, timestamptz) IS
    'Public: claims of the subscription take nothing until the given time (for ever by default). False when there is no such subscription.';

CREATE FUNCTION outbox.resume(topic text, subscription text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_resume'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.resume(text, text) IS
    'Public: end the pause of a subscription. False when there is no such subscription.';

/*
 * outbox.subscription_stats: one row per topic and subscription; the
 * default subscription of a topic (subscription NULL) counts outbox.message,
 * a named one its unread messages and its state rows.
 */
CREATE VIEW outbox.subscription_stats AS
SELECT d.topic,
       NULL::text AS subscription,
       d.pending,
       d.in_flight,
       d.dead,
       CASE WHEN pg_catalog.isfinite(d.oldest_created_at)
            THEN pg_catalog.now() OPERATOR(pg_catalog.-) d.oldest_created_at
       END AS oldest_pending_age,
       NULL::timestamptz AS last_claim_at,
       r.paused_until,
       CASE WHEN r.paused_until OPERATOR(pg_catalog.>) pg_catalog.now() THEN 'paused'
            ELSE 'active' END AS state
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
  LEFT JOIN outbox.routes r ON r.topic OPERATOR(pg_catalog.=) d.topic
 WHERE NOT EXISTS (SELECT 1 FROM outbox.subscription t
                    WHERE t.topic OPERATOR(pg_catalog.=) d.topic AND t.name IS NULL)
UNION ALL
SELECT s.topic,
       s.name,
       st.pending OPERATOR(pg_catalog.+) un.unread,
       st.in_flight,
       st.dead,
       pg_catalog.now() OPERATOR(pg_catalog.-)
           LEAST(st.oldest_created_at, un.oldest_created_at),
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
        SELECT pg_catalog.count(*) AS unread,
               pg_catalog.min(m.created_at) AS oldest_created_at
          FROM outbox.message m
         WHERE m.topic OPERATOR(pg_catalog.=) s.topic
           AND m.seq OPERATOR(pg_catalog.>=) (SELECT f.next_seq FROM outbox.subscription_frontier f WHERE f.sub_id OPERATOR(pg_catalog.=) s.sub_id ORDER BY f.next_seq DESC LIMIT 1)) un
 WHERE s.name IS NOT NULL;

COMMENT ON VIEW outbox.subscription_stats IS
    'Per topic and subscription (NULL: the default one): messages pending (leased ones included), in flight, dead, the age of the oldest pending one, the last claim, the pause and the state.';

/*
 * claim, complete, complete_many, complete_and_claim, fail, extend,
 * retry_dead and retry_dead_topic take the subscription as a new last
 * argument, NULL by default: every call written for 1.3 means the topic's
 * default subscription, as before.  Each function is made again with it,
 * and every role that could run the old one may run the new one, with the
 * grant option where it had it.
 */
CREATE FUNCTION outbox.claim(
    owner text,
    topic text DEFAULT NULL,
    batch_size integer DEFAULT NULL,
    lease_seconds integer DEFAULT NULL,
    subscription text DEFAULT NULL)
RETURNS SETOF outbox.message
AS 'MODULE_PATHNAME', 'outbox_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.claim(text, text, integer, integer, text) IS
    'Public: lease up to batch_size due messages of the subscription (NULL: the topic''s default one) to owner, oldest first; marks dead the messages whose last allowed lease expired.';

CREATE FUNCTION outbox.complete(id uuid, owner text, subscription text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_complete'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.complete(uuid, text, text) IS
    'Public: mark a message delivered if owner holds its lease. Returns false and changes nothing otherwise.';

CREATE FUNCTION outbox.complete_many(ids uuid[], owner text, subscription text DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_complete_many'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.complete_many(uuid[], text, text) IS
    'Public: mark delivered the messages of ids whose lease owner holds. Returns how many were marked.';

CREATE FUNCTION outbox.complete_and_claim(
    ids uuid[],
    owner text,
    topic text DEFAULT NULL,
    batch_size integer DEFAULT NULL,
    lease_seconds integer DEFAULT NULL,
    subscription text DEFAULT NULL)
RETURNS SETOF outbox.message
AS 'MODULE_PATHNAME', 'outbox_complete_and_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.complete_and_claim(uuid[], text, text, integer, integer, text) IS
    'Public: complete_many(ids, owner, subscription), then claim(owner, topic, batch_size, lease_seconds, subscription), in one call and one transaction.';

CREATE FUNCTION outbox.fail(id uuid, owner text, error text, subscription text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_fail'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.fail(uuid, text, text, text) IS
    'Public: record a failed delivery by the lease owner: back off exponentially, or mark dead after outbox.max_attempts.';

CREATE FUNCTION outbox.extend(id uuid, owner text, lease_seconds integer DEFAULT NULL,
                              subscription text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_extend'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.extend(uuid, text, integer, text) IS
    'Public: push the lease of a message owner holds to now + lease_seconds (a heartbeat for slow deliveries).';

CREATE FUNCTION outbox.retry_dead(id uuid, subscription text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_retry_dead'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.retry_dead(uuid, text) IS
    'Public: give a dead message another life: attempts 0, available now.';

CREATE FUNCTION outbox.retry_dead_topic(topic text, subscription text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_retry_dead_topic'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.retry_dead_topic(text, text) IS
    'Public: give every dead message of a topic another life. Returns how many were revived.';

REVOKE ALL ON FUNCTION outbox.claim(text, text, integer, integer, text),
    outbox.complete(uuid, text, text),
    outbox.complete_many(uuid[], text, text),
    outbox.complete_and_claim(uuid[], text, text, integer, integer, text),
    outbox.fail(uuid, text, text, text),
    outbox.extend(uuid, text, integer, text),
    outbox.retry_dead(uuid, text),
    outbox.retry_dead_topic(text, text) FROM PUBLIC;

/*
 * Default privileges of the updating role give nothing on the functions
 * made here (as a fresh installation revokes them): the new functions get
 * only the grants of the old ones, copied below.
 */
DO $do$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee, p.oid::pg_catalog.regprocedure AS fn
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace
           -- the functions made by this script: those with an argument subscription
           AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['claim', 'complete', 'complete_many',
                   'complete_and_claim', 'fail', 'extend', 'retry_dead', 'retry_dead_topic',
                   'subscribe', 'unsubscribe', 'pause', 'resume']::pg_catalog.name[])
           AND 'subscription'::pg_catalog.text OPERATOR(pg_catalog.=) ANY (p.proargnames)
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', r.fn,
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(r.grantee)) END);
    END LOOP;
END
$do$;

DO $do$
DECLARE
    f record;
    g record;
BEGIN
    FOR f IN
        SELECT 'outbox.claim(text, text, integer, integer)'::pg_catalog.regprocedure AS old,
               'outbox.claim(text, text, integer, integer, text)' AS new
        UNION ALL
        SELECT 'outbox.complete(uuid, text)'::pg_catalog.regprocedure,
               'outbox.complete(uuid, text, text)'
        UNION ALL
        SELECT 'outbox.complete_many(uuid[], text)'::pg_catalog.regprocedure,
               'outbox.complete_many(uuid[], text, text)'
        UNION ALL
        SELECT 'outbox.complete_and_claim(uuid[], text, text, integer, integer)'::pg_catalog.regprocedure,
               'outbox.complete_and_claim(uuid[], text, text, integer, integer, text)'
        UNION ALL
        SELECT 'outbox.fail(uuid, text, text)'::pg_catalog.regprocedure,
               'outbox.fail(uuid, text, text, text)'
        UNION ALL
        SELECT 'outbox.extend(uuid, text, integer)'::pg_catalog.regprocedure,
               'outbox.extend(uuid, text, integer, text)'
        UNION ALL
        SELECT 'outbox.retry_dead(uuid)'::pg_catalog.regprocedure,
               'outbox.retry_dead(uuid, text)'
        UNION ALL
        SELECT 'outbox.retry_dead_topic(text)'::pg_catalog.regprocedure,
               'outbox.retry_dead_topic(text, text)'
    LOOP
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
        EXECUTE pg_catalog.format('DROP FUNCTION %s', f.old);
    END LOOP;
END
$do$;

REVOKE ALL ON TABLE outbox.subscription, outbox.subscription_state,
    outbox.subscription_frontier, outbox.subscription_stats FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.subscribe(text, text, timestamptz),
    outbox.unsubscribe(text, text),
    outbox.pause(text, text, timestamptz),
    outbox.resume(text, text) FROM PUBLIC;

/*
 * As a fresh installation does: a database owner who is not a superuser
 * may manage subscriptions and read their tables and stats, and grant that
 * on.  Default privileges of the updating role give nothing to anyone else.
 */
DO $do$
DECLARE
    dbowner name;
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee, c.oid::pg_catalog.regclass AS rel
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY['outbox.subscription'::pg_catalog.regclass,
                                                      'outbox.subscription_state'::pg_catalog.regclass,
                                                      'outbox.subscription_frontier'::pg_catalog.regclass,
                                                      'outbox.subscription_stats'::pg_catalog.regclass,
                                                      'outbox.subscription_id_seq'::pg_catalog.regclass])
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
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION outbox.subscribe(text, text, timestamptz), '
            'outbox.unsubscribe(text, text), outbox.pause(text, text, timestamptz), '
            'outbox.resume(text, text) TO %I WITH GRANT OPTION', dbowner);
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE outbox.subscription, outbox.subscription_state, '
            'outbox.subscription_frontier, outbox.subscription_stats TO %I WITH GRANT OPTION', dbowner);
    END IF;
END
$do$;
