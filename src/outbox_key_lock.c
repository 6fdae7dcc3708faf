/*-------------------------------------------------------------------------
 *
 * outbox_key_lock.c
 *		The order of an ordering key's appends: an append with a key waits
 *		for every other open transaction that appended to the key.
 *
 * The messages of a topic and key take their positions in the order their
 * transactions commit, so an append with a key takes its position only
 * when no other transaction that appended to the key is still open.
 * Which transactions those are is read in the table: a dirty read of the
 * key's newest entries in message_key_idx sees the rows of appends in
 * progress, and the append waits for the end of the transaction that
 * inserted one (XactLockTableWait, as an insert into a unique index waits
 * for a conflicting insert in progress), then reads again.
 *
 * The read and the insert after it hold a lock of the key, so two appends
 * of a key cannot both read before either inserted: an advisory lock of
 * the database on a 64-bit hash of the topic and the key, in a field of
 * its own (KEY_LOCK_FIELD) so as not to meet the advisory locks of
 * applications, taken before the read and released once the row is in
 * its indexes (KeyLockRelease).  A transaction holds at most one such lock
 * at a time however many keys it appends to, so a bulk append of any
 * number of keys never fills the lock table (which failed every other
 * producer's keyed append with 53200 while it was open), and two keys wait
 * for each other only for one insert, and only when their 64-bit hashes
 * collide.
 *
 * Why the newest entry that a dirty read sees decides: every append of the
 * key read and inserted under the lock, after every earlier transaction of
 * the key had ended, so an open transaction's row is the newest of the
 * key, unless it is the reader's own or was rolled back (invisible).  A
 * row version written by an UPDATE in progress (a claim, a completion) is
 * not an append: its message was appended by a transaction that had
 * committed, or it is the same transaction's, whose original version the
 * read meets as well.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "outbox_compat.h"
#include "outbox_stream.h"

/* the field of the advisory locks of ordering keys (applications use 1, 2) */
#define KEY_LOCK_FIELD	0x4B4F

static LOCKTAG key_lock_tag;
static bool key_lock_held = false;	/* by the append under way */

static TransactionId obx_key_appender(Oid relid, Oid indexid, text *topic,
									  text *key);

/*
 * Before an append of topic with ordering key key (NULL: none): wait until
 * no other transaction that appended to the key is open, and hold the
 * key's lock until KeyLockRelease, once the row is in.  Called at the
 * start of every append, which also forgets a lock an error took away.
 */
void
KeyLockTake(text *topic, text *key)
{
	uint64		topic_hash;
	uint64		hash;
	Oid			relid;
	Oid			indexid;

	key_lock_held = false;
	if (key == NULL)
		return;
	topic_hash = DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(topic),
												  VARSIZE_ANY_EXHDR(topic), 0));
	hash = DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(key),
											VARSIZE_ANY_EXHDR(key), topic_hash));
	SET_LOCKTAG_ADVISORY(key_lock_tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, KEY_LOCK_FIELD);
	relid = StreamMessageRelid();
	indexid = StreamKeyIndexRelid();
	if (!OidIsValid(relid) || !OidIsValid(indexid))
	{
		/* its appenders cannot be read: wait for them, until the end */
		(void) LockAcquire(&key_lock_tag, ExclusiveLock, false, false);
		return;
	}
	for (;;)
	{
		TransactionId xid;

		(void) LockAcquire(&key_lock_tag, ExclusiveLock, false, false);
		xid = obx_key_appender(relid, indexid, topic, key);
		if (!TransactionIdIsValid(xid))
			break;
		(void) LockRelease(&key_lock_tag, ExclusiveLock, false);
		XactLockTableWait(xid, NULL, NULL, XLTW_None);
	}
	key_lock_held = true;
}

/* Once the append's row is in its indexes: the key's lock goes. */
void
KeyLockRelease(void)
{
	if (!key_lock_held)
		return;
	key_lock_held = false;
	(void) LockRelease(&key_lock_tag, ExclusiveLock, false);
}

/*
 * The open transaction, other than this one, that appended the newest
 * message of topic and key in outbox.message (relid, its index
 * message_key_idx indexid), or InvalidTransactionId.
 */
static TransactionId
obx_key_appender(Oid relid, Oid indexid, text *topic, text *key)
{
	Relation	heap;
	Relation	index;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	SnapshotData dirty;
	ScanKeyData keys[2];
	TransactionId appender = InvalidTransactionId;

	heap = table_open(relid, RowExclusiveLock);
	index = index_open(indexid, RowExclusiveLock);
	InitDirtySnapshot(dirty);
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ,
						   PointerGetDatum(topic));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[1], F_TEXTEQ,
						   PointerGetDatum(key));
	scan = ObxIndexBeginScan(heap, index, &dirty, 2);
	index_rescan(scan, keys, 2, NULL, 0);
	slot = table_slot_create(heap, NULL);
	while (index_getnext_slot(scan, BackwardScanDirection, slot))
	{
		HeapTuple	tuple;

		if (!TransactionIdIsValid(dirty.xmin))
			break;				/* committed, or this transaction's */
		tuple = ExecFetchSlotHeapTuple(slot, false, NULL);
		if (tuple->t_data->t_infomask & HEAP_UPDATED)
			continue;			/* an update in progress, not an append */
		appender = dirty.xmin;
		break;
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(index, RowExclusiveLock);
	table_close(heap, RowExclusiveLock);
	return appender;
}
