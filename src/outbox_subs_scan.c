/*-------------------------------------------------------------------------
 *
 * outbox_subs_scan.c
 *		A topic's stream read version by version, for the claims of
 *		named subscriptions: which messages in a range of positions have
 *		committed, and which are still being appended; and how far a claim
 *		position of a topic may move, and what became of its holes.
 *
 * An MVCC snapshot cannot tell an append in progress from a position
 * that was never used (it belongs to another topic, or rolled back).  The
 * scan reads every version the index leads to (SnapshotAny) and judges
 * each by the transaction that wrote it: committed (or this one), in
 * progress, or rolled back (left out).  Below the gap horizon
 * (outbox_gap.c) every append has its row in the index, so what this scan
 * does not see there never will be: a claim reads past it, and keeps the
 * appends in progress as holes to look at again.
 *
 * A message whose row is being updated (a default subscription's claim,
 * completion or failure) shows one version per index entry and HOT chain
 * member, and its old versions stay until vacuum removes them; a position
 * is in progress only when every version it shows is (an update never
 * makes a committed message uncommitted).  A dirty snapshot would not do:
 * the old version turns invisible once the update commits, and a scan
 * that read the index page before the new version's entry was added there
 * saw no version at all of a committed message, and passed it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "executor/tuptable.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_subs.h"

/* The stream index of outbox.message, open for a few scans */
typedef struct StreamScan
{
	Relation	heap;
	Relation	index;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		in_progress;	/* the version shown was written by another
								 * transaction in progress */
	bool		own;			/* ... by this one */
	ScanKeyData keys[3];
	AttrNumber	att_seq;
	AttrNumber	att_id;
	AttrNumber	att_key;
	AttrNumber	att_available;
} StreamScan;

