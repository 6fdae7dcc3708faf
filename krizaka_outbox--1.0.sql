/* krizaka_outbox--1.0.sql: the schema, settings-aware functions and privileges of 1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION krizaka_outbox" to load this file. \quit

/*
 * outbox.message: one row per event.  The table is a queue: every row is
 * inserted once, updated by claim (attempts, lease), then once more by
 * complete or fail, and finally deleted by purge.
 *
 * fillfactor 70 leaves room on each page so that the claim update, which
 * changes no indexed column, stays a HOT update on the same page; complete
 * leaves the partial "due" indexes and cannot be HOT.  The low autovacuum
 * thresholds keep the due indexes free of dead entries, which claim would
 * otherwise step over on every call.
 */
CREATE TABLE outbox.message (
    id            uuid        NOT NULL,
    topic         text        NOT NULL,
    event_type    text        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    available_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    attempts      integer     NOT NULL DEFAULT 0,
    leased_until  timestamptz,
    lease_owner   text,
    delivered_at  timestamptz,
    dead_at       timestamptz,
    last_error    text,
    CONSTRAINT message_pkey PRIMARY KEY (id)
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

/*
 * The due indexes hold only messages that are neither delivered nor dead, so
 * the cost of claim does not grow with the history kept until purge.  One
 * serves claims for a topic, the other claims across all topics; both give
 * the claim order (available_at, id) directly.
 */
CREATE INDEX message_due_topic_idx ON outbox.message (topic, available_at, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX message_due_idx ON outbox.message (available_at, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;

COMMENT ON TABLE outbox.message IS
    'Outbox messages: appended in the writer''s transaction, delivered at least once after commit.';

/*
 * outbox.processed: the markers behind consume_once.  Insert-only until
 * purge, so the default fillfactor fits.
 */
CREATE TABLE outbox.processed (
    consumer      text        NOT NULL,
    message_id    uuid        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT processed_pkey PRIMARY KEY (consumer, message_id)
);

COMMENT ON TABLE outbox.processed IS
    'Markers of consume_once: one row per (consumer, message id) whose effect committed.';

-- pg_dump keeps the rows of both tables
SELECT pg_catalog.pg_extension_config_dump('outbox.message', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.processed', '');

/*
 * Functions.  The C code runs every statement schema-qualified; the fixed
 * search_path is a second guard against objects a caller puts in front.
 * Functions that touch the tables are SECURITY DEFINER so that a role
 * granted EXECUTE needs no table privilege.
 */
CREATE FUNCTION outbox.append(
    topic text,
    type text,
    payload jsonb,
    id uuid DEFAULT NULL,
    available_at timestamptz DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'outbox_append'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz) IS
    'Public: append one message in the caller''s transaction; idempotent when an id is given. Returns the message id.';

CREATE FUNCTION outbox.append_batch(
    topic text,
    type text,
    payloads jsonb[])
RETURNS SETOF uuid
AS 'MODULE_PATHNAME', 'outbox_append_batch'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.append_batch(text, text, jsonb[]) IS
    'Public: append one message per array element, in array order, in the caller''s transaction. Returns the new ids.';

CREATE FUNCTION outbox.claim(
    owner text,
    topic text DEFAULT NULL,
    batch_size integer DEFAULT NULL,
    lease_seconds integer DEFAULT NULL)
RETURNS SETOF outbox.message
AS 'MODULE_PATHNAME', 'outbox_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.claim(text, text, integer, integer) IS
    'Public: lease up to batch_size due messages to owner, oldest first; marks dead the messages whose last allowed lease expired.';

CREATE FUNCTION outbox.complete(id uuid, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_complete'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.complete(uuid, text) IS
    'Public: mark a message delivered if owner holds its lease. Returns false and changes nothing otherwise.';

CREATE FUNCTION outbox.complete_many(ids uuid[], owner text)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_complete_many'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.complete_many(uuid[], text) IS
    'Public: mark delivered the messages of ids whose lease owner holds. Returns how many were marked.';

CREATE FUNCTION outbox.fail(id uuid, owner text, error text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_fail'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.fail(uuid, text, text) IS
    'Public: record a failed delivery by the lease owner: back off exponentially, or mark dead after outbox.max_attempts.';

CREATE FUNCTION outbox.extend(id uuid, owner text, lease_seconds integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_extend'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.extend(uuid, text, integer) IS
    'Public: push the lease of a message owner holds to now + lease_seconds (a heartbeat for slow deliveries).';

CREATE FUNCTION outbox.retry_dead(id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_retry_dead'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.retry_dead(uuid) IS
    'Public: give a dead message another life: attempts 0, available now.';

CREATE FUNCTION outbox.retry_dead_topic(topic text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_retry_dead_topic'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.retry_dead_topic(text) IS
    'Public: give every dead message of a topic another life. Returns how many were revived.';

CREATE FUNCTION outbox.purge(older_than interval DEFAULT NULL, max_rows bigint DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_purge'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.purge(interval, bigint) IS
    'Public: delete delivered and dead messages and consume_once markers older than the horizon (default outbox.retention_days). Returns the number of messages deleted.';

CREATE FUNCTION outbox.consume_once(consumer text, message_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_consume_once'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.consume_once(text, uuid) IS
    'Public: record that consumer processed message_id, in the caller''s transaction. True the first time, false after.';

CREATE FUNCTION outbox.envelope(m outbox.message)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'outbox_envelope'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION outbox.envelope(outbox.message) IS
    'Public: the wire envelope of a message: {id, type, occurredAt, payload}.';

CREATE FUNCTION outbox.envelope_by_id(id uuid)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'outbox_envelope_by_id'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.envelope_by_id(uuid) IS
    'Public: the wire envelope of the message with this id, or NULL when there is none.';

CREATE FUNCTION outbox.worker_status(
    OUT datname name,
    OUT pid integer,
    OUT state text,
    OUT started_at timestamptz,
    OUT last_round_at timestamptz,
    OUT delivered bigint,
    OUT failed bigint,
    OUT last_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_worker_status'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION outbox.worker_status() IS
    'Public: the background drain workers, one row per database they serve (needs shared_preload_libraries).';

/*
 * Privileges.  Nothing is open to PUBLIC: the database owner grants EXECUTE
 * per role (writers, workers, operators; see the README).  A database owner
 * who is not a superuser receives the grant option to do so.
 */
REVOKE ALL ON TABLE outbox.message, outbox.processed FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;

DO $do$
DECLARE
    dbowner name;
BEGIN
    SELECT r.rolname INTO dbowner
      FROM pg_catalog.pg_database d
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) d.datdba
     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
       AND NOT r.rolsuper;
    IF FOUND THEN
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA outbox TO %I WITH GRANT OPTION', dbowner);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO %I WITH GRANT OPTION', dbowner);
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE outbox.message, outbox.processed TO %I WITH GRANT OPTION', dbowner);
    END IF;
END
$do$;
