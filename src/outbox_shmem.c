/*-------------------------------------------------------------------------
 *
 * outbox_shmem.c
 *		The shared state between the launcher, the drain workers and the
 *		backends that wake or stop them.
 *
 * One struct in shared memory (OutboxShared, declared in outbox.h) holds the
 * launcher's latch, one slot per drain worker, the databases that a
 * DROP/ALTER/CREATE DATABASE keeps free of workers, and the databases where
 * CREATE EXTENSION krizaka_outbox has just committed.  A single LWLock
 * guards all of it: every access is a handful of loads and stores, done at
 * most a few times per transaction, so finer locking would buy nothing.
 *
 * Glossary:
 *	slot		a drain worker's entry: database, pid, latch, state, counters
 *	generation	a counter bumped on each launcher start; a worker registered
 *				by an earlier launcher finds its generation stale and leaves
 *	holdoff		a database kept free of workers until the transaction of the
 *				backend that asked for it ends
 *	probe		a request to start a worker in a database believed to lack
 *				the extension, to look again
 *
 * Only a preloaded library has this state; elsewhere OutboxShmem stays NULL
 * and every function here is a no-op.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "outbox.h"

#define OBX_SHMEM_NAME		"krizaka_outbox"
#define OBX_STOP_POLL_MS	10

OutboxShared *OutboxShmem = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size obx_shmem_size(void);
static void obx_shmem_request(void);
static void obx_shmem_startup(void);
static OutboxWorkerSlot *obx_find_slot(Oid dboid);
static bool obx_worker_present(Oid dboid, pid_t *pid);
static void obx_stop_pause(void);

/* Install the shared memory hooks; only called when preloaded. */
void
OutboxShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = obx_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = obx_shmem_startup;
}

/*
 * Size of the shared struct: one slot per possible background worker, since
 * no more drain workers than that can ever run.
 */
static Size
obx_shmem_size(void)
{
	return add_size(offsetof(OutboxShared, slots),
					mul_size(max_worker_processes, sizeof(OutboxWorkerSlot)));
}

/* Reserve the space and the lock before shared memory is created. */
static void
obx_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(obx_shmem_size());
	RequestNamedLWLockTranche(OBX_SHMEM_NAME, 1);
}

/*
 * Create or attach to the shared struct.  After a crash the postmaster
 * creates shared memory anew, so the state starts empty again, as the
 * launcher and the workers do.
 */
