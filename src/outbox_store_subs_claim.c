/*-------------------------------------------------------------------------
 *
 * outbox_store_subs_claim.c
 *		The claim of a named subscription: the messages whose last allowed
 *		lease ran out made dead, then the due read (retries, schedules,
 *		expired leases, unblocked key heads), then the fresh read of the
 *		topic's log from the subscription's frontier (next_seq) up to the
 *		horizon of appends still in progress.
 *
 * The fresh read holds the lock of the subscription's row from before it
 * takes the horizon until its transaction ends, and moves next_seq in that
 * transaction: two claimers of a subscription never read one range of the
 * log, and a claim that rolls back leaves the range unread.  Every message
 * read gets a state row: leased at once when it is due and its key's
 * head, else waiting for its available_at or behind its key.
 *
 * The horizon is the first position an append still in progress may
 * commit at (outbox_stream.c): every position below it has committed or
 * never will, so the frontier may pass it.  It exists only when the
 * library is preloaded; a claim of a named subscription without it is
 * refused rather than risk passing an append that commits later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_stream.h"
#include "outbox_subs.h"

/* the columns of outbox.message a claim returns, and the ones it reads */
#define SUBS_CLAIM_COLS		15
#define SUBS_COL_OWNER		9
#define SUBS_COL_SEQ		13

/* at most this many reads of the log per claim (keys and schedules skipped) */
#define SUBS_FRESH_READS	4

