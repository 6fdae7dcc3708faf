/*-------------------------------------------------------------------------
 *
 * outbox_store.c
 *		Every statement that reads or writes outbox.message and
 *		outbox.processed, run through SPI as saved plans.
 *
 * The SQL-callable functions (outbox_api.c), drain_once and the background
 * worker all go through here, so a rule (who may complete, what is due, how
 * a lease expires into death) is written exactly once.  Each statement is
 * prepared on first use and kept for the life of the backend with
 * SPI_keepplan; the plan cache re-plans it if the tables change.  All names
 * are schema-qualified, operators included, so no search_path can change
 * what a statement does.
 *
 * Plans are made with sequential scans switched off, and bitmap scans too
 * except for purge.  A queue table is often empty when a plan is made
 * (after a TRUNCATE, or a VACUUM of a drained queue), and the statistics of
 * an empty table make a scan of the whole table, or a bitmap scan and a
 * sort, look cheapest; that plan would stay until the next ANALYZE while
 * the table grows, and every claim would read every pending row.  The
 * statements are written for their indexes, which are right at any size.
 * Purge finds its rows through two indexes at once, which takes a bitmap
 * scan.  The single-row inserts have no plan to choose and skip this.
 *
 * Callers pass the wall-clock time of the call ("now") so that one call uses
 * one instant for leases, backoff and timestamps, whatever the transaction's
 * start time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_backoff.h"

/* A saved plan and the text it is prepared from */
typedef struct StorePlan
{
	SPIPlanPtr	plan;
	const char *sql;
	int			nargs;
	Oid			argtypes[8];
	bool		values_only;	/* inserts VALUES: reads no table, any plan
								 * is the same */
} StorePlan;

/* The ownership test shared by complete, fail and extend */
#define LEASE_HELD_BY_OWNER \
	"lease_owner OPERATOR(pg_catalog.=) $2 AND leased_until IS NOT NULL " \
	"AND delivered_at IS NULL AND dead_at IS NULL"

/*
 * Claim: one UPDATE over the oldest claimable messages, locked with SKIP
 * LOCKED so that concurrent claims take disjoint rows.  The dead-marking
 * statement above runs first; a candidate whose last allowed lease expired
 * after it (or that it skipped because it was locked) is marked dead here
 * too, instead of being leased again.
 *
 * $1 topic, $2 now, $3 batch size, $4 owner, $5 lease end, $6 max attempts
 */
#define CLAIM_UPDATE \
	"claimed AS (UPDATE outbox.message m SET " \
	" attempts = CASE WHEN m.leased_until IS NOT NULL AND m.attempts OPERATOR(pg_catalog.>=) $6" \
	"   THEN m.attempts ELSE m.attempts OPERATOR(pg_catalog.+) 1 END," \
	" leased_until = CASE WHEN m.leased_until IS NOT NULL AND m.attempts OPERATOR(pg_catalog.>=) $6" \
	"   THEN NULL ELSE $5 END," \
	" lease_owner = CASE WHEN m.leased_until IS NOT NULL AND m.attempts OPERATOR(pg_catalog.>=) $6" \
	"   THEN m.lease_owner ELSE $4 END," \
	" dead_at = CASE WHEN m.leased_until IS NOT NULL AND m.attempts OPERATOR(pg_catalog.>=) $6" \
	"   THEN $2 END," \
	" last_error = CASE WHEN m.leased_until IS NOT NULL AND m.attempts OPERATOR(pg_catalog.>=) $6" \
	"   THEN pg_catalog.format('lease of owner \"%s\" expired on attempt %s of %s', m.lease_owner, m.attempts, $6)" \
	"   ELSE m.last_error END " \
	"WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY("

#define CLAIM_DUE \
	" c.delivered_at IS NULL AND c.dead_at IS NULL" \
	" AND c.available_at OPERATOR(pg_catalog.<=) $2" \
	" AND (c.leased_until IS NULL OR c.leased_until OPERATOR(pg_catalog.<=) $2)"

#define CLAIM_END \
	")) RETURNING m.*) " \
	"SELECT * FROM claimed ORDER BY available_at, id"

/*
 * A claim across all topics has no index of its own (one would cost every
 * append and every claim an index entry more): it takes the oldest due
 * messages of each topic from the topic's index, the topics found by
 * skipping through that index, keeps twice the batch of the oldest of them
 * all, and locks the first of those that no other claim holds.  So two
 * claims across all topics at once share the work, and a third may come
 * out short; claims of one topic each scale without that limit.
 */
#define CLAIM_TOPICS \
	"topics(topic) AS (" \
	" (SELECT c.topic FROM outbox.message c" \
	"  WHERE c.delivered_at IS NULL AND c.dead_at IS NULL ORDER BY c.topic LIMIT 1)" \
	" UNION ALL" \
	" SELECT (SELECT c.topic FROM outbox.message c" \
	"  WHERE c.topic OPERATOR(pg_catalog.>) t.topic" \
	"  AND c.delivered_at IS NULL AND c.dead_at IS NULL ORDER BY c.topic LIMIT 1)" \
	" FROM topics t WHERE t.topic IS NOT NULL)"

