/*-------------------------------------------------------------------------
 *
 * outbox_shmem_backend.c
 *		The shared state as ordinary backends use it: waking the launcher
 *		or a database's drain worker, the probes of CREATE EXTENSION, the
 *		holdoffs of DROP/ALTER/CREATE DATABASE, whether a worker is there,
 *		and the routes generation.
 *
 * The caller is outbox_wakeup.c, in any backend; the launcher and the
 * drain workers act on what these functions leave (outbox_shmem.c).  Each
 * does its work under the lock of the shared state in one go.  Without a
 * preloaded library there is no shared state (obx_shared is NULL) and
 * they do nothing; the routes generation is read and bumped only where
 * the library is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"

#include "outbox.h"
#include "outbox_shmem_int.h"

static OutboxWorkerSlot *obx_find_slot(Oid dboid);

/* Set the launcher's latch, if it runs. */
void
ShmemWakeLauncher(void)
{
	if (obx_shared == NULL)
		return;

	LWLockAcquire(obx_shared->lock, LW_SHARED);
	if (obx_shared->launcher_latch != NULL)
		SetLatch(obx_shared->launcher_latch);
	LWLockRelease(obx_shared->lock);
}

/*
 * Ask the drain worker of a database for a round, if one runs: its wake
 * flag, then its latch (which PostgreSQL also sets for reasons of its own,
 * so the flag says that the round is wanted: ShmemWorkerTakeWake).  The
 * worker's own commits do not wake it: its next due time already covers
 * what its round changed, and waking itself could turn its loop into a
 * busy one.
 */
void
ShmemWakeWorker(Oid dboid)
{
	OutboxWorkerSlot *slot;

	if (obx_shared == NULL)
		return;

	LWLockAcquire(obx_shared->lock, LW_SHARED);
	slot = obx_find_slot(dboid);
	if (slot != NULL && slot->latch != NULL && slot->info.pid != MyProcPid)
	{
		pg_atomic_write_u32(&slot->wake, 1);
		SetLatch(slot->latch);
	}
	LWLockRelease(obx_shared->lock);
}

/*
 * Tell the launcher that the extension now exists in a database, so that it
 * starts a worker there without waiting for its next periodic look.
 */
void
ShmemRequestProbe(Oid dboid)
{
	int			i;
	bool		known = false;

	if (obx_shared == NULL)
		return;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < obx_shared->nprobes; i++)
		known |= (obx_shared->probes[i] == dboid);
	if (!known)
	{
		if (obx_shared->nprobes < OUTBOX_MAX_PROBES)
			obx_shared->probes[obx_shared->nprobes++] = dboid;
		else
			obx_shared->probe_all = true;
	}
	if (obx_shared->launcher_latch != NULL)
		SetLatch(obx_shared->launcher_latch);
	LWLockRelease(obx_shared->lock);
}

/*
 * Keep a database free of workers until this backend's transaction ends.
 * Returns false when the table is full (the caller then goes on without).
 */
bool
ShmemHoldOffDatabase(Oid dboid)
{
	int			i;
	int			freeidx = -1;

	if (obx_shared == NULL)
		return false;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < OBX_MAX_HOLDOFFS; i++)
	{
		OutboxHoldoff *h = &obx_shared->holdoffs[i];

		if (h->dboid == dboid && h->requester == MyProcPid)
		{
			LWLockRelease(obx_shared->lock);
			return true;
		}
		if (freeidx < 0 &&
			(h->dboid == InvalidOid || BackendPidGetProc(h->requester) == NULL))
			freeidx = i;
	}
	if (freeidx >= 0)
	{
		obx_shared->holdoffs[freeidx].dboid = dboid;
		obx_shared->holdoffs[freeidx].requester = MyProcPid;
	}
	LWLockRelease(obx_shared->lock);

	return freeidx >= 0;
}

/*
 * Drop the holdoffs of a backend (at the end of its transaction) and wake
 * the launcher so that it brings the workers back.  Returns whether there
 * were any.
 */
bool
ShmemReleaseHoldoffs(pid_t requester)
{
	int			i;
	bool		released = false;

	if (obx_shared == NULL)
		return false;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < OBX_MAX_HOLDOFFS; i++)
	{
		OutboxHoldoff *h = &obx_shared->holdoffs[i];

		if (h->dboid != InvalidOid && h->requester == requester)
		{
			h->dboid = InvalidOid;
			h->requester = 0;
			released = true;
		}
	}
	if (released && obx_shared->launcher_latch != NULL)
		SetLatch(obx_shared->launcher_latch);
	LWLockRelease(obx_shared->lock);

	return released;
}

/*
 * Whether a drain worker is registered or running for a database, and its
 * pid (0 while it is still starting).
 */
bool
ShmemWorkerPresent(Oid dboid, pid_t *pid)
{
	OutboxWorkerSlot *slot;
	bool		present = false;

	*pid = 0;
	if (obx_shared == NULL)
		return false;

	LWLockAcquire(obx_shared->lock, LW_SHARED);
	slot = obx_find_slot(dboid);
	if (slot != NULL &&
		(slot->info.pid != 0 || slot->info.state == OBX_WORKER_STARTING))
	{
		present = true;
		*pid = slot->info.pid;
	}
	LWLockRelease(obx_shared->lock);

	return present;
}

/*
 * The generation of the routes: backends that cache which topics are
 * routed reload them when it changes.  Read without the lock.
 */
uint64
ShmemRoutesGeneration(void)
{
	return pg_atomic_read_u64(&obx_shared->routes_generation);
}

/* Announce that routes changed (after the change committed). */
void
ShmemBumpRoutesGeneration(void)
{
	pg_atomic_fetch_add_u64(&obx_shared->routes_generation, 1);
}

/* The slot of a database's drain worker, or NULL; the caller holds the lock. */
static OutboxWorkerSlot *
obx_find_slot(Oid dboid)
{
	int			i;

	for (i = 0; i < obx_shared->nslots; i++)
	{
		if (obx_shared->slots[i].dboid == dboid)
			return &obx_shared->slots[i];
	}
	return NULL;
}
