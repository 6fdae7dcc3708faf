/*-------------------------------------------------------------------------
 *
 * outbox_subs_keylock.c
 *		The locks of a named subscription's ordering keys: what keeps the
 *		state rows of one key in order while claims and completions of the
 *		subscription run side by side.
 *
 * Of the state rows of one key, the first that is not dead is the key's
 * head, the others are blocked behind it (outbox_subs_promote.c).  Whoever
 * adds a row to a key (a claim reading the log), or takes its head away
 * (a completion, a failure or a claim that makes it dead, a hole whose
 * append rolled back) or revives a row (retry_dead), holds the key's lock
 * until its transaction ends, taken before it reads the key's rows: so
 * what one of them decides from the key's rows (blocked or head; which
 * row to unblock) is never undone by another that had not committed yet.
 *
 * A key's lock is an advisory lock of the database on a 64-bit hash of
 * the subscription and the key, in a field of its own (KEY_FIELD).  Above
 * the keys' locks is one lock per subscription (KEYS_FIELD): taken in
 * RowExclusiveLock, which does not conflict with itself, by every holder
 * of a key's lock, and in ExclusiveLock, instead of any key's lock, by
 * who changes more keys at once than SUBS_KEY_LOCKS (a completion of many
 * keys, retry_dead_topic): so no transaction fills the lock table with
 * the locks of keys (53200 for every other transaction while it is open).
 *
 * Claims only try the locks, and a claim stops reading the log at a
 * message whose key it cannot lock now (another transaction is changing
 * the key): a claim holds the subscription's lock (outbox_subs_frontier.c)
 * while it reads, and whoever changes a key may be waiting for that lock
 * (complete_and_claim completes, then claims).  The others wait for the
 * locks, in the order of their hashes, before they change any state row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"

#include "outbox_subs.h"

/* the fields of these advisory locks (applications use 1 and 2) */
#define KEY_FIELD	0x4B4B
#define KEYS_FIELD	0x4B4C

/* the keys' locks a transaction takes at most */
#define SUBS_KEY_LOCKS	128

static int	key_locks = 0;		/* keys' locks taken in this transaction */
static bool callback = false;

static void
obx_keylock_xact(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT)
		key_locks = 0;
}

static void
obx_count_lock(void)
{
	if (!callback)
	{
		RegisterXactCallback(obx_keylock_xact, NULL);
		callback = true;
	}
	key_locks++;
}

static uint64
obx_key_hash(int32 sub, text *key)
{
	return DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(key),
											VARSIZE_ANY_EXHDR(key), (uint64) sub));
}

static void
obx_key_tag(LOCKTAG *tag, uint64 hash)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32), (uint32) hash,
						 KEY_FIELD);
}

static void
obx_keys_tag(LOCKTAG *tag, int32 sub)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) sub, 0, KEYS_FIELD);
}

/*
 * For a claim of subscription sub about to add a row to key: the key's
 * lock if it can have it now, until the transaction ends.  False when
 * another transaction changes the key (or all of them), or when this
 * transaction holds SUBS_KEY_LOCKS keys' locks already: the claim then
 * reads no further.
 */
bool
SubsKeyTryLock(int32 sub, text *key)
{
	LOCKTAG		tag;
	LockAcquireResult got;

	obx_keys_tag(&tag, sub);
	if (LockAcquire(&tag, RowExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	obx_key_tag(&tag, obx_key_hash(sub, key));
	got = LockAcquire(&tag, ExclusiveLock, false, true);
	if (got == LOCKACQUIRE_NOT_AVAIL)
		return false;
	if (got == LOCKACQUIRE_OK)
	{
		if (key_locks >= SUBS_KEY_LOCKS)
		{
			(void) LockRelease(&tag, ExclusiveLock, false);
			return false;
		}
		obx_count_lock();
	}
	return true;
}

typedef struct KeyLock
{
	int32		sub;
	uint64		hash;
} KeyLock;

static int
obx_cmp_keylock(const void *a, const void *b)
{
	const KeyLock *x = a;
	const KeyLock *y = b;

	if (x->sub != y->sub)
		return (x->sub > y->sub) - (x->sub < y->sub);
	return (x->hash > y->hash) - (x->hash < y->hash);
}

/*
 * Wait for the locks of the n keys keys[i] (text) of subscriptions
 * subs[i] (int4), held until the transaction ends: a subscription whose
 * keys would take this transaction past SUBS_KEY_LOCKS keys' locks gets
 * its lock of all keys instead.  Called before any of their state rows
 * changes.
 */
void
SubsKeyLockMany(int n, Datum *subs, Datum *keys)
{
	KeyLock    *locks;
	LOCKTAG		tag;
	int			i;
	int			first;

	if (n == 0)
		return;
	locks = palloc(sizeof(KeyLock) * n);
	for (i = 0; i < n; i++)
	{
		locks[i].sub = DatumGetInt32(subs[i]);
		locks[i].hash = obx_key_hash(locks[i].sub, DatumGetTextPP(keys[i]));
	}
	qsort(locks, n, sizeof(KeyLock), obx_cmp_keylock);
	for (first = 0; first < n;)
	{
		int32		sub = locks[first].sub;
		int			end;
		int			distinct = 0;

		for (end = first; end < n && locks[end].sub == sub; end++)
			if (end == first || locks[end].hash != locks[end - 1].hash)
				distinct++;
		obx_keys_tag(&tag, sub);
		if (key_locks + distinct > SUBS_KEY_LOCKS)
			(void) LockAcquire(&tag, ExclusiveLock, false, false);
		else
		{
			(void) LockAcquire(&tag, RowExclusiveLock, false, false);
			for (i = first; i < end; i++)
			{
				if (i > first && locks[i].hash == locks[i - 1].hash)
					continue;
				obx_key_tag(&tag, locks[i].hash);
				if (LockAcquire(&tag, ExclusiveLock, false, false) == LOCKACQUIRE_OK)
					obx_count_lock();
			}
		}
		first = end;
	}
	pfree(locks);
}

/*
 * The locks of every key of the n subscriptions subs (int4, repeats
 * allowed), until the transaction ends: for a change of any number of
 * their keys.  Called before any of their state rows changes.
 */
void
SubsKeyLockAll(int n, Datum *subs)
{
	int32	   *sorted = palloc(sizeof(int32) * Max(n, 1));
	LOCKTAG		tag;
	int			i;

	for (i = 0; i < n; i++)
		sorted[i] = DatumGetInt32(subs[i]);
	for (i = 1; i < n; i++)
	{
		int32		v = sorted[i];
		int			j = i;

		for (; j > 0 && sorted[j - 1] > v; j--)
			sorted[j] = sorted[j - 1];
		sorted[j] = v;
	}
	for (i = 0; i < n; i++)
	{
		if (i > 0 && sorted[i] == sorted[i - 1])
			continue;
		obx_keys_tag(&tag, sorted[i]);
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
	}
	pfree(sorted);
}
