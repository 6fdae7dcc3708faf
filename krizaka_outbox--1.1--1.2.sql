/* krizaka_outbox--1.1--1.2.sql: from 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.2'" to load this file. \quit

/*
 * The queue engine: every message gets a position in its topic's stream
 * (seq), and the messages read by their available_at instead are marked
 * deferred (see krizaka_outbox--1.2.sql).  Messages in place are numbered
 * in their claim order of 1.1; those already attempted or not yet due
 * become deferred.
 */
CREATE SEQUENCE outbox.message_seq;

ALTER TABLE outbox.message
    ADD COLUMN seq bigint,
    ADD COLUMN deferred boolean NOT NULL DEFAULT false;

UPDATE outbox.message m
   SET seq = o.n,
       deferred = (m.delivered_at IS NULL AND m.dead_at IS NULL
                   AND (m.attempts OPERATOR(pg_catalog.>) 0
                        OR m.available_at OPERATOR(pg_catalog.>) pg_catalog.now()))
  FROM (SELECT i.id, pg_catalog.row_number() OVER (ORDER BY i.available_at, i.id) AS n
          FROM outbox.message i) o
 WHERE o.id OPERATOR(pg_catalog.=) m.id;

SELECT pg_catalog.setval('outbox.message_seq',
    COALESCE((SELECT pg_catalog.max(seq) FROM outbox.message), 0) OPERATOR(pg_catalog.+) 1,
    false);

ALTER TABLE outbox.message
    ALTER COLUMN seq SET DEFAULT pg_catalog.nextval('outbox.message_seq'::pg_catalog.regclass),
    ALTER COLUMN seq SET NOT NULL;

CREATE INDEX message_stream_idx ON outbox.message (topic, seq);
CREATE INDEX message_deferred_idx ON outbox.message (topic, available_at, id)
    WHERE deferred AND dead_at IS NULL;

SELECT pg_catalog.pg_extension_config_dump('outbox.message_seq', '');

/*
 * Claims find expired leases in the stream and among the deferred
 * messages; without an index on leased_until, a claim's update of a
 * message stays on its page with no new index entry (a HOT update).
 */
DROP INDEX outbox.message_leased_idx;

/*
 * No index holds delivered_at either, so that a completion is a HOT update
 * too: claims read the stream, not the pending messages of the due index,
 * and purge reads each topic's stream up to its first message created
 * after the horizon (see krizaka_outbox--1.2.sql).
 */
DROP INDEX outbox.message_due_topic_idx;
DROP INDEX outbox.message_delivered_idx;

/* room on each page for the versions that claim and complete write */
ALTER TABLE outbox.message SET (fillfactor = 30);

/*
 * The creator of a route as a role (its OID), not only by name: delivery
 * connects with the user mapping of that very role, so that a role made
 * later under the name of a dropped one gets nothing of its routes.  The
 * routes in place get the role their created_by names now; one whose role
 * is gone gets 0 and is not delivered until made again.
 */
ALTER TABLE outbox.routes ADD COLUMN created_by_role regrole;

UPDATE outbox.routes r
   SET created_by_role = COALESCE(
        (SELECT a.oid FROM pg_catalog.pg_roles a
          WHERE a.rolname OPERATOR(pg_catalog.=) r.created_by),
        0::pg_catalog.oid)::pg_catalog.regrole;

/*
 * Ordering keys: a column, its index, and append and append_batch with a
 * last parameter ordering_key.  The new functions replace the old ones
 * (an overload would make every call without a key ambiguous) and get
 * every privilege the old ones had.  append is SECURITY INVOKER: its C
 * code switches to the function's owner itself (see krizaka_outbox--1.2.sql).
 */
ALTER TABLE outbox.message ADD COLUMN ordering_key text COLLATE pg_catalog."C";

CREATE INDEX message_key_idx ON outbox.message (topic, ordering_key, seq)
    WHERE ordering_key IS NOT NULL;
CREATE INDEX message_key_deferred_idx ON outbox.message (topic, ordering_key, seq)
    WHERE deferred AND ordering_key IS NOT NULL AND dead_at IS NULL;

CREATE FUNCTION outbox.append(
    topic text,
    type text,
    payload jsonb,
    id uuid DEFAULT NULL,
    available_at timestamptz DEFAULT NULL,
    ordering_key text DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'outbox_append'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text) IS
    'Public: append one message in the caller''s transaction; idempotent when an id is given; with an ordering key, delivered after the key''s earlier messages. Returns the message id.';