/*
 * Before a claim: every message of the topic(s) whose lease expired on its
 * last allowed attempt becomes dead, so it is never delivered once more.
 * Leased messages are found through the small partial index of leases.
 *
 * $1 topic, $2 now, $3 max attempts
 */
#define DEAD_MARK_SET \
	"UPDATE outbox.message m SET dead_at = $2, leased_until = NULL," \
	" last_error = pg_catalog.format('lease of owner \"%s\" expired on attempt %s of %s'," \
	"   m.lease_owner, m.attempts, $3) " \
	"WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	" SELECT c.id FROM outbox.message c" \
	" WHERE c.leased_until OPERATOR(pg_catalog.<=) $2" \
	" AND c.leased_until OPERATOR(pg_catalog.>) '-infinity'::pg_catalog.timestamptz" \
	" AND c.attempts OPERATOR(pg_catalog.>=) $3" \
	" AND c.delivered_at IS NULL AND c.dead_at IS NULL"

static StorePlan plan_dead_mark_topic = {
	NULL,
	DEAD_MARK_SET " AND c.topic OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED))",
	3, {TEXTOID, TIMESTAMPTZOID, INT4OID}
};

static StorePlan plan_dead_mark_any = {
	NULL,
	DEAD_MARK_SET " FOR UPDATE SKIP LOCKED))",
	3, {TEXTOID, TIMESTAMPTZOID, INT4OID}
};

/*
 * Claim for a transactional target (NOTIFY): the messages are marked
 * delivered by the claim itself, one write each, because the delivery
 * commits or rolls back with this very transaction.  Expired last attempts
 * are left to the dead-marking statement.
 *
 * $1 topic, $2 now, $3 batch size, $4 owner, $5 max attempts
 */
static StorePlan plan_claim_delivered = {
	NULL,
	"WITH claimed AS (UPDATE outbox.message m SET"
	" attempts = m.attempts OPERATOR(pg_catalog.+) 1, lease_owner = $4,"
	" leased_until = NULL, delivered_at = $2 "
	"WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY("
	" SELECT c.id FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1"
	" AND c.delivered_at IS NULL AND c.dead_at IS NULL"
	" AND c.available_at OPERATOR(pg_catalog.<=) $2"
	" AND (c.leased_until IS NULL OR (c.leased_until OPERATOR(pg_catalog.<=) $2"
	"      AND c.attempts OPERATOR(pg_catalog.<) $5))"
	" ORDER BY c.available_at, c.id LIMIT $3"
	" FOR UPDATE SKIP LOCKED)) "
	"RETURNING m.id, m.topic, m.event_type, m.created_at, m.payload, m.attempts,"
	" m.leased_until, m.available_at) "
	"SELECT id, topic, event_type, created_at, payload, attempts, leased_until, available_at "
	"FROM claimed ORDER BY available_at, id",
	5, {TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID}
};

/* Take back a delivery of plan_claim_delivered that could not be made */
static StorePlan plan_undeliver = {
	NULL,
	"UPDATE outbox.message SET delivered_at = NULL, leased_until = $3 "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND lease_owner OPERATOR(pg_catalog.=) $2"
	" AND delivered_at IS NOT NULL",
	3, {UUIDOID, TEXTOID, TIMESTAMPTZOID}
};

/* A new id cannot conflict: no ON CONFLICT, no speculative insertion */
static StorePlan plan_append_new = {
	NULL,
	"INSERT INTO outbox.message (id, topic, event_type, payload, created_at, available_at) "
	"VALUES ($1, $2, $3, $4, $5, $6)",
	6, {UUIDOID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID}, true
};

static StorePlan plan_append = {
	NULL,
	"INSERT INTO outbox.message (id, topic, event_type, payload, created_at, available_at) "
	"VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
	6, {UUIDOID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID}, true
};

static StorePlan plan_append_same = {
	NULL,
	"SELECT topic OPERATOR(pg_catalog.=) $2 AND event_type OPERATOR(pg_catalog.=) $3"
	" AND payload OPERATOR(pg_catalog.=) $4 "
	"FROM outbox.message WHERE id OPERATOR(pg_catalog.=) $1",
	4, {UUIDOID, TEXTOID, TEXTOID, JSONBOID}
};