static void
obx_scan_open(StreamScan *s, text *topic)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	Oid			relid = get_relname_relid("message", nsp);
	Oid			indexid = get_relname_relid("message_stream_idx", nsp);

	if (!OidIsValid(relid) || !OidIsValid(indexid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox.message or its index message_stream_idx is missing")));
	s->heap = table_open(relid, AccessShareLock);
	s->index = index_open(indexid, AccessShareLock);
	s->att_seq = get_attnum(relid, "seq");
	s->att_id = get_attnum(relid, "id");
	s->att_key = get_attnum(relid, "ordering_key");
	s->att_available = get_attnum(relid, "available_at");
	ScanKeyEntryInitialize(&s->keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   s->index->rd_indcollation[0], F_TEXTEQ,
						   PointerGetDatum(topic));
	s->scan = ObxIndexBeginScan(s->heap, s->index, SnapshotAny, 3);
	s->slot = table_slot_create(s->heap, NULL);
}

static void
obx_scan_close(StreamScan *s)
{
	ExecDropSingleTupleTableSlot(s->slot);
	index_endscan(s->scan);
	index_close(s->index, AccessShareLock);
	table_close(s->heap, AccessShareLock);
}

/* Start reading positions from from (inclusive) to upto (exclusive). */
static void
obx_scan_range(StreamScan *s, int64 from, int64 upto)
{
	ScanKeyEntryInitialize(&s->keys[1], 0, 2, BTGreaterEqualStrategyNumber,
						   InvalidOid, InvalidOid, F_INT8GE, Int64GetDatum(from));
	ScanKeyEntryInitialize(&s->keys[2], 0, 2, BTLessStrategyNumber,
						   InvalidOid, InvalidOid, F_INT8LT, Int64GetDatum(upto));
	index_rescan(s->scan, s->keys, 3, NULL, 0);
}

/*
 * Whether tuple, the version in the scan's slot, was deleted (not updated:
 * its ctid is its own) by another transaction that committed: a message
 * gone (purged, or deleted by hand), as a dirty snapshot would say.  Its
 * header is read under the buffer's share lock, so that an update is
 * never taken for a deletion half-written.  A deletion by this very
 * transaction does not count (a dirty snapshot would hide the version): it
 * may still roll back, and a read that passed the message would not.
 */
static bool
obx_deleted(StreamScan *s, HeapTuple tuple)
{
	Buffer		buffer = ((BufferHeapTupleTableSlot *) s->slot)->buffer;
	HeapTupleHeader t = tuple->t_data;
	TransactionId xmax = InvalidTransactionId;

	/*
	 * Most versions were never deleted nor updated (an insert sets the bit;
	 * a deletion that clears it now is in progress).
	 */
	if ((t->t_infomask & HEAP_XMAX_INVALID) ||
		!TTS_IS_BUFFERTUPLE(s->slot) || !BufferIsValid(buffer))
		return false;
	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	if (!(t->t_infomask & HEAP_XMAX_INVALID) &&
		!HEAP_XMAX_IS_LOCKED_ONLY(t->t_infomask) &&
		ItemPointerEquals(&t->t_ctid, &tuple->t_self))
		xmax = HeapTupleHeaderGetUpdateXid(t);
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	return TransactionIdIsValid(xmax) && !TransactionIdIsCurrentTransactionId(xmax) &&
		!TransactionIdIsInProgress(xmax) && TransactionIdDidCommit(xmax);
}

/*
 * Judge the version in the scan's slot by the transaction that wrote it:
 * false when it rolled back, else s->in_progress and s->own say whether it
 * is in progress, and whether it is this transaction.  The slot's buffer
 * stays pinned, so the tuple is not pruned away meanwhile, and its xmin
 * does not change (freezing only sets bits beside it).
 */
static bool
obx_judge_version(StreamScan *s)
{
	bool		should_free;
	HeapTuple	tuple = ExecFetchSlotHeapTuple(s->slot, false, &should_free);
	HeapTupleHeader t = tuple->t_data;
	TransactionId xmin = HeapTupleHeaderGetRawXmin(t);
	bool		live = true;

	s->in_progress = false;
	s->own = false;
	if (HeapTupleHeaderXminFrozen(t) || HeapTupleHeaderXminCommitted(t))
	{
		/* committed */
	}
	else if (HeapTupleHeaderXminInvalid(t))
		live = false;
	else if (TransactionIdIsCurrentTransactionId(xmin))
		s->own = true;
	else if (TransactionIdIsInProgress(xmin))
		s->in_progress = true;
	else if (!TransactionIdDidCommit(xmin))
		live = false;			/* rolled back, or never ended (a crash) */
	if (live && obx_deleted(s, tuple))
		live = false;
	if (should_free)
		heap_freetuple(tuple);
	return live;
}

/*
 * The next version the scan shows, of a transaction that committed or is
 * in progress: its position, and whether it was written by another
 * transaction in progress.  False at the end.
 */
static bool
obx_scan_next(StreamScan *s, int64 *seq, bool *in_progress)
{
	bool		isnull;

	do
	{
		if (!index_getnext_slot(s->scan, ForwardScanDirection, s->slot))
			return false;
	} while (!obx_judge_version(s));
	*seq = DatumGetInt64(slot_getattr(s->slot, s->att_seq, &isnull));
	*in_progress = s->in_progress;
	return true;
}

/*
 * Read topic's stream from position from up to upto (exclusive) into
 * entries: at most max_fresh committed messages and max_holes appends in
 * progress.  *end is where the next read starts: the first position not
 * examined, upto when the range was read to its end.  Returns the number
 * of entries.
 */
int
SubsReadStream(text *topic, int64 from, int64 upto, int max_fresh,
			   int max_holes, StreamEntry *entries, int64 *end)
{
	StreamScan	s;
	int64		seq;
	bool		in_progress;
	int			n = 0;
	int			nfresh = 0;
	int			nholes = 0;

	*end = upto;
	if (from >= upto)
		return 0;
	obx_scan_open(&s, topic);
	obx_scan_range(&s, from, upto);
	while (obx_scan_next(&s, &seq, &in_progress))
	{
		StreamEntry *e;
		bool		isnull;
		Datum		key;

		if (n > 0 && entries[n - 1].seq == seq)
		{
			/* another version of the same message */
			e = &entries[n - 1];
			if (e->in_progress && !in_progress)
			{
				e->in_progress = false;
				nholes--;
				nfresh++;
			}
			continue;
		}
		if (nfresh >= max_fresh || nholes >= max_holes)
		{
			*end = seq;
			break;
		}
		e = &entries[n++];
		e->seq = seq;
		e->in_progress = in_progress;
		if (in_progress)
			nholes++;
		else
			nfresh++;
		memcpy(&e->id, DatumGetUUIDP(slot_getattr(s.slot, s.att_id, &isnull)),
			   sizeof(pg_uuid_t));
		key = slot_getattr(s.slot, s.att_key, &isnull);
		e->key = isnull ? NULL : DatumGetTextPCopy(key);
		e->available_at = DatumGetTimestampTz(slot_getattr(s.slot, s.att_available,
														   &isnull));
	}
	obx_scan_close(&s);
	return n;
}

/*
 * Whether the version the scan shows now was written by a transaction in
 * progress, this very one included (its changes are undone if it rolls
 * back).
 */
static bool
obx_uncommitted(StreamScan *s)
{
	return s->in_progress || s->own;
}

/* The columns that say whether a message is finished or deferred */
typedef struct PassColumns
{
	AttrNumber	delivered;
	AttrNumber	dead;
	AttrNumber	deferred;
} PassColumns;

static void
obx_pass_columns(StreamScan *s, PassColumns *c)
{
	Oid			relid = RelationGetRelid(s->heap);

	c->delivered = get_attnum(relid, "delivered_at");
	c->dead = get_attnum(relid, "dead_at");
	c->deferred = get_attnum(relid, "deferred");
}

/*
 * Whether the committed version the scan shows now lets a claim position
 * pass: finished (delivered or dead) or deferred.
 */
static bool
obx_passable(StreamScan *s, const PassColumns *c)
{
	bool		isnull;

	if (DatumGetBool(slot_getattr(s->slot, c->deferred, &isnull)))
		return true;
	(void) slot_getattr(s->slot, c->delivered, &isnull);
	if (!isnull)
		return true;
	(void) slot_getattr(s->slot, c->dead, &isnull);
	return !isnull;
}

/*
 * Whether the committed version the scan shows now is a message of one of
 * the passed keys keys[0..nkeys-1].
 */
static bool
obx_passed_key(StreamScan *s, text *const *keys, int nkeys)
{
	bool		isnull;
	Datum		key;
	text	   *t;
	int			len;
	int			i;

	if (nkeys == 0)
		return false;
	key = slot_getattr(s->slot, s->att_key, &isnull);
	if (isnull)
		return false;
	t = DatumGetTextPP(key);
	len = VARSIZE_ANY_EXHDR(t);
	for (i = 0; i < nkeys; i++)
		if (VARSIZE_ANY_EXHDR(keys[i]) == len &&
			memcmp(VARDATA_ANY(keys[i]), VARDATA_ANY(t), len) == 0)
			return true;
	return false;
}

/*
 * The ordering key of the committed version the scan shows now, a copy in
 * the current memory context; NULL when it has none.
 */
static text *
obx_stop_key(StreamScan *s)
{
	bool		isnull;
	Datum		d = slot_getattr(s->slot, s->att_key, &isnull);

	return isnull ? NULL : DatumGetTextPCopy(d);
}

/*
 * How far a claim position of topic may move from from, below upto: to the
 * first position whose message is not finished nor deferred in committed
 * state, nor a committed message of one of the passed keys keys[0..nkeys-1],
 * or is still being appended (or written by this transaction); upto when
 * every message in between is passed.  *open says whether the message
 * there is still being appended (every version it shows is uncommitted);
 * *nkeyed counts the positions passed as messages of the passed keys; and
 * *stop_key (when stop_key is not NULL) gets the ordering key of the
 * committed message there, NULL when it has none.
 * One read of every version: a position shows its committed versions
 * (finished stays finished or becomes deferred, never due again in the
 * stream: it is passed when one of them is) and the version of a
 * transaction in progress that changes it, if any.
 */
int64
StreamAdvance(text *topic, int64 from, int64 upto,
			  text *const *keys, int nkeys, bool *open,
			  int64 *nkeyed, text **stop_key)
{
	StreamScan	s;
	PassColumns c;
	int64		seq;
	int64		current = -1;	/* the position whose versions are read */
	bool		passed = false; /* its committed version is finished */
	bool		committed = false;	/* it shows a committed version */
	bool		keyed = false;	/* its message is of a passed key */
	bool		in_progress;

	*open = false;
	*nkeyed = 0;
	if (stop_key)
		*stop_key = NULL;
	if (from >= upto)
		return upto;
	obx_scan_open(&s, topic);
	obx_pass_columns(&s, &c);
	obx_scan_range(&s, from, upto);
	while (obx_scan_next(&s, &seq, &in_progress))
	{
		if (seq != current)
		{
			if (current >= 0 && !passed && !keyed)
				break;
			if (keyed && !passed)
				(*nkeyed)++;
			current = seq;
			passed = false;
			committed = false;
			keyed = false;
		}
		if (!obx_uncommitted(&s))
		{
			committed = true;
			if (obx_passable(&s, &c))
				passed = true;
			else if (obx_passed_key(&s, keys, nkeys))
				keyed = true;
			else if (stop_key)
				*stop_key = obx_stop_key(&s);
		}
	}
	obx_scan_close(&s);
	if (current >= 0 && !passed && !keyed)
	{
		*open = !committed;
		if (*open && stop_key)
			*stop_key = NULL;
		return current;
	}
	if (keyed && !passed)
		(*nkeyed)++;
	return upto;
}

/*
 * What became of the holes of a claim position of topic, seqs[0..n-1]:
 * states[i] is HOLE_OPEN while the append is in progress, HOLE_DUE once it
 * committed and its message is fresh and not finished (a claim must find
 * it below the position), HOLE_DONE when it rolled back, or its message
 * is finished or deferred in committed state.
 */
void
StreamProbeHoles(text *topic, const int64 *seqs, int n, int *states)
{
	StreamScan	s;
	PassColumns c;
	int			i;

	if (n == 0)
		return;
	obx_scan_open(&s, topic);
	obx_pass_columns(&s, &c);
	for (i = 0; i < n; i++)
	{
		int64		seq;
		bool		in_progress;
		bool		committed = false;
		bool		passed = false;
		bool		seen = false;

		obx_scan_range(&s, seqs[i], seqs[i] + 1);
		while (obx_scan_next(&s, &seq, &in_progress))
		{
			seen = true;
			if (!obx_uncommitted(&s))
			{
				committed = true;
				if (obx_passable(&s, &c))
					passed = true;
			}
		}
		if (!seen || passed)
			states[i] = HOLE_DONE;
		else if (committed)
			states[i] = HOLE_DUE;
		else
			states[i] = HOLE_OPEN;
	}
	obx_scan_close(&s);
}

/*
 * What became of the appends at positions seqs[0..n-1] of topic: states[i]
 * is STREAM_COMMITTED, STREAM_IN_PROGRESS, or STREAM_GONE (rolled back).
 */
void
SubsProbeStream(text *topic, const int64 *seqs, int n, int *states)
{
	StreamScan	s;
	int			i;

	if (n == 0)
		return;
	obx_scan_open(&s, topic);
	for (i = 0; i < n; i++)
	{
		int64		seq;
		bool		in_progress;

		states[i] = STREAM_GONE;
		obx_scan_range(&s, seqs[i], seqs[i] + 1);
		while (obx_scan_next(&s, &seq, &in_progress))
		{
			if (!in_progress)
			{
				states[i] = STREAM_COMMITTED;
				break;
			}
			states[i] = STREAM_IN_PROGRESS;
		}
	}
	obx_scan_close(&s);
}

/*
 * Where this backend last found the first row of a subscription's
 * frontier: rows below it were gone then (deleted by transactions that
 * committed, or inserted by ones that rolled back), and no row is ever
 * inserted below the first one, so the next scan starts there.  Under a
 * held snapshot the index keeps an entry for each row claims deleted, and
 * a scan from the start would read them all, every claim.  Keyed by the
 * table too: a table made anew numbers its subscriptions from 1 again.
 *
 * Rows this transaction deleted are hidden from its own scans, yet come
 * back if it rolls back: a scan in the transaction that deleted rows of
 * the subscription (collapsed) does not move the mark.  A scan that finds
 * nothing from the mark looks again from the start.
 */
typedef struct FrontierLow
{
	Oid			relid;
	int32		sub;
	int64		low;
	TransactionId collapsed;	/* the last transaction that deleted its rows */
} FrontierLow;

#define FRONTIER_LOWS	16
static FrontierLow frontier_lows[FRONTIER_LOWS];
static int	frontier_lows_next = 0;

static FrontierLow *
obx_frontier_low(Oid relid, int32 sub)
{
	FrontierLow *l;
	int			i;

	for (i = 0; i < FRONTIER_LOWS; i++)
		if (frontier_lows[i].relid == relid && frontier_lows[i].sub == sub)
			return &frontier_lows[i];
	l = &frontier_lows[frontier_lows_next];
	frontier_lows_next = (frontier_lows_next + 1) % FRONTIER_LOWS;
	l->relid = relid;
	l->sub = sub;
	l->low = PG_INT64_MIN;
	l->collapsed = InvalidTransactionId;
	return l;
}

/*
 * Where this backend last found the first row of subscription sub's
 * frontier (PG_INT64_MIN: from the start).
 */
int64
SubsFrontierFrom(int32 sub)
{
	Oid			relid = get_relname_relid("subscription_frontier",
										  get_namespace_oid("outbox", false));
	int			i;

	for (i = 0; i < FRONTIER_LOWS; i++)
		if (frontier_lows[i].relid == relid && frontier_lows[i].sub == sub &&
			!(TransactionIdIsValid(frontier_lows[i].collapsed) &&
			  frontier_lows[i].collapsed == GetTopTransactionIdIfAny()))
			return frontier_lows[i].low;
	return PG_INT64_MIN;
}

/* The same for every subscription this backend has a mark of (see SubsHoleMarks). */
int
SubsFrontierMarks(Datum **subs, Datum **froms)
{
	Oid			relid = get_relname_relid("subscription_frontier",
										  get_namespace_oid("outbox", false));
	int			n = 0;
	int			i;

	*subs = palloc(sizeof(Datum) * FRONTIER_LOWS);
	*froms = palloc(sizeof(Datum) * FRONTIER_LOWS);
	for (i = 0; i < FRONTIER_LOWS; i++)
	{
		if (frontier_lows[i].relid != relid || frontier_lows[i].sub == 0)
			continue;
		(*subs)[n] = Int32GetDatum(frontier_lows[i].sub);
		(*froms)[n++] = Int64GetDatum(SubsFrontierFrom(frontier_lows[i].sub));
	}
	return n;
}

/* This transaction deleted rows of the frontier of subscription sub. */
void
SubsFrontierCollapsed(int32 sub)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	FrontierLow *l = obx_frontier_low(get_relname_relid("subscription_frontier", nsp), sub);

	l->collapsed = GetTopTransactionIdIfAny();
}

