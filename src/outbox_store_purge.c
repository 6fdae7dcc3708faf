/*-------------------------------------------------------------------------
 *
 * outbox_store_purge.c
 *		purge: the delivered and dead messages older than the horizon, and
 *		the consume_once markers, deleted in chunks; with subscriptions
 *		(1.4), only the messages every subscription of their topic is done
 *		with, after the lagging ones expired (outbox_store_subs.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_stream.h"
#include "outbox_subs.h"

/*
 * Purge walks the finished rows once with a cursor and deletes them by
 * ctid in chunks; the delete re-checks the horizon, so a row revived by
 * retry_dead in the meantime stays.
 *
 * In the tables of 1.2 purge walks each topic's stream (message_stream_idx)
 * from its first message, and stops at the first message created at or
 * after the horizon: that message took its position after the horizon
 * (a position is taken inside the appending transaction, after it
 * started), every later position was taken later still, and a message is
 * delivered or dead only after its append committed, so nothing past it
 * can have finished before the horizon.  No index by age is needed, and
 * none is written by every append.  The tables of 1.0 and 1.1 combine
 * their indexes of delivered and dead messages, with a bitmap scan.
 */
#define PURGE_FINISHED(h) \
	"(delivered_at OPERATOR(pg_catalog.<) " h " OR dead_at OPERATOR(pg_catalog.<) " h ")"

SAVED_STATEMENT(stmt_purge_scan) = {
	"SELECT ctid FROM outbox.message WHERE " PURGE_FINISHED("$1"),
	SPI_OK_SELECT, 1, {TIMESTAMPTZOID}, OBX_SCANS_INDEX_OR_BITMAP
};

/* The topics of the tables of 1.2, one after the other */
SAVED_STATEMENT(stmt_purge_first_topic) = {
	"SELECT topic FROM outbox.message ORDER BY topic LIMIT 1",
	SPI_OK_SELECT, 0, {InvalidOid}, OBX_SCANS_INDEX
};

SAVED_STATEMENT(stmt_purge_next_topic) = {
	"SELECT topic FROM outbox.message WHERE topic OPERATOR(pg_catalog.>) $1"
	" ORDER BY topic LIMIT 1",
	SPI_OK_SELECT, 1, {TEXTOID}, OBX_SCANS_INDEX
};

