/*-------------------------------------------------------------------------
 *
 * outbox_subs_frontier.c
 *		The frontier of a named subscription: the chain of ranges of the
 *		log its claims have read, and the lock they take turns on.
 *
 * Each claim that reads the log inserts a row of outbox.subscription_frontier
 * for the range it read, [from_seq, next_seq).  The rows are read with a
 * dirty snapshot, so the range of a claim still in progress counts.  If a
 * claim rolls back after a later claim read on past it, its row goes and
 * leaves a gap between the rows below and above it: the next claim reads
 * the gap again, first.  Rows below the first one that is not settled
 * (inserted or deleted by another transaction still in progress, or
 * after a gap) tell nothing any more, and the claim that finds them
 * deletes them.
 *
 * A claim releases the lock once its row is in, so later claims read on
 * past it while it is in progress (outbox_store_subs_claim.c,
 * SUBS_RELEASE_BEFORE_COMMIT); the order of ordering keys rests on the
 * keys' own locks (outbox_subs_keylock.c).  A claim that handed out or
 * dropped holes holds it until commit.
 *
 * The lock is an object lock on (outbox.subscription, sub_id), seen in
 * pg_locks.  A claim whose transaction stays open keeps its row in the
 * chain; after FRONTIER_WAIT_ROWS rows above it, claims wait for it to end
 * instead of lengthening the chain every claim reads.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_subs.h"

/* beyond this many rows, a claim waits for the oldest one in progress */
#define FRONTIER_WAIT_ROWS	64

/* $1 sub_id, $2 next_seq, $3 now, $4 from_seq */
SAVED_STATEMENT(stmt_insert) = {
	"INSERT INTO outbox.subscription_frontier (sub_id, next_seq, claimed_at, from_seq)"
	" VALUES ($1, $2, $3, $4)",
	SPI_OK_INSERT, 4, {INT4OID, INT8OID, TIMESTAMPTZOID, INT8OID}
};

/* rows settled below the newest: $1 sub_id, $2 their next_seq */
SAVED_STATEMENT(stmt_delete) = {
	"DELETE FROM outbox.subscription_frontier"
	" WHERE sub_id OPERATOR(pg_catalog.=) $1 AND " SUBS_WITHIN("next_seq", "$2")
	" AND next_seq OPERATOR(pg_catalog.=) ANY ($2)",
	SPI_OK_DELETE, 2, {INT4OID, INT8ARRAYOID}
};

/*
 * Before the tables of 1.5 (no from_seq): the frontier moved from $4 to
 * $2, under the lock held until commit.
 */
SAVED_STATEMENT(stmt_advance_14) = {
	"WITH d AS (DELETE FROM outbox.subscription_frontier"
	"  WHERE sub_id OPERATOR(pg_catalog.=) $1 AND next_seq OPERATOR(pg_catalog.=) $4)"
	" INSERT INTO outbox.subscription_frontier (sub_id, next_seq, claimed_at)"
	" VALUES ($1, $2, $3)",
	SPI_OK_INSERT, 4, {INT4OID, INT8OID, TIMESTAMPTZOID, INT8OID}
};

static void
obx_lock_tag(LOCKTAG *tag, int32 sub)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	Oid			relid = get_relname_relid("subscription", nsp);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table outbox.subscription is missing")));
	SET_LOCKTAG_OBJECT(*tag, MyDatabaseId, relid, (uint32) sub, 0);
}

/*
 * Take the lock of subscription sub, until the transaction ends or
 * SubsUnlock.  Returns whether it had to wait for it.
 */