/* Read the rows the scan shows into rows[n..max-1]; returns the new n. */
static int
obx_frontier_rows(IndexScanDesc scan, TupleTableSlot *slot, SnapshotData *dirty,
				  AttrNumber att_next, AttrNumber att_from, FrontierRow *rows,
				  int n, int max)
{
	while (n < max && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		FrontierRow *r = &rows[n++];
		bool		isnull;
		Datum		from;

		r->next = DatumGetInt64(slot_getattr(slot, att_next, &isnull));
		r->from = -1;
		if (att_from != InvalidAttrNumber)
		{
			from = slot_getattr(slot, att_from, &isnull);
			if (!isnull)
				r->from = DatumGetInt64(from);
		}
		r->inserting = dirty->xmin;
		r->deleting = dirty->xmax;
	}
	return n;
}

/*
 * The rows of subscription sub in outbox.subscription_frontier, by
 * next_seq, as a dirty snapshot shows them: rows of claims still in
 * progress included, each with the transaction that inserts or deletes it
 * when that is another one in progress.  At most max; *chain is false
 * when the table has no from_seq (the library is newer than the
 * extension's tables).  Returns the number of rows.
 */
int
SubsReadFrontier(int32 sub, FrontierRow *rows, int max, bool *chain)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	Oid			relid = get_relname_relid("subscription_frontier", nsp);
	Oid			indexid = get_relname_relid("subscription_frontier_pkey", nsp);
	Relation	heap;
	Relation	index;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	SnapshotData dirty;
	ScanKeyData keys[2];
	AttrNumber	att_next;
	AttrNumber	att_from;
	FrontierLow *low;
	int			n = 0;

	if (!OidIsValid(relid) || !OidIsValid(indexid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox.subscription_frontier or its primary key is missing")));
	heap = table_open(relid, AccessShareLock);
	index = index_open(indexid, AccessShareLock);
	att_next = get_attnum(relid, "next_seq");
	att_from = get_attnum(relid, "from_seq");
	*chain = att_from != InvalidAttrNumber;
	InitDirtySnapshot(dirty);
	low = obx_frontier_low(relid, sub);
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT4EQ, Int32GetDatum(sub));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTGreaterEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT8GE, Int64GetDatum(low->low));
	scan = ObxIndexBeginScan(heap, index, &dirty, 2);
	index_rescan(scan, keys, 2, NULL, 0);
	slot = table_slot_create(heap, NULL);
	n = obx_frontier_rows(scan, slot, &dirty, att_next, att_from, rows, 0, max);
	if (n == 0 && low->low != PG_INT64_MIN)
	{
		/* nothing from the mark: look again from the start */
		low->low = PG_INT64_MIN;
		ScanKeyEntryInitialize(&keys[1], 0, 2, BTGreaterEqualStrategyNumber, InvalidOid,
							   InvalidOid, F_INT8GE, Int64GetDatum(low->low));
		index_rescan(scan, keys, 2, NULL, 0);
		n = obx_frontier_rows(scan, slot, &dirty, att_next, att_from, rows, 0, max);
	}
	if (n > 0 && (!TransactionIdIsValid(low->collapsed) ||
				  low->collapsed != GetTopTransactionIdIfAny()))
		low->low = rows[0].next;
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
	return n;
}