/* A topic's stream, in order: whether each message is finished, or young */
SAVED_STATEMENT(stmt_purge_stream) = {
	"SELECT ctid, created_at OPERATOR(pg_catalog.>=) $2, "
	PURGE_FINISHED("$2") " FROM outbox.message"
	" WHERE topic OPERATOR(pg_catalog.=) $1 ORDER BY seq",
	SPI_OK_SELECT, 2, {TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_INDEX
};

/* 1.4: a topic whose default subscription was dropped: all of it is finished */
SAVED_STATEMENT(stmt_purge_stream_subs) = {
	"SELECT ctid, created_at OPERATOR(pg_catalog.>=) $2, "
	PURGE_FINISHED("$2") " OR EXISTS (SELECT 1 FROM outbox.subscription t"
	" WHERE t.topic OPERATOR(pg_catalog.=) $1 AND t.name IS NULL)"
	" FROM outbox.message WHERE topic OPERATOR(pg_catalog.=) $1 ORDER BY seq",
	SPI_OK_SELECT, 2, {TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_INDEX
};

SAVED_STATEMENT(stmt_purge_delete) = {
	"DELETE FROM outbox.message WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)"
	" AND " PURGE_FINISHED("$2"),
	SPI_OK_DELETE,
	2, {TIDARRAYOID, TIMESTAMPTZOID}
};

/*
 * With named subscriptions (1.4): a message also waits until every named
 * subscription of its topic that has not expired is done with it, read
 * past it (its frontier) and without a state row; and when the topic's default
 * subscription was dropped, it does not wait for that one.
 */
#define PURGE_DELETE_SUBS(leases) { \
	"DELETE FROM outbox.message m WHERE m.ctid OPERATOR(pg_catalog.=) ANY ($1)" \
	" AND (" PURGE_FINISHED("$2") " OR (m.created_at OPERATOR(pg_catalog.<) $2" \
	"  AND EXISTS (SELECT 1 FROM outbox.subscription t" \
	"   WHERE t.topic OPERATOR(pg_catalog.=) m.topic AND t.name IS NULL" \
	"   AND t.paused_until IS NULL" SUBPLAN_FENCE ")))" \
	" AND NOT EXISTS (SELECT 1 FROM outbox.subscription s" \
	"  WHERE s.topic OPERATOR(pg_catalog.=) m.topic AND s.name IS NOT NULL" \
	"  AND s.expired_at IS NULL" \
	"  AND (m.seq OPERATOR(pg_catalog.>=) (SELECT f.next_seq FROM outbox.subscription_frontier f" \
	"    WHERE f.sub_id OPERATOR(pg_catalog.=) s.sub_id ORDER BY f.next_seq LIMIT 1)" \
	"   OR EXISTS (SELECT 1 FROM outbox.subscription_state x" \
	"    WHERE x.sub_id OPERATOR(pg_catalog.=) s.sub_id" \
	"    AND x.seq OPERATOR(pg_catalog.=) m.seq" SUBPLAN_FENCE ")" leases "))", \
	SPI_OK_DELETE, \
	2, {TIDARRAYOID, TIMESTAMPTZOID} }
SAVED_STATEMENT(stmt_purge_delete_subs_v14) = PURGE_DELETE_SUBS("");
/* 1.5: nor in a lease by range (outbox_subs_lease.c) */
SAVED_STATEMENT(stmt_purge_delete_subs) = PURGE_DELETE_SUBS(
	"   OR EXISTS (SELECT 1 FROM (SELECT l.seqs FROM outbox.subscription_lease l"
	"    WHERE l.sub_id OPERATOR(pg_catalog.=) s.sub_id"
	"    AND l.first_seq OPERATOR(pg_catalog.<=) m.seq"
	"    ORDER BY l.first_seq DESC LIMIT 1) l"
	"    WHERE m.seq OPERATOR(pg_catalog.=) ANY (l.seqs))");

SAVED_STATEMENT(stmt_purge_marker_scan) = {
	"SELECT ctid FROM outbox.processed WHERE processed_at OPERATOR(pg_catalog.<) $1",
	SPI_OK_SELECT,
	1, {TIMESTAMPTZOID},
	OBX_SCANS_INDEX_OR_BITMAP
};

SAVED_STATEMENT(stmt_purge_marker_delete) = {
	"DELETE FROM outbox.processed WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)"
	" AND processed_at OPERATOR(pg_catalog.<) $2",
	SPI_OK_DELETE,
	2, {TIDARRAYOID, TIMESTAMPTZOID}
};

/* Rows deleted per statement by purge */
#define PURGE_CHUNK		1000

static int64 obx_purge_table(SavedStatement *scan, SavedStatement *del,
							 TimestampTz horizon, int64 max_rows);
static int64 obx_purge_streams(TimestampTz horizon, int64 max_rows,
							   SavedStatement *del);
static int64 obx_purge_tids(ItemPointerData *tids, int n, SavedStatement *del,
							TimestampTz horizon);

/*
 * Delete the rows at tids (n of them) through the statement del, which
 * re-checks that they are older than horizon.  Returns how many went.
 */
static int64
obx_purge_tids(ItemPointerData *tids, int n, SavedStatement *del,
			   TimestampTz horizon)
{
	Datum	   *elems = palloc(sizeof(Datum) * n);
	ArrayType  *arr;
	Datum		args[2];
	int64		deleted;
	int			i;

	for (i = 0; i < n; i++)
		elems[i] = PointerGetDatum(&tids[i]);
	arr = construct_array(elems, n, TIDOID, sizeof(ItemPointerData), false,
						  TYPALIGN_SHORT);
	args[0] = PointerGetDatum(arr);
	args[1] = TimestampTzGetDatum(horizon);
	deleted = (int64) SpiExecute(del, args, NULL, false, 0);
	pfree(arr);
	pfree(elems);
	return deleted;
}

/*
 * Delete at most max_rows (all when negative) rows found by the cursor
 * statement scan, in chunks of PURGE_CHUNK through the statement del.
 * Runs inside the caller's SPI connection.
 */
static int64
obx_purge_table(SavedStatement *scan, SavedStatement *del,
				TimestampTz horizon, int64 max_rows)
{
	Portal		portal;
	Datum		args[1];
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * PURGE_CHUNK);
	int64		deleted = 0;
	int64		seen = 0;

	args[0] = TimestampTzGetDatum(horizon);
	portal = SpiOpenCursor(scan, args, NULL);

	for (;;)
	{
		long		want = PURGE_CHUNK;
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
		for (i = 0; i < n; i++)
		{
			bool		isnull;

			tids[i] = *(ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[i],
														 SPI_tuptable->tupdesc,
														 1, &isnull));
		}
		SPI_freetuptable(SPI_tuptable);
		deleted += obx_purge_tids(tids, (int) n, del, horizon);
	}
	SPI_cursor_close(portal);
	pfree(tids);
	return deleted;
}

