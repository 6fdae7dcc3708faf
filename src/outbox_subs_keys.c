/*-------------------------------------------------------------------------
 *
 * outbox_subs_keys.c
 *		The ordering keys a claim of a named subscription reads from the log:
 *		whether each keyed message will be its key's head, will wait behind
 *		an earlier message of its key, or must be left for a later claim
 *		because another transaction in progress is changing its key's rows.
 *
 * The state rows of a key (outbox.subscription_state, by
 * subscription_state_key_idx) are read with a dirty snapshot: it shows
 * the rows of transactions in progress, with the transaction that inserts
 * or deletes each.  A claim that sees such a row of an earlier message of
 * the key cannot tell from its own snapshot whether the key will have a
 * head when that transaction ends: a completion in progress may be
 * deleting the last pending message of the key (its hand-over of the key
 * did not see the claim's row, which it did not know), and a claim in
 * progress may have leased the key's head (a row the claim's snapshot
 * does not show at all).  So the claim reads the log up to that message
 * only; a claim after that transaction reads on.  The probe runs before
 * the claim's statement takes its snapshot: a transaction seen committed
 * here has committed before that snapshot too.
 *
 * Claims and completions that leave no message waiting behind another of
 * its key need not keep the subscription's lock until they commit
 * (outbox_store_subs_claim.c, outbox_store_subs.c): whoever comes next
 * finds what they changed in progress here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "executor/tuptable.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_subs.h"

/* Do entries a and b have the same ordering key (neither NULL)? */
static bool
obx_same_key(const StreamEntry *a, const StreamEntry *b)
{
	return VARSIZE_ANY_EXHDR(a->key) == VARSIZE_ANY_EXHDR(b->key) &&
		memcmp(VARDATA_ANY(a->key), VARDATA_ANY(b->key),
			   VARSIZE_ANY_EXHDR(a->key)) == 0;
}

/*
 * The first state row of key before position seq in subscription sub, as
 * the open scan shows it: KEY_FREE (none), KEY_WAITS (settled: the message
 * will wait behind it) or KEY_UNSETTLED (another transaction in progress
 * inserts or changes it, *changer).
 */
#define KEY_FREE		0
#define KEY_WAITS		1
#define KEY_UNSETTLED	2

static int
obx_key_rows(IndexScanDesc scan, TupleTableSlot *slot, SnapshotData *dirty,
			 ScanKeyData *keys, int32 sub, text *key, int64 seq,
			 TransactionId *changer)
{
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT4EQ, Int32GetDatum(sub));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(key));
	ScanKeyEntryInitialize(&keys[2], 0, 3, BTLessStrategyNumber, InvalidOid,
						   InvalidOid, F_INT8LT, Int64GetDatum(seq));
	index_rescan(scan, keys, 3, NULL, 0);
	if (!index_getnext_slot(scan, ForwardScanDirection, slot))
		return KEY_FREE;
	if (!TransactionIdIsValid(dirty->xmin) && !TransactionIdIsValid(dirty->xmax))
		return KEY_WAITS;
	*changer = TransactionIdIsValid(dirty->xmin) ? dirty->xmin : dirty->xmax;
	return KEY_UNSETTLED;
}

/*
 * Of the n entries read from the log for subscription sub, how many the
 * claim may take: all of them, or those before the first keyed message
 * whose key another transaction in progress is changing.  *waits is set
 * when one of those taken will wait behind an earlier message of its key
 * (a state row, or an entry before it), or is a keyed append still in
 * progress: then the claim keeps the subscription's lock until it ends.
 * *changer is the transaction that changes the first key left, if any.
 */
int
SubsProbeKeys(int32 sub, const StreamEntry *entries, int n, bool *waits,
			  TransactionId *changer)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	Oid			relid = get_relname_relid("subscription_state", nsp);
	Oid			indexid = get_relname_relid("subscription_state_key_idx", nsp);
	Relation	heap = NULL;
	Relation	index = NULL;
	IndexScanDesc scan = NULL;
	TupleTableSlot *slot = NULL;
	SnapshotData dirty;
	ScanKeyData keys[3];
	int			i;

	*waits = false;
	*changer = InvalidTransactionId;
	if (!OidIsValid(relid) || !OidIsValid(indexid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox.subscription_state or its index subscription_state_key_idx is missing")));
	for (i = 0; i < n; i++)
	{
		const StreamEntry *e = &entries[i];
		int			j;
		int			rows;

		if (e->key == NULL)
			continue;
		if (scan == NULL)
		{
			heap = table_open(relid, AccessShareLock);
			index = index_open(indexid, AccessShareLock);
			InitDirtySnapshot(dirty);
			scan = ObxIndexBeginScan(heap, index, &dirty, 3);
			slot = table_slot_create(heap, NULL);
		}
		rows = obx_key_rows(scan, slot, &dirty, keys, sub, e->key, e->seq, changer);
		if (rows == KEY_UNSETTLED)
			break;
		if (rows == KEY_WAITS || e->in_progress)
			*waits = true;
		for (j = 0; j < i && !*waits; j++)
			if (entries[j].key != NULL && obx_same_key(&entries[j], e))
				*waits = true;
	}
	if (scan != NULL)
	{
		ExecDropSingleTupleTableSlot(slot);
		index_endscan(scan);
		index_close(index, AccessShareLock);
		table_close(heap, AccessShareLock);
	}
	return i;
}