static StorePlan plan_append_batch = {
	NULL,
	"INSERT INTO outbox.message (id, topic, event_type, payload, created_at, available_at) "
	"SELECT u.id, $2, $3, u.payload, $5, $6 "
	"FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($4)) WITH ORDINALITY AS u(id, payload, n) "
	"ORDER BY u.n",
	6, {UUIDARRAYOID, TEXTOID, TEXTOID, JSONBARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static StorePlan plan_claim_topic = {
	NULL,
	"WITH " CLAIM_UPDATE
	" SELECT c.id FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1 AND " CLAIM_DUE
	" ORDER BY c.available_at, c.id LIMIT $3 FOR UPDATE SKIP LOCKED" CLAIM_END,
	6, {TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID}
};

static StorePlan plan_claim_any = {
	NULL,
	"WITH RECURSIVE " CLAIM_TOPICS ", " CLAIM_UPDATE
	" SELECT c.id FROM outbox.message c"
	" WHERE c.id OPERATOR(pg_catalog.=) ANY (ARRAY("
	"  SELECT x.id FROM topics t, LATERAL ("
	"   SELECT o.id, o.available_at FROM outbox.message o"
	"   WHERE o.topic OPERATOR(pg_catalog.=) t.topic"
	"   AND o.delivered_at IS NULL AND o.dead_at IS NULL"
	"   AND o.available_at OPERATOR(pg_catalog.<=) $2"
	"   AND (o.leased_until IS NULL OR o.leased_until OPERATOR(pg_catalog.<=) $2)"
	"   ORDER BY o.available_at, o.id LIMIT $3 OPERATOR(pg_catalog.*) 2) x"
	"  WHERE t.topic IS NOT NULL"
	"  ORDER BY x.available_at, x.id LIMIT $3 OPERATOR(pg_catalog.*) 2))"
	" AND " CLAIM_DUE
	" ORDER BY c.available_at, c.id LIMIT $3 FOR UPDATE SKIP LOCKED" CLAIM_END,
	6, {TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID}
};

static StorePlan plan_complete = {
	NULL,
	"UPDATE outbox.message SET delivered_at = $3, leased_until = NULL "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND " LEASE_HELD_BY_OWNER,
	3, {UUIDOID, TEXTOID, TIMESTAMPTZOID}
};

static StorePlan plan_complete_many = {
	NULL,
	"UPDATE outbox.message SET delivered_at = $3, leased_until = NULL "
	"WHERE id OPERATOR(pg_catalog.=) ANY ($1) AND " LEASE_HELD_BY_OWNER,
	3, {UUIDARRAYOID, TEXTOID, TIMESTAMPTZOID}
};

static StorePlan plan_fail_lock = {
	NULL,
	"SELECT attempts FROM outbox.message "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND " LEASE_HELD_BY_OWNER " FOR UPDATE",
	2, {UUIDOID, TEXTOID}
};

/* $3 is the next available_at (NULL when dead), $4 dead_at (NULL unless dead) */
static StorePlan plan_fail_update = {
	NULL,
	"UPDATE outbox.message SET leased_until = NULL, last_error = $2,"
	" available_at = COALESCE($3, available_at), dead_at = $4 "
	"WHERE id OPERATOR(pg_catalog.=) $1",
	4, {UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static StorePlan plan_extend = {
	NULL,
	"UPDATE outbox.message SET leased_until = $3 "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND " LEASE_HELD_BY_OWNER,
	3, {UUIDOID, TEXTOID, TIMESTAMPTZOID}
};

static StorePlan plan_retry_dead = {
	NULL,
	"UPDATE outbox.message SET dead_at = NULL, attempts = 0, available_at = $2,"
	" leased_until = NULL "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND dead_at IS NOT NULL AND delivered_at IS NULL",
	2, {UUIDOID, TIMESTAMPTZOID}
};

static StorePlan plan_retry_dead_topic = {
	NULL,
	"UPDATE outbox.message SET dead_at = NULL, attempts = 0, available_at = $2,"
	" leased_until = NULL "
	"WHERE topic OPERATOR(pg_catalog.=) $1 AND dead_at IS NOT NULL AND delivered_at IS NULL",
	2, {TEXTOID, TIMESTAMPTZOID}
};

/*
 * Purge walks the finished rows once with a cursor and deletes them by
 * ctid in chunks; the delete re-checks the horizon, so a row revived by
 * retry_dead in the meantime stays.
 */
static StorePlan plan_purge_scan = {
	NULL,
	"SELECT ctid FROM outbox.message "
	"WHERE delivered_at OPERATOR(pg_catalog.<) $1 OR dead_at OPERATOR(pg_catalog.<) $1",
	1, {TIMESTAMPTZOID}
};

static StorePlan plan_purge_delete = {
	NULL,
	"DELETE FROM outbox.message WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)"
	" AND (delivered_at OPERATOR(pg_catalog.<) $2 OR dead_at OPERATOR(pg_catalog.<) $2)",
	2, {TIDARRAYOID, TIMESTAMPTZOID}
};

static StorePlan plan_purge_marker_scan = {
	NULL,
	"SELECT ctid FROM outbox.processed WHERE processed_at OPERATOR(pg_catalog.<) $1",
	1, {TIMESTAMPTZOID}
};

static StorePlan plan_purge_marker_delete = {
	NULL,
	"DELETE FROM outbox.processed WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)"
	" AND processed_at OPERATOR(pg_catalog.<) $2",
	2, {TIDARRAYOID, TIMESTAMPTZOID}
};

static StorePlan plan_consume_once = {
	NULL,
	"INSERT INTO outbox.processed (consumer, message_id, processed_at) "
	"VALUES ($1, $2, $3) ON CONFLICT (consumer, message_id) DO NOTHING",
	3, {TEXTOID, UUIDOID, TIMESTAMPTZOID}, true
};

static StorePlan plan_envelope_by_id = {
	NULL,
	"SELECT id, event_type, created_at, payload FROM outbox.message "
	"WHERE id OPERATOR(pg_catalog.=) $1",
	1, {UUIDOID}
};

/* Give back leases not used: the attempt did not happen */
static StorePlan plan_release = {
	NULL,
	"UPDATE outbox.message SET leased_until = NULL,"
	" attempts = pg_catalog.int4larger(attempts OPERATOR(pg_catalog.-) 1, 0) "
	"WHERE id OPERATOR(pg_catalog.=) ANY ($1) AND " LEASE_HELD_BY_OWNER,
	2, {UUIDARRAYOID, TEXTOID}
};

/*
 * When the next message of a topic becomes due: the first one delayed into
 * the future (first entry after now in the due index), or the end of the
 * earliest valid lease (a short range: leased messages are due ones).
 */
static StorePlan plan_next_due = {
	NULL,
	"SELECT LEAST("
	" (SELECT pg_catalog.min(available_at) FROM outbox.message"
	"  WHERE topic OPERATOR(pg_catalog.=) $1 AND delivered_at IS NULL AND dead_at IS NULL"
	"  AND available_at OPERATOR(pg_catalog.>) $2),"
	" (SELECT pg_catalog.min(leased_until) FROM outbox.message"
	"  WHERE topic OPERATOR(pg_catalog.=) $1 AND delivered_at IS NULL AND dead_at IS NULL"
	"  AND available_at OPERATOR(pg_catalog.<=) $2 AND leased_until OPERATOR(pg_catalog.>) $2"
	"  AND leased_until OPERATOR(pg_catalog.>) '-infinity'::pg_catalog.timestamptz))",
	2, {TEXTOID, TIMESTAMPTZOID}
};

static StorePlan plan_route_set = {
	NULL,
	"INSERT INTO outbox.routes (topic, target, channel, server, command, created_by, created_at) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7) "
	"ON CONFLICT (topic) DO UPDATE SET target = excluded.target, channel = excluded.channel,"
	" server = excluded.server, command = excluded.command,"
	" created_by = excluded.created_by, created_at = excluded.created_at",
	7, {TEXTOID, TEXTOID, TEXTOID, NAMEOID, TEXTOID, NAMEOID, TIMESTAMPTZOID}
};

static StorePlan plan_route_delete = {
	NULL,
	"DELETE FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

static StorePlan plan_routed_topics = {
	NULL,
	"SELECT topic FROM outbox.routes",
	0, {InvalidOid}
};

static StorePlan plan_route_list = {
	NULL,
	"SELECT topic, target, channel, server, command, created_by FROM outbox.routes "
	"WHERE $1 IS NULL OR topic OPERATOR(pg_catalog.=) $1 ORDER BY topic",
	1, {TEXTOID}
};

/* Rows deleted per statement by purge */
#define PURGE_CHUNK		1000

static SPIPlanPtr obx_plan(StorePlan *p);
static int	obx_index_plans(bool bitmap);
static int	obx_exec(StorePlan *p, Datum *values, const char *nulls,
					 bool read_only, long count, int expect);
static void obx_connect(void);
static void obx_finish(void);
static int64 obx_purge_table(StorePlan *scan, StorePlan *del,
							 TimestampTz horizon, int64 max_rows);

/* Prepare a statement on first use and keep it for the backend's life. */
static SPIPlanPtr
obx_plan(StorePlan *p)
{
	if (p->plan == NULL)
	{
		SPIPlanPtr	plan;

		/*
		 * A generic plan, chosen once: the statements are short and run
		 * often, and re-planning them for each set of values would cost more
		 * than running them.
		 */
		plan = SPI_prepare_cursor(p->sql, p->nargs, p->argtypes,
								  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 p->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		p->plan = plan;
	}
	return p->plan;
}

/*
 * Switch off the plans that read a whole table (and bitmap scans unless
 * bitmap), for the statement about to run and for its planning, which
 * happens inside its execution when the plan cache finds the plan missing
 * or stale.  Returns the GUC nest level to pass to AtEOXact_GUC(true, ...)
 * afterwards; an error unwinds it with the (sub)transaction.
 */
static int
obx_index_plans(bool bitmap)
{
	int			nestlevel = NewGUCNestLevel();

	(void) set_config_option("enable_seqscan", "off", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (!bitmap)
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

/* Run a saved statement and check that SPI answered with the expected code. */
static int
obx_exec(StorePlan *p, Datum *values, const char *nulls, bool read_only,
		 long count, int expect)
{
	int			ret;

	if (p->values_only)
		ret = SPI_execute_plan(obx_plan(p), values, nulls, read_only, count);
	else
	{
		int			nestlevel = obx_index_plans(false);

		ret = SPI_execute_plan(obx_plan(p), values, nulls, read_only, count);
		AtEOXact_GUC(true, nestlevel);
	}
	if (ret != expect)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 p->sql, SPI_result_code_string(ret));
	return ret;
}

static void
obx_connect(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

static void
obx_finish(void)
{
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * Insert one message.  An id the caller chose may exist already: a repeat
 * with the same content is accepted (idempotent append), the same id with
 * other content is an error.  A freshly generated id (is_new) cannot
 * conflict and takes the plain insert.
 *
 * ON CONFLICT DO NOTHING waits for a concurrent insert of the same id, so
 * two open transactions appending the same message end with one row and no
 * error.  If the conflicting row disappears before it can be compared (a
 * concurrent purge), the insert is simply tried again.
 */
void
StoreAppend(text *topic, text *event_type, Jsonb *payload, pg_uuid_t *id,
			bool is_new, TimestampTz available_at)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int			tries;

	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(topic);
	values[2] = PointerGetDatum(event_type);
	values[3] = JsonbPGetDatum(payload);
	values[4] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[5] = TimestampTzGetDatum(available_at);

	obx_connect();
	if (is_new)
	{
		obx_exec(&plan_append_new, values, nulls, false, 0, SPI_OK_INSERT);
		obx_finish();
		return;
	}
	for (tries = 0;; tries++)
	{
		bool		isnull;
		Datum		same;

		obx_exec(&plan_append, values, nulls, false, 0, SPI_OK_INSERT);
		if (SPI_processed == 1)
			break;

		/* the id exists: an idempotent repeat, or a conflict */
		obx_exec(&plan_append_same, values, nulls, false, 1, SPI_OK_SELECT);
		if (SPI_processed == 0)
		{
			if (tries < 3)
				continue;
			elog(ERROR, "message %s vanished during append",
				 DatumGetCString(DirectFunctionCall1(uuid_out, values[0])));
		}
		same = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
							 &isnull);
		if (isnull || !DatumGetBool(same))
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("message \"%s\" already exists with a different topic, type or payload",
							DatumGetCString(DirectFunctionCall1(uuid_out, values[0]))),
					 errdetail("Appending an existing id again is accepted only with the same topic, type and payload."),
					 errhint("Use a new id for a new event.")));
		break;
	}
	obx_finish();
}

/*
 * Insert one message per element of payloads, with the ids given in ids,
 * in array order.
 */
void
StoreAppendBatch(text *topic, text *event_type, Datum ids, Datum payloads,
				 TimestampTz available_at)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = ids;
	values[1] = PointerGetDatum(topic);
	values[2] = PointerGetDatum(event_type);
	values[3] = payloads;
	values[4] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[5] = TimestampTzGetDatum(available_at);

	obx_connect();
	obx_exec(&plan_append_batch, values, nulls, false, 0, SPI_OK_INSERT);
	obx_finish();
}

/* Copy the fields delivery needs out of a claimed row, in the caller's context. */
static ClaimedMessage *
obx_claimed_message(Datum *vals, bool *isnull, const int *attno)
{
	ClaimedMessage *m = palloc(sizeof(ClaimedMessage));

	memcpy(&m->id, DatumGetUUIDP(vals[attno[0]]), sizeof(pg_uuid_t));
	m->topic = DatumGetTextPCopy(vals[attno[1]]);
	m->event_type = DatumGetTextPCopy(vals[attno[2]]);
	m->created_at = DatumGetTimestampTz(vals[attno[3]]);
	m->payload = DatumGetJsonbPCopy(vals[attno[4]]);
	m->attempts = DatumGetInt32(vals[attno[5]]);
	m->leased_until = isnull[attno[6]] ? DT_NOBEGIN :
		DatumGetTimestampTz(vals[attno[6]]);
	return m;
}

/*
 * Lease up to req->batch_size due messages, oldest first.  The rows go into
 * store (whose descriptor is tupdesc, the row type of outbox.message) when
 * store is given, and as ClaimedMessages onto *messages (allocated in the
 * caller's memory context) when messages is given.  Candidates that turn
 * out dead do not count against the batch: the claim goes on with the
 * remainder until it has a full batch or nothing is due.  Returns the
 * number of leased messages.
 */
int
StoreClaim(const ClaimRequest *req, TupleDesc tupdesc, Tuplestorestate *store,
		   List **messages)
{
	static const char *const cols[] = {"id", "topic", "event_type", "created_at",
	"payload", "attempts", "leased_until", "dead_at"};
	StorePlan  *p = req->topic ? &plan_claim_topic : &plan_claim_any;
	StorePlan  *dm = req->topic ? &plan_dead_mark_topic : &plan_dead_mark_any;
	MemoryContext caller = CurrentMemoryContext;
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int			leased = 0;

	values[0] = req->topic ? PointerGetDatum(req->topic) : (Datum) 0;
	nulls[0] = req->topic ? ' ' : 'n';
	values[1] = TimestampTzGetDatum(req->now);
	values[3] = PointerGetDatum(req->owner);
	values[4] = TimestampTzGetDatum(req->now +
									(int64) req->lease_seconds * USECS_PER_SEC);
	values[5] = Int32GetDatum(req->max_attempts);

	obx_connect();

	/* first, the expired last attempts of the topic(s) */
	values[2] = values[5];
	obx_exec(dm, values, nulls, false, 0, SPI_OK_UPDATE);

	for (;;)
	{
		TupleDesc	desc;
		int			attno[lengthof(cols)];
		int			dead = 0;
		uint64		i;
		uint64		n;
		int			c;

		values[2] = Int32GetDatum(req->batch_size - leased);
		obx_exec(p, values, nulls, false, 0, SPI_OK_SELECT);

		n = SPI_processed;
		desc = SPI_tuptable->tupdesc;
		if (desc->natts > OUTBOX_MESSAGE_MAX_COLS ||
			(store && desc->natts != tupdesc->natts))
			elog(ERROR, "outbox.message has an unexpected shape (%d columns)",
				 desc->natts);
		for (c = 0; c < lengthof(cols); c++)
		{
			attno[c] = SPI_fnumber(desc, cols[c]) - 1;
			if (attno[c] < 0)
				elog(ERROR, "outbox.message has no column %s", cols[c]);
		}

		for (i = 0; i < n; i++)
		{
			Datum		vals[OUTBOX_MESSAGE_MAX_COLS];
			bool		isnull[OUTBOX_MESSAGE_MAX_COLS];

			heap_deform_tuple(SPI_tuptable->vals[i], desc, vals, isnull);
			if (!isnull[attno[7]])
			{
				dead++;
				continue;
			}
			if (store)
				tuplestore_putvalues(store, tupdesc, vals, isnull);
			if (messages)
			{
				MemoryContext spi = MemoryContextSwitchTo(caller);

				*messages = lappend(*messages,
									obx_claimed_message(vals, isnull, attno));
				MemoryContextSwitchTo(spi);
			}
			leased++;
		}
		SPI_freetuptable(SPI_tuptable);

		/* stop when the batch is full, or the last round found no dead one */
		if (dead == 0 || leased >= req->batch_size)
			break;
	}
	obx_finish();
	return leased;
}

/*
 * Mark delivered the messages of ids (a uuid, or a uuid[] when many) that
 * owner holds.  Returns the number marked.
 */
int64
StoreComplete(Datum ids, bool many, text *owner, TimestampTz now)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	int64		done;

	values[0] = ids;
	values[1] = PointerGetDatum(owner);
	values[2] = TimestampTzGetDatum(now);

	obx_connect();
	obx_exec(many ? &plan_complete_many : &plan_complete,
			 values, nulls, false, 0, SPI_OK_UPDATE);
	done = SPI_processed;
	obx_finish();
	return done;
}

/*
 * Record a failed delivery by the lease owner.  The lease ends; the message
 * waits for its backoff delay, or is dead when it used its last attempt.
 * Returns false, changing nothing, when owner does not hold the message.
 */
bool
StoreFail(pg_uuid_t *id, text *owner, text *error, TimestampTz now)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		isnull;
	int32		attempts;

	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(owner);

	obx_connect();
	obx_exec(&plan_fail_lock, values, nulls, false, 1, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		obx_finish();
		return false;
	}
	attempts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));

	values[1] = PointerGetDatum(error);
	if (attempts >= outbox_max_attempts)
	{
		nulls[2] = 'n';
		values[3] = TimestampTzGetDatum(now);
	}
	else
	{
		int64		delay = BackoffDelaySeconds(attempts, outbox_backoff_seconds,
												outbox_backoff_max_seconds);

		values[2] = TimestampTzGetDatum(now + delay * USECS_PER_SEC);
		nulls[3] = 'n';
	}
	obx_exec(&plan_fail_update, values, nulls, false, 0, SPI_OK_UPDATE);
	obx_finish();
	return true;
}