bool
SubsLock(int32 sub)
{
	LOCKTAG		tag;

	obx_lock_tag(&tag, sub);
	if (LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return false;
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	return true;
}

/* The lock of subscription sub if no other transaction holds it. */
bool
SubsTryLock(int32 sub)
{
	LOCKTAG		tag;

	obx_lock_tag(&tag, sub);
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

void
SubsUnlock(int32 sub)
{
	LOCKTAG		tag;

	obx_lock_tag(&tag, sub);
	(void) LockRelease(&tag, ExclusiveLock, false);
}

/*
 * Did every transaction the scan saw in progress stay in progress to its
 * end?  Only then do the rows tell the frontier as it is.
 *
 * A scan reads row after row, and a transaction may end between two of
 * them, or after them: a row below read while its deleter was in
 * progress and one above read after that deleter committed the deletion
 * of both would look like a gap.  Nor can the rows be settled afterwards
 * by asking whether each transaction seen committed: a dirty snapshot
 * names only the inserter of a row whose inserter is in progress, not its
 * deleter.  A claim that reads a gap up to the range above it deletes its
 * own row in the same transaction (SubsFrontierAdvance: the chain
 * collapses through it), and so does a transaction that claims twice.
 * Taken as committed once that transaction commits, such a row would
 * stand where its range is, while the rows it deleted above it are gone:
 * a gap where a committed claim read, which the next claim would read a
 * second time.  So a scan that saw a transaction end is read again.
 */
static bool
obx_rows_current(const SubsFrontier *f)
{
	int			i;

	for (i = 0; i < f->nrows; i++)
	{
		const FrontierRow *r = &f->rows[i];

		if (TransactionIdIsValid(r->inserting) && !TransactionIdIsInProgress(r->inserting))
			return false;
		if (TransactionIdIsValid(r->deleting) && !TransactionIdIsInProgress(r->deleting))
			return false;
	}
	return true;
}

/*
 * All the rows of sub, however many, as of the end of their scan.  The
 * caller holds the lock of sub, so no other transaction starts writing
 * them meanwhile: each scan read again follows the end of one of the
 * transactions the one before saw in progress, and there are few.
 */
static void
obx_read_rows(SubsFrontier *f, int32 sub)
{
	int			max = 16;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		f->rows = palloc(sizeof(FrontierRow) * max);
		f->nrows = SubsReadFrontier(sub, f->rows, max, &f->chain);
		if (f->nrows >= max)
			max *= 2;
		else if (obx_rows_current(f))
			break;
		pfree(f->rows);
	}
}

/*
 * The transaction to wait for when the chain is too long: the lowest row
 * another transaction in progress inserts or deletes.
 */
static TransactionId
obx_oldest_claim(SubsFrontier *f)
{
	int			i;

	for (i = 0; i < f->nrows; i++)
	{
		if (TransactionIdIsValid(f->rows[i].inserting))
			return f->rows[i].inserting;
		if (TransactionIdIsValid(f->rows[i].deleting))
			return f->rows[i].deleting;
	}
	return InvalidTransactionId;
}

/* Wait for xid to end, without the lock of sub. */
static void
obx_wait(int32 sub, TransactionId xid)
{
	SubsUnlock(sub);
	XactLockTableWait(xid, NULL, NULL, XLTW_None);
	(void) SubsLock(sub);
}

/*
 * Where the next claim of subscription sub reads, under its lock (held by
 * the caller, and perhaps released and taken again meanwhile): the first
 * range a claim that rolled back left, or on from the newest row.  With no
 * row at all (unsubscribed meanwhile) the range is empty.
 */
void
SubsFrontierRead(SubsFrontier *f, int32 sub)
{
	int			i;

	f->sub = sub;
	for (;;)
	{
		TransactionId xid;

		obx_read_rows(f, sub);
		if (f->nrows <= FRONTIER_WAIT_ROWS)
			break;
		xid = obx_oldest_claim(f);
		if (!TransactionIdIsValid(xid))
			break;
		obx_wait(sub, xid);
		pfree(f->rows);
	}
	f->start = 0;
	f->limit = 0;
	f->at = 0;
	if (f->nrows == 0)
		return;
	f->at = f->nrows;
	f->start = f->rows[f->nrows - 1].next;
	f->limit = PG_INT64_MAX;
	if (!f->chain)
		return;
	for (i = 1; i < f->nrows; i++)
	{
		if (f->rows[i].from > f->rows[i - 1].next)
		{
			f->at = i;
			f->start = f->rows[i - 1].next;
			f->limit = f->rows[i].from;
			return;
		}
	}
}

/*
 * Below what position of the log no claim will read again: where this one
 * reads from, or the start of a range a claim still in progress read,
 * which its rollback would leave to be read again.  (Read under the lock,
 * after SubsFrontierRead: no other claim reads the log meanwhile.)
 */
int64
SubsFrontierFloor(const SubsFrontier *f)
{
	int64		lowest = f->start;
	int			i;

	for (i = 0; i < f->nrows; i++)
		if (TransactionIdIsValid(f->rows[i].inserting))
			lowest = Min(lowest, f->rows[i].from);
	return lowest;
}

/* Is row r settled: written by a transaction that committed, or by this one? */
static inline bool
obx_settled(const FrontierRow *r)
{
	return !TransactionIdIsValid(r->inserting) && !TransactionIdIsValid(r->deleting);
}

/*
 * The claim read f's range up to next: record it, and delete the rows
 * below the newest of the settled rows that chain from the first without
 * a gap (this claim's row counts as settled).
 */
void
SubsFrontierAdvance(SubsFrontier *f, int64 next, TimestampTz now)
{
	Datum		args[4];
	FrontierRow mine;
	Datum	   *gone;
	int			ngone = 0;
	int			i;
	const FrontierRow **list;
	int			n = 0;
	bool		moved = next > f->start;

	if (f->nrows == 0)
		return;
	args[0] = Int32GetDatum(f->sub);
	if (!f->chain)
	{
		if (moved)
		{
			args[1] = Int64GetDatum(next);
			args[2] = TimestampTzGetDatum(now);
			args[3] = Int64GetDatum(f->start);
			(void) SpiExecute(&stmt_advance_14, args, NULL, false, 0);
		}
		return;
	}
	if (moved)
	{
		args[1] = Int64GetDatum(next);
		args[2] = TimestampTzGetDatum(now);
		args[3] = Int64GetDatum(f->start);
		(void) SpiExecute(&stmt_insert, args, NULL, false, 0);
	}
	mine.from = f->start;
	mine.next = next;
	mine.inserting = InvalidTransactionId;
	mine.deleting = InvalidTransactionId;

	/* the rows in order, this claim's in its place */
	list = palloc(sizeof(FrontierRow *) * (f->nrows + 1));
	for (i = 0; i < f->nrows; i++)
	{
		if (i == f->at && moved)
			list[n++] = &mine;
		list[n++] = &f->rows[i];
	}
	if (f->at == f->nrows && moved)
		list[n++] = &mine;

	/* the settled rows that chain from the first: all but the last go */
	gone = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		const FrontierRow *r = list[i];

		if (!obx_settled(r) ||
			(i > 0 && r->from >= 0 && r->from != list[i - 1]->next))
			break;
		if (i > 0)
			gone[ngone++] = Int64GetDatum(list[i - 1]->next);
	}
	if (ngone > 0)
	{
		args[1] = PointerGetDatum(construct_array(gone, ngone, INT8OID, 8,
												  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		(void) SpiExecute(&stmt_delete, args, NULL, false, 0);
		SubsFrontierCollapsed(f->sub);
	}
	pfree(gone);
	pfree(list);
}

/*
 * Wait, under the lock of sub (held by the caller), until no claim still
 * in progress has a row in its chain: before the subscription and its
 * state go, nothing a claim inserts may be left behind.
 */
void
SubsWaitClaims(int32 sub)
{
	SubsFrontier f;

	for (;;)
	{
		TransactionId xid = InvalidTransactionId;
		int			i;

		obx_read_rows(&f, sub);
		for (i = 0; i < f.nrows && !TransactionIdIsValid(xid); i++)
			xid = f.rows[i].inserting;
		pfree(f.rows);
		if (!TransactionIdIsValid(xid))
			return;
		obx_wait(sub, xid);
	}
}