CREATE FUNCTION outbox.append_batch(
    topic text,
    type text,
    payloads jsonb[],
    ordering_key text DEFAULT NULL)
RETURNS SETOF uuid
AS 'MODULE_PATHNAME', 'outbox_append_batch'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.append_batch(text, text, jsonb[], text) IS
    'Public: append one message per array element, in array order, in the caller''s transaction, all with the same ordering key if one is given. Returns the new ids.';

REVOKE ALL ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text),
    outbox.append_batch(text, text, jsonb[], text) FROM PUBLIC;

DO $do$
DECLARE
    f record;
    g record;
BEGIN
    FOR f IN
        SELECT 'outbox.append(text, text, jsonb, uuid, timestamptz)'::pg_catalog.regprocedure AS old,
               'outbox.append(text, text, jsonb, uuid, timestamptz, text)' AS new
        UNION ALL
        SELECT 'outbox.append_batch(text, text, jsonb[])'::pg_catalog.regprocedure,
               'outbox.append_batch(text, text, jsonb[], text)'
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

/*
 * complete_and_claim: complete_many and claim in one call.  Every role that
 * may call both receives it, with the grant option where it has that on
 * both, so that an updated database grants what a fresh install plus the
 * same GRANTs would.
 */
CREATE FUNCTION outbox.complete_and_claim(
    ids uuid[],
    owner text,
    topic text DEFAULT NULL,
    batch_size integer DEFAULT NULL,
    lease_seconds integer DEFAULT NULL)
RETURNS SETOF outbox.message
AS 'MODULE_PATHNAME', 'outbox_complete_and_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.complete_and_claim(uuid[], text, text, integer, integer) IS
    'Public: complete_many(ids, owner), then claim(owner, topic, batch_size, lease_seconds), in one call and one transaction.';

REVOKE ALL ON FUNCTION outbox.complete_and_claim(uuid[], text, text, integer, integer) FROM PUBLIC;

DO $do$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT c.grantee, c.is_grantable AND m.is_grantable AS is_grantable
          FROM pg_catalog.pg_proc pc, pg_catalog.aclexplode(pc.proacl) c,
               pg_catalog.pg_proc pm, pg_catalog.aclexplode(pm.proacl) m
         WHERE pc.oid OPERATOR(pg_catalog.=) 'outbox.claim(text, text, integer, integer)'::pg_catalog.regprocedure
           AND pm.oid OPERATOR(pg_catalog.=) 'outbox.complete_many(uuid[], text)'::pg_catalog.regprocedure
           AND c.grantee OPERATOR(pg_catalog.=) m.grantee
           AND c.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND m.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND c.grantee OPERATOR(pg_catalog.<>) pc.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION outbox.complete_and_claim(uuid[], text, text, integer, integer) TO %s%s',
            CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$do$;

/*
 * topic_stats gains the age of the oldest undelivered message in seconds,
 * as a new last column so that the view keeps its grants, and reads the
 * table in one pass (the indexes of delivered and pending messages are
 * gone).
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
  LEFT JOIN outbox.routes r ON r.topic OPERATOR(pg_catalog.=) c.topic;

COMMENT ON VIEW outbox.topic_stats IS
    'Per topic: messages due, delayed, leased, dead and delivered, the age of the oldest undelivered one, the pause of its route, and that age in seconds.';

/*
 * check_route runs as its caller, as route_remote does: it connects with
 * the user mapping of the route's creator, so only the creator, a
 * superuser or a member of the extension's owner may call it.
 */
CREATE FUNCTION outbox.check_route(topic text)
RETURNS TABLE (step text, ok boolean, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'outbox_check_route'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.check_route(text) IS
    'Public: try the route of topic as delivery would, delivering nothing: one row per step (route; channel, or server, connect, prepare), up to the first that fails.';

REVOKE ALL ON FUNCTION outbox.check_route(text) FROM PUBLIC;

-- Whoever may make remote routes may check them: the grants of route_remote.
DO $do$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.grantee, a.is_grantable
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid OPERATOR(pg_catalog.=) 'outbox.route_remote(text, name, text)'::pg_catalog.regprocedure
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION outbox.check_route(text) TO %s%s',
            CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$do$;