/* Push the lease that owner holds on id to now + lease_seconds. */
bool
StoreExtend(pg_uuid_t *id, text *owner, int lease_seconds, TimestampTz now)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		done;

	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(owner);
	values[2] = TimestampTzGetDatum(now + (int64) lease_seconds * USECS_PER_SEC);

	obx_connect();
	obx_exec(&plan_extend, values, nulls, false, 0, SPI_OK_UPDATE);
	done = (SPI_processed > 0);
	obx_finish();
	return done;
}

/*
 * Revive dead messages: the one with this id, or (id NULL) every dead one
 * of topic.  Returns how many were revived.
 */
int64
StoreRetryDead(pg_uuid_t *id, text *topic, TimestampTz now)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int64		done;

	values[0] = id ? UUIDPGetDatum(id) : PointerGetDatum(topic);
	values[1] = TimestampTzGetDatum(now);

	obx_connect();
	obx_exec(id ? &plan_retry_dead : &plan_retry_dead_topic,
			 values, nulls, false, 0, SPI_OK_UPDATE);
	done = SPI_processed;
	obx_finish();
	return done;
}

/*
 * Delete at most max_rows (all when negative) rows found by the cursor
 * statement scan, in chunks of PURGE_CHUNK through the statement del.
 */
static int64
obx_purge_table(StorePlan *scan, StorePlan *del, TimestampTz horizon,
				int64 max_rows)
{
	Portal		portal;
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int64		deleted = 0;
	int64		seen = 0;
	int			nestlevel;

	values[0] = TimestampTzGetDatum(horizon);
	nestlevel = obx_index_plans(true);
	portal = SPI_cursor_open(NULL, obx_plan(scan), values, nulls, true);
	AtEOXact_GUC(true, nestlevel);

	for (;;)
	{
		long		want = PURGE_CHUNK;
		Datum	   *tids;
		ArrayType  *arr;
		uint64		i;
		uint64		n;

		if (max_rows >= 0 && max_rows - seen < want)
			want = (long) (max_rows - seen);
		if (want <= 0)
			break;

		SPI_cursor_fetch(portal, true, want);
		n = SPI_processed;
		if (n == 0)
			break;
		seen += n;

		tids = palloc(sizeof(Datum) * n);
		for (i = 0; i < n; i++)
		{
			bool		isnull;

			tids[i] = SPI_getbinval(SPI_tuptable->vals[i],
									SPI_tuptable->tupdesc, 1, &isnull);
		}
		arr = construct_array(tids, (int) n, TIDOID, sizeof(ItemPointerData),
							  false, TYPALIGN_SHORT);

		values[0] = PointerGetDatum(arr);
		values[1] = TimestampTzGetDatum(horizon);
		obx_exec(del, values, nulls, false, 0, SPI_OK_DELETE);
		deleted += SPI_processed;

		SPI_freetuptable(SPI_tuptable);
		pfree(arr);
		pfree(tids);
		values[0] = TimestampTzGetDatum(horizon);
	}
	SPI_cursor_close(portal);
	return deleted;
}

