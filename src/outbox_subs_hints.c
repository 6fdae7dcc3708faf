/*-------------------------------------------------------------------------
 *
 * outbox_subs_hints.c
 *		The due hints of named subscriptions shared between backends: where
 *		their due reads start (outbox_subs_marks.c), as the backends that
 *		claimed from them last left it.
 *
 * A backend's due hint lets its next claim of a subscription read the due
 * rows on from where its last full read ended, instead of from the first
 * entry of their index, past every row taken since the oldest snapshot
 * still held.  A backend without one (a new connection per claim, or one
 * of a pool's connections whose own hint is a second old) would read from
 * the first entry; with the hint another backend published here, from a
 * later read from the first entry, it reads on from there.  A few hundred
 * subscriptions are kept, the one read from its first entry longest ago
 * making room; one LWLock guards them, each access a scan of the array.
 * Only a preloaded library has them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/lwlock.h"

#include "outbox.h"
#include "outbox_subs.h"

#define SUBS_HINTS_SHMEM_NAME	"krizaka_outbox subscription hints"
#define SUBS_SHARED_HINTS		256

typedef struct SharedDueHint
{
	Oid			dboid;			/* InvalidOid: unused */
	Oid			relid;			/* outbox.subscription_state of that database */
	int32		sub_id;
	SubsHint	hint;
} SharedDueHint;

typedef struct SubsHintsShared
{
	LWLock	   *lock;
	SharedDueHint hints[SUBS_SHARED_HINTS];
} SubsHintsShared;

static SubsHintsShared *subs_hints = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
obx_hints_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(SubsHintsShared));
	RequestNamedLWLockTranche(SUBS_HINTS_SHMEM_NAME, 1);
}

static void
obx_hints_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	subs_hints = ShmemInitStruct(SUBS_HINTS_SHMEM_NAME, sizeof(SubsHintsShared), &found);
	if (!found)
	{
		memset(subs_hints, 0, sizeof(SubsHintsShared));
		subs_hints->lock = &(GetNamedLWLockTranche(SUBS_HINTS_SHMEM_NAME))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Install the shared memory hooks; only when preloaded */
void
SubsHintsInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = obx_hints_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = obx_hints_startup;
}

/* The entry of subscription sub of table relid; the lock is held */
static SharedDueHint *
obx_hint_entry(Oid relid, int32 sub)
{
	int			i;

	for (i = 0; i < SUBS_SHARED_HINTS; i++)
	{
		SharedDueHint *e = &subs_hints->hints[i];

		if (e->dboid == MyDatabaseId && e->relid == relid && e->sub_id == sub)
			return e;
	}
	return NULL;
}

/* The hint of subscription sub published last into *hint; false if none */
bool
SubsSharedHintGet(Oid relid, int32 sub, SubsHint *hint)
{
	SharedDueHint *e;

	if (subs_hints == NULL)
		return false;
	LWLockAcquire(subs_hints->lock, LW_SHARED);
	e = obx_hint_entry(relid, sub);
	if (e != NULL)
		*hint = e->hint;
	LWLockRelease(subs_hints->lock);
	return e != NULL;
}

/*
 * Publish a backend's hint of subscription sub, unless the one kept comes
 * from a later read from the first entry
 */
void
SubsSharedHintPut(Oid relid, int32 sub, const SubsHint *hint)
{
	SharedDueHint *e;
	int			i;

	if (subs_hints == NULL)
		return;
	LWLockAcquire(subs_hints->lock, LW_EXCLUSIVE);
	e = obx_hint_entry(relid, sub);
	if (e == NULL)
	{
		/* an unused entry, or the one read from its first entry longest ago */
		e = &subs_hints->hints[0];
		for (i = 1; i < SUBS_SHARED_HINTS && e->dboid != InvalidOid; i++)
		{
			SharedDueHint *other = &subs_hints->hints[i];

			if (other->dboid == InvalidOid || other->hint.walked < e->hint.walked)
				e = other;
		}
		e->dboid = MyDatabaseId;
		e->relid = relid;
		e->sub_id = sub;
		e->hint = *hint;
	}
	else if (hint->walked >= e->hint.walked)
		e->hint = *hint;
	LWLockRelease(subs_hints->lock);
}
