/*-------------------------------------------------------------------------
 *
 * outbox_subs_lease.c
 *		Leases by range: the fresh messages without an ordering key that a
 *		claim of a named subscription leases (outbox_store_subs_claim.c)
 *		are kept as one row of outbox.subscription_lease for each read of
 *		the log, not as a state row each.  Here: their completion, and
 *		their turning into state rows for everything else.
 *
 * A claim of a batch of fresh messages so writes one row, and the
 * completion of the batch deletes it: under a held snapshot, which keeps
 * every row version written since, a message costs its subscription a
 * share of one row, not a state row inserted and deleted with three index
 * entries.  A failure, an extended or released lease and a lease that ran
 * out are rare, and the code that handles them knows state rows: the
 * leases of the row concerned become state rows first, as the claim would
 * have written them (attempt 1, leased by the row's owner until its
 * lease's end), and the row goes.  So a message is in a lease row or in a
 * state row, never both, and a state row's rules hold for it from then on.
 *
 * A row is found from a message by the message's position: the row of its
 * subscription with the greatest first_seq not after it, whose seqs
 * holds it (the reads of a subscription's log never overlap).  A backend
 * remembers the last rows its claims wrote, with the ids and positions of
 * their messages (LeaseMemo): the completion that follows in the same
 * session, as every pull loop and route does it, goes to its row by the
 * row's key instead of looking each message up in the log and in the
 * lease rows.  The memory only guides: the row is checked (its owner, its
 * lease's end, its positions), and what it does not find is looked up as
 * before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox_spi.h"
#include "outbox_subs.h"

/*
 * The lease rows that owner $3 holds on the messages $1 (uuid[]), in the
 * subscriptions named $2: their keys and the positions of those messages.
 */
#define LEASES_OF_IDS \
	"c AS MATERIALIZED (SELECT l.sub_id, l.first_seq, m.seq" \
	"  FROM outbox.message m" \
	"  JOIN outbox.subscription s ON s.topic OPERATOR(pg_catalog.=) m.topic" \
	"   AND s.name OPERATOR(pg_catalog.=) $2" \
	"  CROSS JOIN LATERAL (SELECT y.sub_id, y.first_seq, y.seqs, y.lease_owner" \
	"   FROM outbox.subscription_lease y" \
	"   WHERE y.sub_id OPERATOR(pg_catalog.=) s.sub_id" \
	"   AND y.first_seq OPERATOR(pg_catalog.<=) m.seq" \
	"   ORDER BY y.first_seq DESC LIMIT 1) l" \
	"  WHERE m.id OPERATOR(pg_catalog.=) ANY ($1)" \
	"  AND l.lease_owner OPERATOR(pg_catalog.=) $3" \
	"  AND m.seq OPERATOR(pg_catalog.=) ANY (l.seqs))"

/*
 * Complete: a row whose every message is completed goes, the others keep
 * the rest.  Returns how many messages were completed.
 */
SAVED_STATEMENT(stmt_complete) = {
	"WITH " LEASES_OF_IDS ","
	" g AS (SELECT c.sub_id, c.first_seq, pg_catalog.array_agg(c.seq) AS done"
	"  FROM c GROUP BY c.sub_id, c.first_seq),"
	" d AS (DELETE FROM outbox.subscription_lease x USING g"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  AND x.seqs OPERATOR(pg_catalog.<@) g.done"
	"  RETURNING x.sub_id, x.first_seq),"
	" u AS (UPDATE outbox.subscription_lease x SET seqs = ARRAY("
	"   SELECT q.seq FROM pg_catalog.unnest(x.seqs) AS q(seq)"
	"   WHERE q.seq OPERATOR(pg_catalog.<>) ALL (g.done) ORDER BY q.seq)"
	"  FROM g WHERE x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  AND NOT x.seqs OPERATOR(pg_catalog.<@) g.done"
	"  RETURNING x.sub_id, x.first_seq)"
	" SELECT pg_catalog.count(*) FROM c"
	" WHERE (c.sub_id, c.first_seq) IN (SELECT d.sub_id, d.first_seq FROM d"
	"  UNION ALL SELECT u.sub_id, u.first_seq FROM u)",
	SPI_OK_SELECT, 3, {UUIDARRAYOID, TEXTOID, TEXTOID}
};

/*
 * Complete the messages at the positions $4 of the lease row ($1, $2) that
 * owner $3 holds until $6, in the subscription named $5: as stmt_complete,
 * for one row known.  Returns how many were completed and whether the row
 * went, no row when there is no such row.
 */