/*
 * Delete delivered and dead messages finished before horizon, at most
 * max_rows of them (all when negative), and the consume_once markers older
 * than horizon (as many).  Returns the number of messages deleted.
 */
int64
StorePurge(TimestampTz horizon, int64 max_rows)
{
	int64		deleted;

	obx_connect();
	deleted = obx_purge_table(&plan_purge_scan, &plan_purge_delete,
							  horizon, max_rows);
	(void) obx_purge_table(&plan_purge_marker_scan, &plan_purge_marker_delete,
						   horizon, max_rows);
	obx_finish();
	return deleted;
}

/*
 * Record that consumer processed message_id.  Returns true when the marker
 * is new.  A concurrent call for the same pair waits for this transaction:
 * it gets false if this one commits and true if it rolls back.
 */
bool
StoreConsumeOnce(text *consumer, pg_uuid_t *message_id, TimestampTz now)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		inserted;

	values[0] = PointerGetDatum(consumer);
	values[1] = UUIDPGetDatum(message_id);
	values[2] = TimestampTzGetDatum(now);

	obx_connect();
	obx_exec(&plan_consume_once, values, nulls, false, 0, SPI_OK_INSERT);
	inserted = (SPI_processed == 1);
	obx_finish();
	return inserted;
}

/* The envelope of the message with this id, or NULL; palloc'd by the caller. */
Jsonb *
StoreEnvelopeById(pg_uuid_t *id)
{
	Datum		values[1];
	Jsonb	   *result = NULL;
	MemoryContext caller = CurrentMemoryContext;

	values[0] = UUIDPGetDatum(id);

	obx_connect();
	obx_exec(&plan_envelope_by_id, values, NULL, true, 1, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		pg_uuid_t  *mid;
		text	   *type;
		TimestampTz created;
		Jsonb	   *payload;
		MemoryContext spi = MemoryContextSwitchTo(caller);

		mid = DatumGetUUIDP(SPI_getbinval(tup, desc, 1, &isnull));
		type = DatumGetTextPP(SPI_getbinval(tup, desc, 2, &isnull));
		created = DatumGetTimestampTz(SPI_getbinval(tup, desc, 3, &isnull));
		payload = DatumGetJsonbP(SPI_getbinval(tup, desc, 4, &isnull));
		result = BuildEnvelope(mid, type, created, payload);
		MemoryContextSwitchTo(spi);
	}
	obx_finish();
	return result;
}

