/* krizaka_outbox--1.5.sql: version 1.5 of the extension */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION krizaka_outbox" to load this file. \quit

/*
 * The schema belongs to the extension, and to the superuser who installs it.
 * An existing schema named outbox is refused (CREATE SCHEMA fails): its
 * owner could otherwise rename it and put objects of their own under the
 * names the SECURITY DEFINER functions use.
 */
CREATE SCHEMA outbox;

/*
 * outbox.message: one row per event.  The table is a queue: every row is
 * inserted once, updated by claim (attempts, lease), then once more by
 * complete or fail, and finally deleted by purge.
 *
 * fillfactor 30 leaves room on each page for the two new versions that
 * claim and complete write of every message, so that they stay on the page
 * of the message: no index holds a column they change, so both are HOT
 * updates and write no index entry (with 70, more than half of them did
 * not fit and wrote an entry in every index).  The low autovacuum
 * thresholds keep the partial indexes free of dead entries.
 *
 * seq is the message's position in its topic's stream, in append order,
 * from outbox.message_seq.  Claims read a topic's fresh messages from the
 * topic's claim position onwards in the stream index, so they never walk
 * the messages finished before it, whatever a held snapshot keeps of their
 * old versions (src/outbox_stream.c).  deferred marks the messages that are
 * not read from the stream but by their available_at: appended with an
 * available_at still ahead, failed and waiting for their retry, or
 * revived.
 *
 * ordering_key compares byte by byte (collation "C"): a key is an
 * identifier, and claims compare keys in message_key_idx for every keyed
 * candidate.
 */
