/*-------------------------------------------------------------------------
 *
 * outbox_subs_memo.c
 *		What a backend remembers of the lease rows its claims wrote
 *		(outbox_subs_lease.c): each row's key, lease end and owner, and
 *		the ids, positions and ordering keys of its messages.
 *
 * Every pull loop and every route completes in the session that claimed:
 * with this memory the completion goes to the lease row by the row's key,
 * and takes the locks of the keys among its messages before it changes
 * anything, instead of looking each message up in the log and in the
 * lease rows.  The memory only guides: the statement checks the row, and
 * what it does not find is looked up.  The last LEASE_MEMOS rows are kept.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "outbox_subs.h"

#define LEASE_MEMOS		8

typedef struct LeaseMemoItem
{
	pg_uuid_t	id;
	int64		seq;
	text	   *key;			/* NULL: none */
} LeaseMemoItem;

/* a lease row that this backend's claim wrote */
typedef struct LeaseMemo
{
	MemoryContext cxt;			/* holds owner and items */
	int32		sub;			/* 0: an empty slot */
	int64		first_seq;
	TimestampTz until;
	char	   *owner;
	int			n;
	LeaseMemoItem *items;		/* sorted by id */
} LeaseMemo;

static LeaseMemo memos[LEASE_MEMOS];
static int	memo_next = 0;

static int
obx_item_cmp(const void *a, const void *b)
{
	return memcmp(&((const LeaseMemoItem *) a)->id, &((const LeaseMemoItem *) b)->id,
				  UUID_LEN);
}

/*
 * Remember the lease row that the claim of subscription sub just wrote,
 * leased to owner until until: the rows of SPI_tuptable whose boolean
 * column bycol is true, their ids, positions and keys in columns idcol,
 * seqcol and keycol.
 */
void
SubsMemoNote(int32 sub, TimestampTz until, text *owner, int idcol, int seqcol,
			 int keycol, int bycol)
{
	SPITupleTable *tt = SPI_tuptable;
	LeaseMemo  *m = &memos[memo_next];
	MemoryContext old;
	int			n = 0;
	uint64		i;

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		by = SPI_getbinval(tt->vals[i], tt->tupdesc, bycol, &isnull);

		if (!isnull && DatumGetBool(by))
			n++;
	}
	if (n == 0)
		return;
	memo_next = (memo_next + 1) % LEASE_MEMOS;
	if (m->cxt == NULL)
		m->cxt = AllocSetContextCreate(TopMemoryContext, "outbox lease memo",
									   ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(m->cxt);
	old = MemoryContextSwitchTo(m->cxt);
	m->items = palloc(sizeof(LeaseMemoItem) * n);
	m->owner = text_to_cstring(owner);
	m->n = 0;
	for (i = 0; i < SPI_processed; i++)
	{
		LeaseMemoItem *item = &m->items[m->n];
		bool		isnull;
		Datum		by = SPI_getbinval(tt->vals[i], tt->tupdesc, bycol, &isnull);
		Datum		key;

		if (isnull || !DatumGetBool(by))
			continue;
		item->id = *DatumGetUUIDP(SPI_getbinval(tt->vals[i], tt->tupdesc, idcol,
												&isnull));
		item->seq = DatumGetInt64(SPI_getbinval(tt->vals[i], tt->tupdesc, seqcol,
												&isnull));
		key = SPI_getbinval(tt->vals[i], tt->tupdesc, keycol, &isnull);
		item->key = isnull ? NULL : DatumGetTextPCopy(key);
		if (m->n == 0 || item->seq < m->first_seq)
			m->first_seq = item->seq;
		m->n++;
	}
	MemoryContextSwitchTo(old);
	qsort(m->items, m->n, sizeof(LeaseMemoItem), obx_item_cmp);
	m->sub = sub;
	m->until = until;
}

/* Forget the row of group g */
void
SubsMemoForget(const LeaseGroup *g)
{
	memos[g->memo].sub = 0;
}

/*
 * The ids elems[0..n-1] (uuids; nulls[j], or known[j]: left out) that the
 * remembered rows of owner hold, by row: returns how many groups, in
 * *groups.  Each group's positions and keys are in the caller's memory
 * context, at[i] the index in elems of its i-th message.
 */
int
SubsMemoGroups(Datum *elems, bool *nulls, const bool *known, int nelems,
			   text *owner, LeaseGroup **groups)
{
	char	   *who = text_to_cstring(owner);
	bool	   *seen = palloc0(sizeof(bool) * Max(nelems, 1));
	int			ngroups = 0;
	int			k;

	*groups = palloc(sizeof(LeaseGroup) * LEASE_MEMOS);
	for (k = 0; k < LEASE_MEMOS; k++)
	{
		LeaseMemo  *m = &memos[k];
		LeaseGroup *g = &(*groups)[ngroups];
		int			j;

		if (m->sub == 0 || strcmp(m->owner, who) != 0)
			continue;
		g->n = 0;
		for (j = 0; j < nelems; j++)
		{
			LeaseMemoItem probe;
			LeaseMemoItem *item;

			/* (seen: in an earlier group, a row written again after a rollback) */
			if (nulls[j] || known[j] || seen[j])
				continue;
			probe.id = *DatumGetUUIDP(elems[j]);
			item = bsearch(&probe, m->items, m->n, sizeof(LeaseMemoItem), obx_item_cmp);
			if (item == NULL)
				continue;
			seen[j] = true;
			if (g->n == 0)
			{
				g->seqs = palloc(sizeof(Datum) * nelems);
				g->keys = palloc(sizeof(Datum) * nelems);
				g->keynulls = palloc(sizeof(bool) * nelems);
				g->at = palloc(sizeof(int) * nelems);
			}
			g->seqs[g->n] = Int64GetDatum(item->seq);
			g->keynulls[g->n] = item->key == NULL;
			g->keys[g->n] = item->key == NULL ? (Datum) 0 :
				PointerGetDatum(DatumGetTextPCopy(PointerGetDatum(item->key)));
			g->at[g->n] = j;
			g->n++;
		}
		if (g->n == 0)
			continue;
		g->memo = k;
		g->sub = m->sub;
		g->first_seq = m->first_seq;
		g->until = m->until;
		ngroups++;
	}
	return ngroups;
}