/*
 * Give back the leases owner holds on ids without counting the attempt:
 * the messages are due again at once.  Returns how many were released.
 */
int64
StoreRelease(Datum ids, text *owner)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int64		done;

	values[0] = ids;
	values[1] = PointerGetDatum(owner);

	obx_connect();
	obx_exec(&plan_release, values, nulls, false, 0, SPI_OK_UPDATE);
	done = SPI_processed;
	obx_finish();
	return done;
}

/*
 * The earliest instant after now at which a message of topic becomes due,
 * or DT_NOEND when none will without another append.
 */
TimestampTz
StoreNextDue(text *topic, TimestampTz now)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	TimestampTz next = DT_NOEND;
	bool		isnull;
	Datum		d;

	values[0] = PointerGetDatum(topic);
	values[1] = TimestampTzGetDatum(now);

	obx_connect();
	obx_exec(&plan_next_due, values, nulls, true, 1, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		next = DatumGetTimestampTz(d);
	obx_finish();
	return next;
}

/* Create or replace the route of topic. */
void
StoreRouteSet(text *topic, const char *target, text *channel,
			  const char *server, text *command, Oid creator)
{
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	NameData	server_name;
	NameData	creator_name;

	values[0] = PointerGetDatum(topic);
	values[1] = CStringGetTextDatum(target);
	if (channel)
		values[2] = PointerGetDatum(channel);
	else
		nulls[2] = 'n';
	if (server)
	{
		namestrcpy(&server_name, server);
		values[3] = NameGetDatum(&server_name);
	}
	else
		nulls[3] = 'n';
	if (command)
		values[4] = PointerGetDatum(command);
	else
		nulls[4] = 'n';
	namestrcpy(&creator_name, GetUserNameFromId(creator, false));
	values[5] = NameGetDatum(&creator_name);
	values[6] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());

	obx_connect();
	obx_exec(&plan_route_set, values, nulls, false, 0, SPI_OK_INSERT);
	obx_finish();
}