SAVED_STATEMENT(stmt_complete_row) = {
	"WITH c AS MATERIALIZED (SELECT x.sub_id, x.first_seq,"
	"  x.seqs OPERATOR(pg_catalog.<@) $4 AS whole,"
	"  (SELECT pg_catalog.count(DISTINCT q.seq) FROM pg_catalog.unnest($4) AS q(seq)"
	"   WHERE q.seq OPERATOR(pg_catalog.=) ANY (x.seqs)) AS n"
	"  FROM outbox.subscription_lease x, outbox.subscription s"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.first_seq OPERATOR(pg_catalog.=) $2"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3 AND x.leased_until OPERATOR(pg_catalog.=) $6"
	"  AND s.sub_id OPERATOR(pg_catalog.=) x.sub_id AND s.name OPERATOR(pg_catalog.=) $5"
	"  FOR UPDATE OF x),"
	" d AS (DELETE FROM outbox.subscription_lease x USING c WHERE c.whole"
	"  AND x.sub_id OPERATOR(pg_catalog.=) c.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) c.first_seq),"
	" u AS (UPDATE outbox.subscription_lease x SET seqs = ARRAY("
	"   SELECT q.seq FROM pg_catalog.unnest(x.seqs) AS q(seq)"
	"   WHERE q.seq OPERATOR(pg_catalog.<>) ALL ($4) ORDER BY q.seq)"
	"  FROM c WHERE NOT c.whole AND c.n OPERATOR(pg_catalog.>) 0"
	"  AND x.sub_id OPERATOR(pg_catalog.=) c.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) c.first_seq)"
	" SELECT c.n, c.whole FROM c",
	SPI_OK_SELECT, 6, {INT4OID, INT8OID, TEXTOID, INT8ARRAYOID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * The leases of the rows deleted (the CTE l) become state rows, with the
 * messages' ids and keys from the log.
 */
#define LEASES_TO_STATE \
	" INSERT INTO outbox.subscription_state (sub_id, seq, id, ordering_key," \
	"  available_at, blocked, hole, attempts, leased_until, lease_owner)" \
	" SELECT l.sub_id, m.seq, m.id, m.ordering_key, l.leased_until, false, false, 1," \
	"  l.leased_until, l.lease_owner" \
	" FROM l JOIN outbox.subscription s ON s.sub_id OPERATOR(pg_catalog.=) l.sub_id" \
	" CROSS JOIN LATERAL pg_catalog.unnest(l.seqs) AS q(seq)" \
	" JOIN outbox.message m ON m.topic OPERATOR(pg_catalog.=) s.topic" \
	"  AND m.seq OPERATOR(pg_catalog.=) q.seq"

/* the rows that owner $3 holds on the messages $1 of subscriptions $2 */
SAVED_STATEMENT(stmt_to_state) = {
	"WITH " LEASES_OF_IDS ","
	" l AS (DELETE FROM outbox.subscription_lease x"
	"  USING (SELECT DISTINCT c.sub_id, c.first_seq FROM c) g"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  RETURNING x.sub_id, x.lease_owner, x.leased_until, x.seqs)"
	LEASES_TO_STATE,
	SPI_OK_INSERT, 3, {UUIDARRAYOID, TEXTOID, TEXTOID}
};

/*
 * The rows of subscription $1 whose lease ended at or before $2 and after
 * $3 (leases that ended before were seen by an earlier look), but not
 * those another transaction holds now: a completion, which a later look
 * sees through.
 */
SAVED_STATEMENT(stmt_expired_to_state) = {
	"WITH l AS (DELETE FROM outbox.subscription_lease x"
	"  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	"   SELECT y.ctid FROM outbox.subscription_lease y"
	"   WHERE y.leased_until OPERATOR(pg_catalog.<=) $2"
	"   AND y.leased_until OPERATOR(pg_catalog.>) $3"
	"   AND y.sub_id OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED))"
	"  RETURNING x.sub_id, x.lease_owner, x.leased_until, x.seqs)"
	LEASES_TO_STATE,
	SPI_OK_INSERT, 3, {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* the lease rows a backend remembers */
#define LEASE_MEMOS		8

typedef struct LeaseMemoItem
{
	pg_uuid_t	id;
	int64		seq;
} LeaseMemoItem;

/* a lease row that this backend's claim wrote, its messages by id */
typedef struct LeaseMemo
{
	int32		sub;			/* 0: an empty slot */
	int64		first_seq;
	TimestampTz until;
	char	   *owner;			/* in TopMemoryContext */
	int			n;
	LeaseMemoItem *items;		/* sorted by id, in TopMemoryContext */
} LeaseMemo;

static LeaseMemo memos[LEASE_MEMOS];
static int	memo_next = 0;

/* Is outbox.subscription_lease there (the tables of 1.5)? */
bool
SubsLeaseRows(void)
{
	return SubsHasTable("subscription_lease");
}

static int
obx_uuid_cmp(const void *a, const void *b)
{
	return memcmp(a, b, UUID_LEN);
}

/*
 * The ids of the n messages ids (a uuid[]) that are not among the ids in
 * column col of SPI_tuptable, as a uuid[]: those a completion looks up in
 * the lease rows after the state rows completed the others.
 */
Datum
SubsLeaseIdsLeft(Datum ids, int n, int col)
{
	uint64		ndone = SPI_processed;
	pg_uuid_t  *done = palloc(sizeof(pg_uuid_t) * Max(ndone, 1));
	Datum	   *elems;
	bool	   *nulls;
	Datum	   *left = palloc(sizeof(Datum) * Max(n, 1));
	int			nelems;
	int			nleft = 0;
	uint64		i;
	int			j;

	for (i = 0; i < ndone; i++)
	{
		bool		isnull;

		done[i] = *DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i],
											   SPI_tuptable->tupdesc, col, &isnull));
	}
	qsort(done, ndone, sizeof(pg_uuid_t), obx_uuid_cmp);
	deconstruct_array(DatumGetArrayTypeP(ids), UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &elems, &nulls, &nelems);
	for (j = 0; j < nelems; j++)
		if (!nulls[j] &&
			bsearch(DatumGetUUIDP(elems[j]), done, ndone, sizeof(pg_uuid_t),
					obx_uuid_cmp) == NULL)
			left[nleft++] = elems[j];
	return PointerGetDatum(construct_array(left, nleft, UUIDOID, UUID_LEN, false,
										   TYPALIGN_CHAR));
}