static void
obx_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	OutboxShmem = ShmemInitStruct(OBX_SHMEM_NAME, obx_shmem_size(), &found);
	if (!found)
	{
		memset(OutboxShmem, 0, obx_shmem_size());
		OutboxShmem->lock = &(GetNamedLWLockTranche(OBX_SHMEM_NAME))->lock;
		OutboxShmem->nslots = max_worker_processes;
		pg_atomic_init_u64(&OutboxShmem->routes_generation, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The slot of a database's drain worker, or NULL; the caller holds the lock. */
static OutboxWorkerSlot *
obx_find_slot(Oid dboid)
{
	int			i;

	for (i = 0; i < OutboxShmem->nslots; i++)
	{
		if (OutboxShmem->slots[i].dboid == dboid)
			return &OutboxShmem->slots[i];
	}
	return NULL;
}

/*
 * Whether some backend keeps this database free of workers; the caller holds
 * the lock.  An entry whose backend has gone away no longer counts (its
 * transaction ended without clearing it, which only a crash could do).
 */
bool
ShmemDatabaseHeldOff(Oid dboid)
{
	int			i;

	for (i = 0; i < OUTBOX_MAX_HOLDOFFS; i++)
	{
		OutboxHoldoff *h = &OutboxShmem->holdoffs[i];

		if (h->dboid == dboid && BackendPidGetProc(h->requester) != NULL)
			return true;
	}
	return false;
}

/* Set the launcher's latch, if it runs. */
void
ShmemWakeLauncher(void)
{
	if (OutboxShmem == NULL)
		return;

	LWLockAcquire(OutboxShmem->lock, LW_SHARED);
	if (OutboxShmem->launcher_latch != NULL)
		SetLatch(OutboxShmem->launcher_latch);
	LWLockRelease(OutboxShmem->lock);
}

/*
 * Set the latch of a database's drain worker, if one runs.  The worker's
 * own commits do not wake it: its next due time already covers what its
 * round changed, and waking itself could turn its loop into a busy one.
 */
void
ShmemWakeWorker(Oid dboid)
{
	OutboxWorkerSlot *slot;

	if (OutboxShmem == NULL)
		return;

	LWLockAcquire(OutboxShmem->lock, LW_SHARED);
	slot = obx_find_slot(dboid);
	if (slot != NULL && slot->latch != NULL && slot->pid != MyProcPid)
		SetLatch(slot->latch);
	LWLockRelease(OutboxShmem->lock);
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

	if (OutboxShmem == NULL)
		return;

	LWLockAcquire(OutboxShmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < OutboxShmem->nprobes; i++)
		known |= (OutboxShmem->probes[i] == dboid);
	if (!known)
	{
		if (OutboxShmem->nprobes < OUTBOX_MAX_PROBES)
			OutboxShmem->probes[OutboxShmem->nprobes++] = dboid;
		else
			OutboxShmem->probe_all = true;
	}
	if (OutboxShmem->launcher_latch != NULL)
		SetLatch(OutboxShmem->launcher_latch);
	LWLockRelease(OutboxShmem->lock);
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

	if (OutboxShmem == NULL)
		return false;

	LWLockAcquire(OutboxShmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < OUTBOX_MAX_HOLDOFFS; i++)
	{
		OutboxHoldoff *h = &OutboxShmem->holdoffs[i];

		if (h->dboid == dboid && h->requester == MyProcPid)
		{
			LWLockRelease(OutboxShmem->lock);
			return true;
		}
		if (freeidx < 0 &&
			(h->dboid == InvalidOid || BackendPidGetProc(h->requester) == NULL))
			freeidx = i;
	}
	if (freeidx >= 0)
	{
		OutboxShmem->holdoffs[freeidx].dboid = dboid;
		OutboxShmem->holdoffs[freeidx].requester = MyProcPid;
	}
	LWLockRelease(OutboxShmem->lock);

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

	if (OutboxShmem == NULL)
		return false;

	LWLockAcquire(OutboxShmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < OUTBOX_MAX_HOLDOFFS; i++)
	{
		OutboxHoldoff *h = &OutboxShmem->holdoffs[i];

		if (h->dboid != InvalidOid && h->requester == requester)
		{
			h->dboid = InvalidOid;
			h->requester = 0;
			released = true;
		}
	}
	if (released && OutboxShmem->launcher_latch != NULL)
		SetLatch(OutboxShmem->launcher_latch);
	LWLockRelease(OutboxShmem->lock);

	return released;
}

/*
 * Whether a drain worker is registered or running for a database, and its
 * pid (0 while it is still starting).
 */
static bool
obx_worker_present(Oid dboid, pid_t *pid)
{
	OutboxWorkerSlot *slot;
	bool		present = false;

	*pid = 0;
	LWLockAcquire(OutboxShmem->lock, LW_SHARED);
	slot = obx_find_slot(dboid);
	if (slot != NULL &&
		(slot->pid != 0 || slot->state == OBX_WORKER_STARTING))
	{
		present = true;
		*pid = slot->pid;
	}
	LWLockRelease(OutboxShmem->lock);

	return present;
}

/*
 * Terminate the drain worker of a database and wait, at most timeout_ms, for
 * it to exit.  The caller has put a holdoff on the database first, so the
 * launcher starts no new one meanwhile, and a worker that was only starting
 * leaves by itself when it sees the holdoff.  Returns whether the database
 * is free of workers.
 */
bool
ShmemStopWorker(Oid dboid, int timeout_ms)
{
	TimestampTz deadline;
	pid_t		signalled = 0;
	pid_t		pid;

	if (OutboxShmem == NULL)
		return true;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	while (obx_worker_present(dboid, &pid))
	{
		if (pid != 0 && pid != signalled)
		{
			/* the same signal as pg_terminate_backend() */
			if (kill(pid, SIGTERM) == 0)
				signalled = pid;
		}
		if (GetCurrentTimestamp() >= deadline)
			return false;

		obx_stop_pause();
	}

	/*
	 * The slot is cleared a moment before the process leaves the proc array
	 * (ProcKill runs last), and the proc array is what DROP DATABASE checks.
	 */
	while (signalled != 0 && BackendPidGetProc(signalled) != NULL)
	{
		if (GetCurrentTimestamp() >= deadline)
			return false;
		obx_stop_pause();
	}
	return true;
}

/* A short wait while a worker exits, open to cancellation. */
static void
obx_stop_pause(void)
{
	(void) WaitLatch(MyLatch,
					 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 OBX_STOP_POLL_MS, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * The generation of the routes: backends that cache which topics are
 * routed reload them when it changes.  Read without the lock.
 */
uint64
ShmemRoutesGeneration(void)
{
	return pg_atomic_read_u64(&OutboxShmem->routes_generation);
}

/* Announce that routes changed (after the change committed). */
void
ShmemBumpRoutesGeneration(void)
{
	pg_atomic_fetch_add_u64(&OutboxShmem->routes_generation, 1);
}