static SavedStatement stmt_find = {
	"SELECT sub_id, paused_until, expired_at FROM outbox.subscription"
	" WHERE topic OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

/* $1 sub_id, $2 now, $3 max attempts */
static SavedStatement stmt_dead_mark = {
	"WITH c AS (SELECT c.seq FROM outbox.subscription_state c"
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.leased_until IS NOT NULL"
	"  AND c.dead_at IS NULL AND c.leased_until OPERATOR(pg_catalog.<=) $2"
	"  AND c.attempts OPERATOR(pg_catalog.>=) $3"
	"  FOR UPDATE SKIP LOCKED)"
	" UPDATE outbox.subscription_state x SET dead_at = $2, leased_until = NULL,"
	" last_error = pg_catalog.format('lease of owner \"%s\" expired on attempt %s of %s',"
	"  x.lease_owner, x.attempts, $3)"
	" FROM c WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.seq OPERATOR(pg_catalog.=) c.seq"
	" RETURNING x.sub_id, x.ordering_key",
	SPI_OK_UPDATE_RETURNING, 3, {INT4OID, TIMESTAMPTZOID, INT4OID}
};

/*
 * The due read: $1 sub_id, $2 now, $3 batch, $4 lease end, $5 owner,
 * $6 topic, $7 max attempts.  A lease that ran out on an earlier attempt is
 * taken over here; one that ran out on the last is for stmt_dead_mark.
 */
static SavedStatement stmt_claim_due = {
	"WITH c AS (SELECT c.seq FROM outbox.subscription_state c"
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.dead_at IS NULL AND NOT c.blocked"
	"  AND c.available_at OPERATOR(pg_catalog.<=) $2"
	"  AND (c.leased_until IS NULL OR c.attempts OPERATOR(pg_catalog.<) $7)"
	"  ORDER BY c.available_at LIMIT $3 FOR UPDATE SKIP LOCKED),"
	" u AS (UPDATE outbox.subscription_state x SET attempts = x.attempts OPERATOR(pg_catalog.+) 1,"
	"  leased_until = $4, lease_owner = $5, available_at = $4"
	"  FROM c WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.seq OPERATOR(pg_catalog.=) c.seq"
	"  RETURNING x.seq, x.attempts, x.leased_until, x.lease_owner, x.last_error)"
	" SELECT m.id, m.topic, m.event_type, m.payload, m.created_at, m.available_at,"
	" u.attempts, u.leased_until, u.lease_owner, NULL::pg_catalog.timestamptz,"
	" NULL::pg_catalog.timestamptz, u.last_error, m.seq, false, m.ordering_key"
	" FROM u JOIN outbox.message m ON m.topic OPERATOR(pg_catalog.=) $6"
	" AND m.seq OPERATOR(pg_catalog.=) u.seq ORDER BY m.seq",
	SPI_OK_SELECT, 7,
	{INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, INT4OID}
};

static SavedStatement stmt_lock = {
	"SELECT next_seq FROM outbox.subscription WHERE sub_id OPERATOR(pg_catalog.=) $1"
	" FOR NO KEY UPDATE",
	SPI_OK_SELECT, 1, {INT4OID}
};

/*
 * The fresh read: $1 sub_id, $2 topic, $3 frontier, $4 horizon, $5 how
 * many, $6 now, $7 lease end, $8 owner.  Returns every message read, in
 * position order; the leased ones have a lease owner.  A keyed message is
 * blocked when an earlier one of its key is not done: in this read, or
 * in a state row.
 */
static SavedStatement stmt_claim_fresh = {
	"WITH f AS MATERIALIZED (SELECT m.*,"
	"  m.ordering_key IS NOT NULL AND ("
	"   pg_catalog.row_number() OVER (PARTITION BY m.ordering_key ORDER BY m.seq)"
	"    OPERATOR(pg_catalog.>) 1"
	"   OR EXISTS (SELECT 1 FROM outbox.subscription_state k"
	"    WHERE k.sub_id OPERATOR(pg_catalog.=) $1"
	"    AND k.ordering_key OPERATOR(pg_catalog.=) m.ordering_key AND k.dead_at IS NULL))"
	"   AS blocked"
	"  FROM (SELECT * FROM outbox.message WHERE topic OPERATOR(pg_catalog.=) $2"
	"   AND seq OPERATOR(pg_catalog.>=) $3 AND seq OPERATOR(pg_catalog.<) $4"
	"   ORDER BY seq LIMIT $5) m),"
	" t AS (SELECT f.*, NOT f.blocked AND f.available_at OPERATOR(pg_catalog.<=) $6 AS take FROM f),"
	" i AS (INSERT INTO outbox.subscription_state"
	"  (sub_id, seq, id, ordering_key, available_at, blocked, attempts, leased_until, lease_owner)"
	"  SELECT $1, t.seq, t.id, t.ordering_key,"
	"   CASE WHEN t.take THEN $7 ELSE t.available_at END, t.blocked,"
	"   CASE WHEN t.take THEN 1 ELSE 0 END,"
	"   CASE WHEN t.take THEN $7 END, CASE WHEN t.take THEN $8 END FROM t"
	"  RETURNING seq, attempts, leased_until, lease_owner)"
	" SELECT f.id, f.topic, f.event_type, f.payload, f.created_at, f.available_at,"
	" i.attempts, i.leased_until, i.lease_owner, NULL::pg_catalog.timestamptz,"
	" NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, f.seq, false, f.ordering_key"
	" FROM f JOIN i ON i.seq OPERATOR(pg_catalog.=) f.seq ORDER BY f.seq",
	SPI_OK_SELECT, 8,
	{INT4OID, TEXTOID, INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID}
};

static SavedStatement stmt_advance = {
	"UPDATE outbox.subscription SET next_seq = $2, last_claim_at = $3"
	" WHERE sub_id OPERATOR(pg_catalog.=) $1",
	SPI_OK_UPDATE, 3, {INT4OID, INT8OID, TIMESTAMPTZOID}
};

/* Where the rows of a claim go: the row type of outbox.message */
typedef struct SubsSink
{
	TupleDesc	tupdesc;
	Tuplestorestate *store;
	Datum		values[OUTBOX_MESSAGE_MAX_COLS];
	bool		nulls[OUTBOX_MESSAGE_MAX_COLS];
} SubsSink;

/*
 * Put the leased rows of SPI_tuptable into the sink, the columns in order
 * into the live attributes of outbox.message.  Returns how many; *last is
 * the position of the last row read (leased or not).
 */
static int
obx_sink(SubsSink *sink, int64 *last)
{
	SPITupleTable *tt = SPI_tuptable;
	uint64		i;
	int			n = 0;

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = tt->vals[i];
		bool		isnull;
		int			col = 1;
		int			att;

		*last = DatumGetInt64(SPI_getbinval(row, tt->tupdesc, SUBS_COL_SEQ, &isnull));
		(void) SPI_getbinval(row, tt->tupdesc, SUBS_COL_OWNER, &isnull);
		if (isnull)
			continue;
		for (att = 0; att < sink->tupdesc->natts; att++)
		{
			if (TupleDescAttr(sink->tupdesc, att)->attisdropped || col > SUBS_CLAIM_COLS)
			{
				sink->values[att] = (Datum) 0;
				sink->nulls[att] = true;
				continue;
			}
			sink->values[att] = SPI_getbinval(row, tt->tupdesc, col, &sink->nulls[att]);
			col++;
		}
		tuplestore_putvalues(sink->store, sink->tupdesc, sink->values, sink->nulls);
		n++;
	}
	return n;
}

/* Make dead the leases that ran out on their last attempt; free their keys. */
static void
obx_dead_mark(Datum sub, const ClaimRequest *req)
{
	Datum		args[3];

	args[0] = sub;
	args[1] = TimestampTzGetDatum(req->now);
	args[2] = Int32GetDatum(req->max_attempts);
	if (SpiExecute(&stmt_dead_mark, args, NULL, false, 0) > 0)
	{
		SPITupleTable *tt = SPI_tuptable;
		uint64		n = SPI_processed;
		Datum	   *subs = palloc(sizeof(Datum) * n);
		Datum	   *keys = palloc(sizeof(Datum) * n);
		int			nkeys = 0;
		uint64		i;

		for (i = 0; i < n; i++)
		{
			bool		isnull;
			Datum		key = SPI_getbinval(tt->vals[i], tt->tupdesc, 2, &isnull);

			if (isnull)
				continue;
			subs[nkeys] = sub;
			keys[nkeys++] = PointerGetDatum(DatumGetTextPCopy(key));
		}
		SubsPromoteKeys(nkeys, subs, keys);
	}
}