CREATE SEQUENCE outbox.message_seq;

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
    seq           bigint      NOT NULL DEFAULT pg_catalog.nextval('outbox.message_seq'::pg_catalog.regclass),
    deferred      boolean     NOT NULL DEFAULT false,
    ordering_key  text        COLLATE pg_catalog."C",
    CONSTRAINT message_pkey PRIMARY KEY (id)
) WITH (
    fillfactor = 30,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

/*
 * The stream of each topic: claims read a topic's fresh messages from its
 * claim position (src/outbox_stream.c), and a claim across all topics
 * finds the topics by skipping through it.
 */
CREATE INDEX message_stream_idx ON outbox.message (topic, seq);

/*
 * The deferred messages of each topic in the order they become due.  The
 * predicate does not name delivered_at, and no index holds delivered_at or
 * leased_until: so a claim and a completion change no indexed column, and
 * both are HOT updates that write no index entry whenever the page has
 * room.  Completion sets deferred to false (a change only for a message
 * that was deferred), so delivered messages leave this index.
 */
CREATE INDEX message_deferred_idx ON outbox.message (topic, available_at, id)
    WHERE deferred AND dead_at IS NULL;

/*
 * The messages of each ordering key in stream order, and the deferred ones
 * of each key: a claim hands out a keyed message only when no message
 * before it of the same key is pending.
 */
CREATE INDEX message_key_idx ON outbox.message (topic, ordering_key, seq)
    WHERE ordering_key IS NOT NULL;
CREATE INDEX message_key_deferred_idx ON outbox.message (topic, ordering_key, seq)
    WHERE deferred AND ordering_key IS NOT NULL AND dead_at IS NULL;

/*
 * Purge reads each topic's stream from its start to its first message
 * created at or after the horizon: that message took its position after
 * the horizon, so did every later one, and a message is delivered or dead
 * only after its append committed (src/outbox_store.c).  So no index by
 * age: an append writes two index entries, the key and the stream.  Dead
 * messages have an index of their own for retry_dead_topic and topic_stats
 * (dead_at changes only on failure and revival, which are rare).
 */
CREATE INDEX message_dead_idx ON outbox.message (dead_at) INCLUDE (topic)
    WHERE dead_at IS NOT NULL;

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

/*
 * Purge finds the markers older than its horizon through their insert
 * time.  Markers are inserted in time order and never updated, so a BRIN
 * index of it stays a few pages and costs an insert almost nothing; without
 * it, each purge read every marker.
 */
CREATE INDEX processed_at_idx ON outbox.processed USING brin (processed_at);

/*
 * outbox.claim_position: where the search of each topic's claim position
 * starts when none is kept (after a restart, for a topic whose position
 * made room for another's, in each backend of a server that does not
 * preload the library): a floor below which every message of the topic is
 * finished or deferred, saved by the searches at most once a second per
 * topic (src/outbox_store_saved.c).  It only saves reading: lost, each
 * topic's next search reads it from its first message kept, so pg_dump
 * does not keep its rows.
 */
CREATE TABLE outbox.claim_position (
    topic     text        NOT NULL,
    position  bigint      NOT NULL,
    saved_at  timestamptz NOT NULL,
    CONSTRAINT claim_position_pkey PRIMARY KEY (topic)
) WITH (fillfactor = 50);

COMMENT ON TABLE outbox.claim_position IS
    'Where the search of each topic''s claim position starts when none is kept: every message of the topic below position is finished or deferred.';

-- pg_dump keeps the rows of both tables
SELECT pg_catalog.pg_extension_config_dump('outbox.message', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.processed', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.message_seq', '');

/*
 * Functions.  The C code runs every statement schema-qualified; the fixed
 * search_path is a second guard against objects a caller puts in front.
 * Functions that touch the tables are SECURITY DEFINER so that a role
 * granted EXECUTE needs no table privilege.  append, which every business
 * transaction calls, is the exception in form only: SECURITY INVOKER, its
 * C code switches to the function's owner itself and pins search_path for
 * every statement it runs, without the cost of a SET on each call.
 */
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

/*
 * outbox.routes: where the background worker and drain_once deliver a
 * topic.  One route per topic and subscription (NULL: the topic's default
 * subscription; HTTP routes deliver only that one): a NOTIFY channel, a command run on a
 * remote PostgreSQL database named by a foreign server (credentials come
 * from the user mapping of the delivering role, never from this table), or
 * an HTTP endpoint (url; ca_file verifies its certificate instead of the
 * system's store; secret_fingerprint tells which secret signs, the secret
 * itself and the route's headers are in outbox.route_secrets).
 * paused_until, consecutive_failures and last_failure are the circuit
 * breaker of a remote route, written by delivery when it changes: calls in
 * a row that found the server unreachable, the pause they caused, and the
 * last such failure.  created_by_role is the role that made the route,
 * whose user mapping delivery uses while that role is still named
 * created_by: by OID, so that a role made later under the name of a
 * dropped one gets nothing of its routes.  0 ('-') says the role was gone
 * already when the extension was updated to 1.2 (the route is not
 * delivered until made again); NULL, in a row written into the table by
 * hand, that the role named created_by delivers it.  A regrole is dumped
 * as the role's name and restored as the role of that name; pg_upgrade
 * keeps role OIDs.  Without a primary key (subscription is NULL for the
 * default subscription), logical replication identifies a row by all of
 * its columns.
 */
CREATE TABLE outbox.routes (
    topic       text        NOT NULL,
    target      text        NOT NULL,
    channel     text,
    server      name,
    command     text,
    created_by  name        NOT NULL DEFAULT CURRENT_USER,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    paused_until          timestamptz,
    consecutive_failures  integer     NOT NULL DEFAULT 0,
    last_failure          text,
    created_by_role       regrole,
    url                   text,
    ca_file               text,
    secret_fingerprint    text,
    subscription          text,
    CONSTRAINT routes_topic_subscription_key UNIQUE NULLS NOT DISTINCT (topic, subscription),
    CONSTRAINT routes_target_check CHECK (
        (target OPERATOR(pg_catalog.=) 'notify' AND channel IS NOT NULL
            AND server IS NULL AND command IS NULL AND url IS NULL)
        OR (target OPERATOR(pg_catalog.=) 'remote' AND channel IS NULL
            AND server IS NOT NULL AND command IS NOT NULL AND url IS NULL)
        OR (target OPERATOR(pg_catalog.=) 'http' AND channel IS NULL
            AND server IS NULL AND command IS NULL AND url IS NOT NULL))
);

ALTER TABLE outbox.routes REPLICA IDENTITY FULL;

COMMENT ON TABLE outbox.routes IS
    'Delivery routes: one per topic and subscription (NULL: the default one), to a NOTIFY channel, to a command on a remote PostgreSQL server, or to an HTTP endpoint.';

SELECT pg_catalog.pg_extension_config_dump('outbox.routes', '');

/*
 * outbox.route_secrets: what an HTTP route signs with and the headers it
 * sends, kept apart from outbox.routes so that roles that may read the
 * routes never read a secret (or a credential in a header).  Only the
 * extension's owner reads this table: it is granted to nobody, not even
 * the database owner.  previous_secret signs beside secret until
 * previous_until, while a secret is rotated.  One row per route, as in
 * outbox.routes: per topic and subscription (NULL: the default one).
 */
CREATE TABLE outbox.route_secrets (
    topic            text        NOT NULL,
    secret           text,
    previous_secret  text,
    previous_until   timestamptz,
    headers          jsonb,
    subscription     text,
    CONSTRAINT route_secrets_topic_subscription_key UNIQUE NULLS NOT DISTINCT (topic, subscription)
);

ALTER TABLE outbox.route_secrets REPLICA IDENTITY FULL;

COMMENT ON TABLE outbox.route_secrets IS
    'The signing secrets and headers of HTTP routes; readable by the extension''s owner only.';

SELECT pg_catalog.pg_extension_config_dump('outbox.route_secrets', '');

/*
 * outbox.route_http_stats: the calls of each HTTP route (per topic and
 * subscription, NULL: the default one) by the class of their answer
 * (calls_failed: no answer at all), and their time, counted once per
 * batch.  Counters, for rates over time; not kept by pg_dump.
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
    subscription           text,
    CONSTRAINT route_http_stats_topic_subscription_key UNIQUE NULLS NOT DISTINCT (topic, subscription)
);

ALTER TABLE outbox.route_http_stats REPLICA IDENTITY FULL;

COMMENT ON TABLE outbox.route_http_stats IS
    'Per HTTP route (topic and subscription, NULL: the default one): calls by class of answer (failed: none), their total time in seconds, and the last call.';

/*
 * Subscriptions.  A topic's messages form a log in position order (seq); a
 * named subscription reads it on its own, with its own leases, attempts,
 * backoff, dead letters and per-key order.  The topic's default
 * subscription (subscription => NULL) keeps its state in outbox.message,
 * as before.
 *
 * outbox.subscription: one row per named subscription, and one with name
 * NULL for each topic whose default subscription was dropped
 * (unsubscribe(topic, NULL), paused_until NULL): then purge does not wait
 * for the default subscription, and claims of it are refused; or paused
 * (pause(topic, NULL), paused_until set): then its claims and its route
 * take nothing until then, and purge still waits for it.  start_seq: the first
 * position a named subscription read.  Claims neither lock nor update the
 * row (a held snapshot would keep every version of it): they take turns
 * on an object lock of (outbox.subscription, sub_id).
 * expired_at: purge found it lagging more than
 * outbox.subscription_max_lag; it holds no message back any more, and its
 * claims are refused.
 *
 * outbox.subscription_frontier: the ranges of its topic's log that each
 * named subscription's claims have read, [from_seq, next_seq), and the
 * read frontier, its newest row: the messages at or after next_seq have
 * not been read yet.  A message below the first row's next_seq is done
 * for the subscription unless it has a row in
 * outbox.subscription_state.  A claim that reads the log inserts the row
 * of its range and deletes the rows below that tell nothing any more; a
 * claim that rolls back leaves a gap between the rows below and above
 * its range, which the next claim reads again.  claimed_at: when that
 * claim ran.  from_seq is NULL for the row a subscription starts with.
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
    'Named subscriptions: independent readers of a topic, each with its start and its pause; a row with name NULL: the topic''s default subscription was dropped (paused_until NULL) or is paused.';

CREATE TABLE outbox.subscription_frontier (
    sub_id        integer     NOT NULL,
    next_seq      bigint      NOT NULL,
    claimed_at    timestamptz,
    from_seq      bigint,
    CONSTRAINT subscription_frontier_pkey PRIMARY KEY (sub_id, next_seq)
);

COMMENT ON TABLE outbox.subscription_frontier IS
    'The ranges of the log each named subscription has read, [from_seq, next_seq); its newest row is the read frontier.';

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

/*
 * outbox.subscription_lease: the messages a claim of a named subscription
 * read from its log and leased at once, one row for each read: seqs, the
 * positions it leased (in order) and still holds, first_seq the first
 * position it leased.  A message leased so, fresh, gets no state row
 * (the head of an ordering key a row of outbox.subscription_key): a claim of a batch writes one row, and the
 * completion of the batch deletes it.  Whatever else becomes of such a
 * message (a failure, an extended or released lease, a lease that ran
 * out) turns the leases of its row into state rows first
 * (src/outbox_subs_lease.c), as the claim would have written them.  A
 * message of seqs is not done for its subscription, whatever its frontier
 * says.
 */
CREATE TABLE outbox.subscription_lease (
    sub_id        integer     NOT NULL,
    first_seq     bigint      NOT NULL,
    lease_owner   text        NOT NULL,
    leased_until  timestamptz NOT NULL,
    seqs          bigint[]    NOT NULL,
    CONSTRAINT subscription_lease_pkey PRIMARY KEY (sub_id, first_seq)
);

-- leases that ran out, by the lease's end first (as subscription_state_lease_idx)
CREATE INDEX subscription_lease_until_idx
    ON outbox.subscription_lease (leased_until, sub_id);

COMMENT ON TABLE outbox.subscription_lease IS
    'Fresh messages that a claim of a named subscription leased at once, one row per read of the log.';

/*
 * outbox.subscription_key: the ordering keys whose head a lease row holds.
 * A fresh message with a key that a claim leases at once (its key had no
 * message not done) goes into the claim's lease row like the others, and
 * its key gets a row here, so that the next messages of the key wait
 * behind it (their state rows blocked) until it is done.  The row goes
 * with the message's lease: at its completion, or when the lease row
 * turns into state rows (then the head's state row holds the key).
 */
CREATE TABLE outbox.subscription_key (
    sub_id        integer NOT NULL,
    ordering_key  text    COLLATE pg_catalog."C" NOT NULL,
    seq           bigint  NOT NULL,
    CONSTRAINT subscription_key_pkey PRIMARY KEY (ordering_key, sub_id)
);

COMMENT ON TABLE outbox.subscription_key IS
    'The ordering keys whose head a lease row of outbox.subscription_lease holds, with its position.';

SELECT pg_catalog.pg_extension_config_dump('outbox.subscription', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_state', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_frontier', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_lease', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_key', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.subscription_id_seq', '');

/*
 * outbox.topic_stats: per topic, the messages due now, delayed (backoff or
 * available_at in the future), leased, dead and delivered, the age of the
 * oldest message not yet delivered, until when the circuit breaker of the
 * topic's route pauses it, and the age again in seconds (for clients that
 * read an interval as an object, and for monitoring).  One pass over the
 * table: no index holds the delivered messages (see message_deferred_idx),
 * and purge keeps the table to the history it is asked to keep.
 *
 * It counts the default subscription's state: a topic whose default
 * subscription was dropped has none, and is not shown (its messages would
 * count as due for ever).
 */
CREATE VIEW outbox.topic_stats AS
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
 * a named one its unread messages, its state rows and its leases by range.
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

CREATE FUNCTION outbox.route_notify(topic text, channel text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_notify'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_notify(text, text) IS
    'Public: deliver topic by pg_notify(channel, envelope); replaces the topic''s route.';

CREATE FUNCTION outbox.route_notify(topic text, channel text, subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_notify'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_notify(text, text, text) IS
    'Public: deliver the subscription of topic (NULL: the default one; a named one is made when missing) by pg_notify(channel, envelope); replaces its route.';

/*
 * route_remote and drain_once run as their caller: the caller's privileges
 * on the foreign server and its user mapping decide the remote connection.
 * They switch to the extension's owner only for statements on the outbox
 * tables.
 */
CREATE FUNCTION outbox.route_remote(topic text, server name, command text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_remote'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_remote(text, name, text) IS
    'Public: deliver topic by running command on the foreign server, with $1 = envelope (jsonb) and $2 = topic; replaces the topic''s route.';

CREATE FUNCTION outbox.route_remote(topic text, server name, command text, subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_remote'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_remote(text, name, text, text) IS
    'Public: deliver the subscription of topic (NULL: the default one; a named one is made when missing) by running command on the foreign server, with $1 = envelope (jsonb) and $2 = topic; replaces its route.';

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

CREATE FUNCTION outbox.check_route(topic text, subscription text)
RETURNS TABLE (step text, ok boolean, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'outbox_check_route'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.check_route(text, text) IS
    'Public: try the route of the subscription of topic (NULL: the default one) as delivery would, delivering nothing.';

CREATE FUNCTION outbox.route_http(topic text, url text, secret text DEFAULT NULL,
                                  headers jsonb DEFAULT NULL, ca_file text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_http'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_http(text, text, text, jsonb, text) IS
    'Public: deliver topic by POSTing each envelope to url, signed with secret (Standard Webhooks), with headers; replaces the topic''s route.';

CREATE FUNCTION outbox.route_http(topic text, url text, secret text, headers jsonb,
                                  ca_file text, subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_route_http'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.route_http(text, text, text, jsonb, text, text) IS
    'Public: deliver the subscription of topic (NULL: the default one; a named one is made when missing) by POSTing each envelope to url, signed with secret (Standard Webhooks), with headers; replaces its route.';

CREATE FUNCTION outbox.rotate_http_secret(topic text, new_secret text,
                                          keep_old_for interval DEFAULT '24 hours')
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_rotate_http_secret'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.rotate_http_secret(text, text, interval) IS
    'Public: sign the HTTP route of topic with new_secret from now on, and with its old secret as well for keep_old_for.';

CREATE FUNCTION outbox.rotate_http_secret(topic text, new_secret text, keep_old_for interval,
                                          subscription text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_rotate_http_secret'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.rotate_http_secret(text, text, interval, text) IS
    'Public: sign the HTTP route of the subscription of topic (NULL: the default one) with new_secret from now on, and with its old secret as well for keep_old_for.';

CREATE FUNCTION outbox.webhook_signature(secret text, msg_id text, ts bigint, body text)
RETURNS text
AS 'MODULE_PATHNAME', 'outbox_webhook_signature'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION outbox.webhook_signature(text, text, bigint, text) IS
    'Public: the webhook-signature (v1) that a route with secret sends for message msg_id at unix time ts with body.';

CREATE FUNCTION outbox.unroute(topic text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_unroute'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.unroute(text) IS
    'Public: remove the route of topic. Returns false when it had none.';

CREATE FUNCTION outbox.unroute(topic text, subscription text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_unroute'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.unroute(text, text) IS
    'Public: remove the route of the subscription of topic (NULL: the default one). Returns false when it had none.';

CREATE FUNCTION outbox.drain_once(topic text DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_drain_once'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION outbox.drain_once(text) IS
    'Public: one round of delivery through the routes of topic, or of every routed topic; returns the number delivered. For pg_cron and other schedulers.';

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
REVOKE ALL ON TABLE outbox.message, outbox.processed, outbox.routes, outbox.topic_stats,
    outbox.route_secrets, outbox.route_http_stats, outbox.subscription,
    outbox.subscription_state, outbox.subscription_frontier, outbox.subscription_lease,
    outbox.subscription_key, outbox.subscription_stats, outbox.claim_position FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;

-- Default privileges the installing role set up must not open the tables
-- or the functions to anyone: only the owner keeps rights.
DO $do$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT g.objects, g.grantee
          FROM (SELECT 'ALL TABLES IN SCHEMA' AS objects, a.grantee, c.relowner AS owner
                  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
                 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace
                UNION ALL
                SELECT 'ALL FUNCTIONS IN SCHEMA', a.grantee, p.proowner
                  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
                 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace
                UNION ALL
                SELECT 'SCHEMA', a.grantee, n.nspowner
                  FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
                 WHERE n.oid OPERATOR(pg_catalog.=) 'outbox'::pg_catalog.regnamespace) g
         WHERE g.grantee OPERATOR(pg_catalog.<>) g.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s outbox FROM %s', r.objects,
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(r.grantee)) END);
    END LOOP;
END
$do$;

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
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE outbox.message, outbox.processed, outbox.routes, outbox.topic_stats, outbox.route_http_stats, outbox.subscription, outbox.subscription_state, outbox.subscription_frontier, outbox.subscription_lease, outbox.subscription_key, outbox.subscription_stats, outbox.claim_position TO %I WITH GRANT OPTION', dbowner);
    END IF;
END
$do$;