static int
obx_item_cmp(const void *a, const void *b)
{
	return memcmp(&((const LeaseMemoItem *) a)->id, &((const LeaseMemoItem *) b)->id,
				  UUID_LEN);
}

/*
 * Remember the lease row that the claim of subscription sub just wrote,
 * leased to owner until until: the rows of SPI_tuptable whose boolean column bycol
 * is true, their ids and positions in columns idcol and seqcol.
 */
void
SubsLeaseNote(int32 sub, TimestampTz until, text *owner, int idcol, int seqcol,
			  int bycol)
{
	SPITupleTable *tt = SPI_tuptable;
	LeaseMemo  *m;
	LeaseMemoItem *items;
	int			n = 0;
	uint64		i;

	items = MemoryContextAlloc(TopMemoryContext,
							   sizeof(LeaseMemoItem) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		by = SPI_getbinval(tt->vals[i], tt->tupdesc, bycol, &isnull);

		if (isnull || !DatumGetBool(by))
			continue;
		items[n].id = *DatumGetUUIDP(SPI_getbinval(tt->vals[i], tt->tupdesc, idcol,
												   &isnull));
		items[n].seq = DatumGetInt64(SPI_getbinval(tt->vals[i], tt->tupdesc, seqcol,
												   &isnull));
		n++;
	}
	if (n == 0)
	{
		pfree(items);
		return;
	}
	m = &memos[memo_next];
	memo_next = (memo_next + 1) % LEASE_MEMOS;
	if (m->items != NULL)
		pfree(m->items);
	if (m->owner != NULL)
		pfree(m->owner);
	m->owner = MemoryContextStrdup(TopMemoryContext, text_to_cstring(owner));
	m->sub = sub;
	m->until = until;
	m->n = n;
	m->first_seq = items[0].seq;
	for (i = 1; i < n; i++)
		m->first_seq = Min(m->first_seq, items[i].seq);
	qsort(items, n, sizeof(LeaseMemoItem), obx_item_cmp);
	m->items = items;
}

static void
obx_memo_forget(LeaseMemo *m)
{
	m->sub = 0;
}

/*
 * Complete the messages at positions seqs[0..n-1] of the lease row that m
 * remembers: how many were completed, or -1 when the row is not there as
 * remembered (no longer, or not of subscription name).
 */