/*
 * Read the log from the frontier: up to want messages leased, in at most
 * SUBS_FRESH_READS reads.  Returns how many were leased.
 */
static int
obx_claim_fresh(Datum sub, const ClaimRequest *req, TimestampTz lease_end,
				int want, SubsSink *sink)
{
	Datum		args[8];
	bool		isnull;
	int64		next;
	int64		horizon;
	int64		taken;
	int64		start;
	int			got = 0;
	int			reads;

	args[0] = sub;
	if (SpiExecute(&stmt_lock, args, NULL, false, 1) == 0)
		return 0;				/* unsubscribed meanwhile */
	next = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									   1, &isnull));
	start = next;

	/* after the lock: every append below the horizon has ended */
	horizon = StreamHorizon(&taken);

	args[1] = PointerGetDatum(req->topic);
	args[5] = TimestampTzGetDatum(req->now);
	args[6] = TimestampTzGetDatum(lease_end);
	args[7] = PointerGetDatum(req->owner);
	for (reads = 0; reads < SUBS_FRESH_READS && got < want && next < horizon; reads++)
	{
		int			batch = want - got;
		int64		last = next - 1;
		uint64		read;

		args[2] = Int64GetDatum(next);
		args[3] = Int64GetDatum(horizon);
		args[4] = Int32GetDatum(batch);
		read = SpiExecute(&stmt_claim_fresh, args, NULL, false, 0);
		got += obx_sink(sink, &last);
		if (read < (uint64) batch)
		{
			next = horizon;		/* the rest below the horizon is not there */
			break;
		}
		next = last + 1;
	}
	if (next != start || got > 0)
	{
		args[1] = Int64GetDatum(next);
		args[2] = TimestampTzGetDatum(req->now);
		(void) SpiExecute(&stmt_advance, args, NULL, false, 0);
	}
	return got;
}

/*
 * Lease up to req->batch_size messages of subscription name of req->topic
 * into store, whose descriptor is the row type of outbox.message.  Returns
 * the number leased.
 */
int
SubsClaimToTuplestore(const ClaimRequest *req, text *name, TupleDesc tupdesc,
					  Tuplestorestate *store)
{
	SubsSink	sink;
	Datum		args[7];
	Datum		sub;
	bool		isnull;
	bool		paused_null;
	TimestampTz paused;
	TimestampTz lease_end = req->now + (int64) req->lease_seconds * USECS_PER_SEC;
	int			got;

	if (tupdesc->natts > OUTBOX_MESSAGE_MAX_COLS)
		elog(ERROR, "outbox.message has an unexpected shape (%d columns)",
			 tupdesc->natts);
	sink.tupdesc = tupdesc;
	sink.store = store;

	SpiConnect();
	args[0] = PointerGetDatum(req->topic);
	args[1] = PointerGetDatum(name);
	if (SpiExecute(&stmt_find, args, NULL, false, 1) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subscription \"%s\" of topic \"%s\" does not exist",
						text_to_cstring(name), text_to_cstring(req->topic)),
				 errhint("Create it with outbox.subscribe(topic, subscription).")));
	sub = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	paused = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 2,
											   &paused_null));
	(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (!isnull)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subscription \"%s\" of topic \"%s\" has expired",
						text_to_cstring(name), text_to_cstring(req->topic)),
				 errdetail("It lagged more than outbox.subscription_max_lag, and purge may have deleted messages it had not read."),
				 errhint("Drop it with outbox.unsubscribe and subscribe again.")));
	if (!paused_null && paused > req->now)
	{
		SpiFinish();
		return 0;
	}

	obx_dead_mark(sub, req);

	args[0] = sub;
	args[1] = TimestampTzGetDatum(req->now);
	args[2] = Int32GetDatum(req->batch_size);
	args[3] = TimestampTzGetDatum(lease_end);
	args[4] = PointerGetDatum(req->owner);
	args[5] = PointerGetDatum(req->topic);
	args[6] = Int32GetDatum(req->max_attempts);
	(void) SpiExecute(&stmt_claim_due, args, NULL, false, 0);
	{
		int64		last;

		got = obx_sink(&sink, &last);
	}
	if (got < req->batch_size)
		got += obx_claim_fresh(sub, req, lease_end, req->batch_size - got, &sink);
	SpiFinish();
	return got;
}