/* Remove the route of topic; false when there was none. */
bool
StoreRouteDelete(text *topic)
{
	Datum		values[1];
	bool		done;

	values[0] = PointerGetDatum(topic);

	obx_connect();
	obx_exec(&plan_route_delete, values, NULL, false, 0, SPI_OK_DELETE);
	done = (SPI_processed > 0);
	obx_finish();
	return done;
}

/* The routes (of topic, or all when NULL), in topic order, as OutboxRoutes. */
List *
StoreRouteList(text *topic)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		values[1];
	char		nulls[1] = {' '};
	List	   *routes = NIL;
	uint64		i;

	values[0] = topic ? PointerGetDatum(topic) : (Datum) 0;
	nulls[0] = topic ? ' ' : 'n';

	obx_connect();
	obx_exec(&plan_route_list, values, nulls, true, 0, SPI_OK_SELECT);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(caller);
		OutboxRoute *r = palloc0(sizeof(OutboxRoute));
		char	   *target;

		r->topic = SPI_getvalue(tup, desc, 1);
		target = SPI_getvalue(tup, desc, 2);
		r->remote = (strcmp(target, "remote") == 0);
		r->channel = SPI_getvalue(tup, desc, 3);
		r->server = SPI_getvalue(tup, desc, 4);
		r->command = SPI_getvalue(tup, desc, 5);
		r->created_by = SPI_getvalue(tup, desc, 6);
		routes = lappend(routes, r);
		MemoryContextSwitchTo(spi);
	}
	obx_finish();
	return routes;
}

