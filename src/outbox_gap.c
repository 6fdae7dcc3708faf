/*-------------------------------------------------------------------------
 *
 * outbox_gap.c
 *		The appends in their gap: between taking a position from the
 *		sequence and having their row in the stream index.
 *
 * A named subscription reads its topic's stream version by version
 * (outbox_subs_scan.c), which sees every append that has its index entry,
 * committed or still in progress; the ones in progress become holes that
 * later claims look at again.  What that read cannot see is an
 * append that took its position and has not inserted its row yet.  So
 * each append records a floor in its backend's slot before it takes a
 * position (one above the last position the backend knew: positions only
 * grow), and clears it once its row is in: a gap lasts one insert, never
 * a transaction, and nothing the append waits for later (a lock, the
 * client, a PREPARE) holds readers back.
 *
 * GapHorizon takes a position first, then reads every slot: an append
 * given a position below it took it before, so its floor was recorded
 * before (the sequence's buffer lock, which both took in turn, orders the
 * two), and either it is still there or the row is in the index.  A claim
 * reads the stream only below that horizon.
 *
 * An error in the gap ends it with the (sub)transaction, whose rollback
 * takes the row away too.
 *
 * A server that does not preload the library has no slots.  There each
 * append in its gap holds a lock of its database (GAP_LOCK, taken by
 * appends in a mode that never makes them wait for each other), and
 * GapTryHorizon takes it in a mode that conflicts with theirs, without
 * waiting: when it gets it, no append is in its gap, and the position it
 * takes then is a horizon.  The lock is a session lock, released at the
 * end of the gap whatever resource owner is current then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_stream.h"

#define GAP_SHMEM_NAME	"krizaka_outbox gaps"

/*
 * The lock of the appends in their gap without preloading: an advisory
 * lock tag of the database in a field of its own (the SQL functions use 1
 * and 2, ordering keys 0x4B4F).  Appends take it in RowExclusiveLock, which
 * does not conflict with itself; a horizon in ShareLock, which conflicts.
 */
#define GAP_LOCK_FIELD	0x4B47
#define GAP_LOCK_TAG(tag) \
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, GAP_LOCK_FIELD)

typedef struct GapSlot
{
	pg_atomic_uint64 floor;		/* 0: not in a gap */
	Oid			dboid;
} GapSlot;

static GapSlot *gap_slots = NULL;
static bool gap_open = false;
static bool gap_locked = false;	/* without preloading: GAP_LOCK is held */

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* the backends and auxiliary processes: prepared transactions append nothing */
static int
obx_nslots(void)
{
	return ObxFirstPreparedProc;
}

static void
obx_gap_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(mul_size(obx_nslots(), sizeof(GapSlot)));
}

static void
obx_gap_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	gap_slots = ShmemInitStruct(GAP_SHMEM_NAME,
								mul_size(obx_nslots(), sizeof(GapSlot)), &found);
	if (!found)
		for (i = 0; i < obx_nslots(); i++)
		{
			pg_atomic_init_u64(&gap_slots[i].floor, 0);
			gap_slots[i].dboid = InvalidOid;
		}
	LWLockRelease(AddinShmemInitLock);
}

/* A (sub)transaction that ends ends the gap of an append it was in. */
static void
obx_gap_xact(XactEvent event, void *arg)
{
	GapEnd();
}

static void
obx_gap_subxact(SubXactEvent event, SubTransactionId mySubid,
				SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		GapEnd();
}

/*
 * Install the transaction callbacks, and when preloaded the shared memory
 * hooks.
 */
void
OutboxGapInit(bool preloaded)
{
	if (preloaded)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = obx_gap_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = obx_gap_startup;
	}
	RegisterXactCallback(obx_gap_xact, NULL);
	RegisterSubXactCallback(obx_gap_subxact, NULL);
}

/* Whether gaps are recorded: only when the library is preloaded. */
bool
GapAvailable(void)
{
	return gap_slots != NULL;
}

/* Before an append takes its position. */
void
GapBegin(void)
{
	GapSlot    *slot;

	if (gap_slots == NULL)
	{
		LOCKTAG		tag;

		/* without preloading: the lock, for the tables that have positions */
		if (gap_locked || !StreamSchema())
			return;
		GAP_LOCK_TAG(tag);
		(void) LockAcquire(&tag, RowExclusiveLock, true, false);
		gap_locked = true;
		return;
	}
	if (!StreamAvailable())
		return;
	slot = &gap_slots[ObxMyProcNumber];
	slot->dboid = MyDatabaseId;
	pg_write_barrier();
	pg_atomic_write_u64(&slot->floor, (uint64) StreamFloor());
	gap_open = true;
	pg_memory_barrier();
}

/* Once the append's row (or rows) are in the index. */
void
GapEnd(void)
{
	if (gap_locked)
	{
		LOCKTAG		tag;

		GAP_LOCK_TAG(tag);
		gap_locked = false;
		(void) LockRelease(&tag, RowExclusiveLock, true);
	}
	if (!gap_open)
		return;
	pg_write_barrier();
	pg_atomic_write_u64(&gap_slots[ObxMyProcNumber].floor, 0);
	gap_open = false;
}

/*
 * The first position of this database an append may still be about to
 * insert: every position below it is in the stream index, or never will
 * be.
 */
int64
GapHorizon(void)
{
	int64		horizon = StreamTakePosition();
	int			i;

	pg_memory_barrier();
	for (i = 0; i < obx_nslots(); i++)
	{
		int64		floor = (int64) pg_atomic_read_u64(&gap_slots[i].floor);

		if (floor == 0)
			continue;
		pg_read_barrier();
		if (gap_slots[i].dboid == MyDatabaseId && floor < horizon)
			horizon = floor;
	}
	return horizon;
}

/*
 * Without preloading: a horizon into *horizon, when no append of this
 * database is in its gap now; false, and nothing taken, when one is (the
 * caller keeps what it knew).  Never waits.
 */
bool
GapTryHorizon(int64 *horizon)
{
	LOCKTAG		tag;

	GAP_LOCK_TAG(tag);
	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	*horizon = StreamTakePosition();
	(void) LockRelease(&tag, ShareLock, false);
	return true;
}