/*
 * Purge of the tables of 1.2: each topic's stream from its first message to
 * its first one created at or after horizon (see PURGE_FINISHED), deleting
 * the finished messages on the way, at most max_rows of them (all when
 * negative), in chunks of PURGE_CHUNK.  Runs inside the caller's SPI
 * connection.
 */
static int64
obx_purge_streams(TimestampTz horizon, int64 max_rows, SavedStatement *del)
{
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * PURGE_CHUNK);
	int			ntids = 0;
	int64		deleted = 0;
	int64		seen = 0;
	text	   *topic = NULL;

	while (max_rows < 0 || seen < max_rows)
	{
		Datum		args[2];
		Portal		portal;
		long		want;
		bool		young = false;
		bool		isnull;

		/* the next topic */
		args[0] = PointerGetDatum(topic);
		if (SpiExecute(topic ? &stmt_purge_next_topic : &stmt_purge_first_topic,
					   args, NULL, false, 1) == 0)
			break;
		topic = DatumGetTextPCopy(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1,
												&isnull));
		SPI_freetuptable(SPI_tuptable);

		args[0] = PointerGetDatum(topic);
		args[1] = TimestampTzGetDatum(horizon);
		portal = SpiOpenCursor(del != &stmt_purge_delete ?
							   &stmt_purge_stream_subs : &stmt_purge_stream, args, NULL);
		want = 8;
		while (!young && (max_rows < 0 || seen < max_rows))
		{
			SPITupleTable *fetched;
			uint64		i;
			uint64		n;

			/* a few rows first: most streams end soon after their start */
			SPI_cursor_fetch(portal, true, want);
			want = Min(want * 2, PURGE_CHUNK);
			fetched = SPI_tuptable;
			n = SPI_processed;
			if (n == 0)
				break;
			for (i = 0; i < n && (max_rows < 0 || seen < max_rows); i++)
			{
				/* (a chunk deleted below replaces SPI_tuptable) */
				HeapTuple	row = fetched->vals[i];
				TupleDesc	desc = fetched->tupdesc;
				bool		null_young;
				bool		null_finished;
				Datum		is_young = SPI_getbinval(row, desc, 2, &null_young);
				Datum		finished = SPI_getbinval(row, desc, 3, &null_finished);

				if (!null_young && DatumGetBool(is_young))
				{
					young = true;
					break;
				}
				if (null_finished || !DatumGetBool(finished))
					continue;
				tids[ntids++] = *(ItemPointer) DatumGetPointer(SPI_getbinval(row, desc, 1,
																   &isnull));
				seen++;
				if (ntids == PURGE_CHUNK)
				{
					deleted += obx_purge_tids(tids, ntids, del,
											  horizon);
					ntids = 0;
				}
			}
			SPI_freetuptable(fetched);
		}
		SPI_cursor_close(portal);
	}
	if (ntids > 0)
		deleted += obx_purge_tids(tids, ntids, del, horizon);
	pfree(tids);
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

	SpiConnect();
	if (SubsSchema())
	{
		SubsExpire(GetCurrentTimestamp());
		SubsPurgeDead(horizon);
		deleted = obx_purge_streams(horizon, max_rows,
									SubsLeaseRows() ? &stmt_purge_delete_subs :
									&stmt_purge_delete_subs_v14);
	}
	else if (StreamSchema())
		deleted = obx_purge_streams(horizon, max_rows, &stmt_purge_delete);
	else
		deleted = obx_purge_table(&stmt_purge_scan, &stmt_purge_delete,
								  horizon, max_rows);
	(void) obx_purge_table(&stmt_purge_marker_scan, &stmt_purge_marker_delete,
						   horizon, max_rows);
	SpiFinish();
	return deleted;
}