/*
 * Claim a batch of req->topic for a transactional target and mark it
 * delivered in the same statement; the messages go onto *messages, oldest
 * first.  The caller delivers them in this transaction, and takes back with
 * StoreUndeliver any it could not.  Returns the number claimed.
 */
int
StoreClaimDelivered(const ClaimRequest *req, List **messages)
{
	static const char *const cols[] = {"id", "topic", "event_type", "created_at",
	"payload", "attempts", "leased_until"};
	MemoryContext caller = CurrentMemoryContext;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			attno[lengthof(cols)];
	uint64		i;
	int			n;
	int			c;

	Assert(req->topic != NULL);
	values[0] = PointerGetDatum(req->topic);
	values[1] = TimestampTzGetDatum(req->now);
	values[2] = Int32GetDatum(req->max_attempts);

	obx_connect();
	obx_exec(&plan_dead_mark_topic, values, nulls, false, 0, SPI_OK_UPDATE);

	values[2] = Int32GetDatum(req->batch_size);
	values[3] = PointerGetDatum(req->owner);
	values[4] = Int32GetDatum(req->max_attempts);
	obx_exec(&plan_claim_delivered, values, nulls, false, 0, SPI_OK_SELECT);

	for (c = 0; c < lengthof(cols); c++)
		attno[c] = SPI_fnumber(SPI_tuptable->tupdesc, cols[c]) - 1;
	n = (int) SPI_processed;
	for (i = 0; i < SPI_processed; i++)
	{
		Datum		vals[OUTBOX_MESSAGE_MAX_COLS];
		bool		isnull[OUTBOX_MESSAGE_MAX_COLS];
		MemoryContext spi;
		ClaimedMessage *m;

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, vals, isnull);
		spi = MemoryContextSwitchTo(caller);
		m = obx_claimed_message(vals, isnull, attno);
		*messages = lappend(*messages, m);
		MemoryContextSwitchTo(spi);
	}
	obx_finish();
	return n;
}

/*
 * Take back the delivery of a message claimed by StoreClaimDelivered that
 * could not be delivered: it is leased to owner until lease_end again, so
 * that StoreFail can record the failure.
 */
void
StoreUndeliver(pg_uuid_t *id, text *owner, TimestampTz lease_end)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(owner);
	values[2] = TimestampTzGetDatum(lease_end);

	obx_connect();
	obx_exec(&plan_undeliver, values, nulls, false, 0, SPI_OK_UPDATE);
	obx_finish();
}

/*
 * The routed topics, as C strings in the current memory context, read with
 * the latest snapshot so that a route committed after this transaction's
 * snapshot is seen (the caller caches the list across transactions).  An
 * extension without its routes table yields an empty list.
 */
List *
StoreRoutedTopics(void)
{
	MemoryContext caller = CurrentMemoryContext;
	List	   *topics = NIL;
	uint64		i;
	int			ret;

	if (!OidIsValid(get_namespace_oid("outbox", true)))
		return NIL;

	obx_connect();
	ret = SPI_execute_snapshot(obx_plan(&plan_routed_topics), NULL, NULL,
							   GetLatestSnapshot(), InvalidSnapshot,
							   true, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_snapshot failed for \"%s\": %s",
			 plan_routed_topics.sql, SPI_result_code_string(ret));
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *t = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext spi = MemoryContextSwitchTo(caller);

		topics = lappend(topics, pstrdup(t));
		MemoryContextSwitchTo(spi);
	}
	obx_finish();
	return topics;
}