static int64
obx_memo_complete(LeaseMemo *m, Datum *seqs, int n, text *owner, text *name)
{
	Datum		args[6];
	bool		isnull;
	int64		done;

	args[0] = Int32GetDatum(m->sub);
	args[1] = Int64GetDatum(m->first_seq);
	args[2] = PointerGetDatum(owner);
	args[3] = PointerGetDatum(construct_array(seqs, n, INT8OID, sizeof(int64),
											  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	args[4] = PointerGetDatum(name);
	args[5] = TimestampTzGetDatum(m->until);
	if (SpiExecute(&stmt_complete_row, args, NULL, false, 0) == 0)
	{
		obx_memo_forget(m);
		return -1;
	}
	done = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									   1, &isnull));
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
								   &isnull)))
		obx_memo_forget(m);
	return done;
}

/* stmt_complete: the messages ids (a uuid[]) looked up */
static int64
obx_lookup_complete(Datum ids, text *owner, text *name)
{
	Datum		args[3];
	Datum		n;
	bool		isnull;

	args[0] = ids;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	if (SpiExecute(&stmt_complete, args, NULL, false, 1) == 0)
		return 0;
	n = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(n);
}

/*
 * Complete the messages ids (a uuid[]) that owner leased by range in the
 * subscriptions named name: those of rows this backend remembers through
 * their rows, the others by look-up.  Returns how many.  Runs inside the
 * caller's SPI connection.
 */
int64
SubsLeaseComplete(Datum ids, text *owner, text *name)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	bool	   *known;
	Datum	   *group;
	int			nleft = 0;
	int64		done = 0;
	char	   *owner_str;
	int			k;
	int			j;

	deconstruct_array(DatumGetArrayTypeP(ids), UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &elems, &nulls, &nelems);
	owner_str = text_to_cstring(owner);
	known = palloc0(sizeof(bool) * Max(nelems, 1));
	group = palloc(sizeof(Datum) * Max(nelems, 1));
	for (k = 0; k < LEASE_MEMOS; k++)
	{
		LeaseMemo  *m = &memos[k];
		int		   *at = palloc(sizeof(int) * Max(nelems, 1));
		int			n = 0;
		LeaseMemoItem key;
		LeaseMemoItem *item;
		int64		r;

		if (m->sub == 0 || strcmp(m->owner, owner_str) != 0)
		{
			pfree(at);
			continue;
		}
		for (j = 0; j < nelems; j++)
		{
			if (nulls[j] || known[j])
				continue;
			key.id = *DatumGetUUIDP(elems[j]);
			item = bsearch(&key, m->items, m->n, sizeof(LeaseMemoItem), obx_item_cmp);
			if (item == NULL)
				continue;
			group[n] = Int64GetDatum(item->seq);
			at[n++] = j;
		}
		if (n == 0)
		{
			pfree(at);
			continue;
		}
		r = obx_memo_complete(m, group, n, owner, name);
		/* a row not there as remembered: its messages are looked up below */
		if (r >= 0)
		{
			done += r;
			for (j = 0; j < n; j++)
				known[at[j]] = true;
		}
		pfree(at);
	}
	for (j = 0; j < nelems; j++)
		if (!nulls[j] && !known[j])
			group[nleft++] = elems[j];
	if (nleft > 0)
		done += obx_lookup_complete(PointerGetDatum(construct_array(group, nleft, UUIDOID,
																	UUID_LEN, false,
																	TYPALIGN_CHAR)),
									owner, name);
	return done;
}

/*
 * The leases by range that owner holds on ids (a uuid[]) in the
 * subscriptions named name become state rows, with those of the other
 * messages of their rows.  Returns how many state rows were written.
 * Runs inside the caller's SPI connection.
 */
int64
SubsLeaseToState(Datum ids, text *owner, text *name)
{
	Datum		args[3];

	args[0] = ids;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	return (int64) SpiExecute(&stmt_to_state, args, NULL, false, 0);
}

/*
 * The leases by range of subscription sub that ended at or before now and
 * after low become state rows: their lease ran out, and the claim's look
 * for leases that ran out takes them over or makes them dead.  Returns how
 * many.  Runs inside the caller's SPI connection.
 */
int64
SubsLeaseExpiredToState(int32 sub, TimestampTz now, TimestampTz low)
{
	Datum		args[3];

	args[0] = Int32GetDatum(sub);
	args[1] = TimestampTzGetDatum(now);
	args[2] = TimestampTzGetDatum(low);
	return (int64) SpiExecute(&stmt_expired_to_state, args, NULL, false, 0);
}
