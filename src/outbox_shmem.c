/*-------------------------------------------------------------------------
 *
 * outbox_shmem.c
 *		The shared state between the launcher, the drain workers and the
 *		backends that wake or stop them: the struct, and the worker slots.
 *
 * One struct in shared memory (outbox_shmem_int.h), private to this file
 * and outbox_shmem_backend.c, holds the launcher's latch, one slot per
 * drain worker, the databases that a DROP/ALTER/CREATE DATABASE keeps free
 * of workers, and the databases where CREATE EXTENSION krizaka_outbox has
 * just committed.  A single LWLock guards all of it: every access is a
 * handful of loads and stores, done at most a few times per transaction,
 * so finer locking would buy nothing.  Only these two files take that
 * lock; the other files call their functions, each of which does its work
 * under the lock in one go.  This file has what the launcher, the drain
 * workers and worker_status() do with the slots; outbox_shmem_backend.c
 * what ordinary backends do (wake, probe, hold off).
 *
 * Glossary:
 *	slot		a drain worker's entry: database, pid, latch, state, counters;
 *				the launcher knows its slots by number
 *	generation	a counter bumped on each launcher start; a worker registered
 *				by an earlier launcher finds its generation stale and leaves
 *	holdoff		a database kept free of workers until the transaction of the
 *				backend that asked for it ends
 *	probe		a request to start a worker in a database believed to lack
 *				the extension, to look again
 *
 * Only a preloaded library has this state; elsewhere obx_shared stays NULL
 * and the functions that backends call are no-ops.
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
#include "outbox_shmem_int.h"

#define OBX_SHMEM_NAME		"krizaka_outbox"

OutboxShared *obx_shared = NULL;

/* in a drain worker: its own slot, from attach to detach */
static OutboxWorkerSlot *obx_my_slot = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size obx_shmem_size(void);
static void obx_shmem_request(void);
static void obx_shmem_startup(void);
static bool obx_sweep_slots(bool terminate);
static int	obx_claim_slot(int slotno, Oid dboid, const NameData *datname);
static bool obx_database_held_off(Oid dboid);

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
	obx_shared = ShmemInitStruct(OBX_SHMEM_NAME, obx_shmem_size(), &found);
	if (!found)
	{
		memset(obx_shared, 0, obx_shmem_size());
		obx_shared->lock = &(GetNamedLWLockTranche(OBX_SHMEM_NAME))->lock;
		obx_shared->nslots = max_worker_processes;
		pg_atomic_init_u64(&obx_shared->routes_generation, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Publish the launcher's pid and latch, start a new generation and take
 * over the slots: the free ones are cleared, and workers left by a previous
 * launcher (which failed; its handles are lost with it) are terminated.
 * Returns the generation.
 */
uint32
ShmemLauncherAttach(void)
{
	uint32		generation;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	obx_shared->launcher_pid = MyProcPid;
	obx_shared->launcher_latch = MyLatch;
	generation = ++obx_shared->launcher_generation;
	(void) obx_sweep_slots(true);
	LWLockRelease(obx_shared->lock);

	return generation;
}

/* Clear the slots whose worker has exited; returns whether any still runs. */
bool
ShmemClearExitedSlots(void)
{
	bool		left;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	left = obx_sweep_slots(false);
	LWLockRelease(obx_shared->lock);

	return left;
}

/*
 * Clear every slot without a process, and terminate the processes of the
 * others when terminate.  Returns whether any process was found.  The
 * caller holds the lock exclusively.
 */
static bool
obx_sweep_slots(bool terminate)
{
	bool		left = false;
	int			i;

	for (i = 0; i < obx_shared->nslots; i++)
	{
		OutboxWorkerSlot *slot = &obx_shared->slots[i];

		if (slot->info.pid == 0)
			memset(slot, 0, sizeof(OutboxWorkerSlot));
		else
		{
			if (terminate)
				(void) kill(slot->info.pid, SIGTERM);
			left = true;
		}
	}
	return left;
}

/* Withdraw the launcher's pid and latch, if they are still this process's. */
void
ShmemLauncherDetach(void)
{
	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	if (obx_shared->launcher_pid == MyProcPid)
	{
		obx_shared->launcher_pid = 0;
		obx_shared->launcher_latch = NULL;
	}
	LWLockRelease(obx_shared->lock);
}

/*
 * Take the databases where CREATE EXTENSION committed since the last call:
 * copies them into probes[] (OUTBOX_MAX_PROBES long), returns how many,
 * and sets *probe_all when there were too many to keep.
 */
int
ShmemTakeProbes(Oid *probes, bool *probe_all)
{
	int			nprobes;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	nprobes = obx_shared->nprobes;
	memcpy(probes, obx_shared->probes, nprobes * sizeof(Oid));
	*probe_all = obx_shared->probe_all;
	obx_shared->nprobes = 0;
	obx_shared->probe_all = false;
	LWLockRelease(obx_shared->lock);

	return nprobes;
}

/*
 * The slot of a database: slotno if it has one already, else a free one,
 * cleared and marked stopped; -1 when all are taken.  The caller holds the
 * lock exclusively.
 */
static int
obx_claim_slot(int slotno, Oid dboid, const NameData *datname)
{
	int			i;

	if (slotno >= 0)
		return slotno;

	for (i = 0; i < obx_shared->nslots; i++)
	{
		OutboxWorkerSlot *slot = &obx_shared->slots[i];

		if (slot->dboid == InvalidOid)
		{
			memset(slot, 0, sizeof(OutboxWorkerSlot));
			slot->dboid = dboid;
			slot->info.datname = *datname;
			slot->info.state = OBX_WORKER_STOPPED;
			return i;
		}
	}
	return -1;
}

/*
 * Set what worker_status() shows for a database while no worker of it runs:
 * the state, and the last error unless that is NULL.  A database without a
 * slot (slotno -1) gets a free one.  Returns the slot, or -1 when all are
 * taken.
 */
int
ShmemSetSlotState(int slotno, Oid dboid, const NameData *datname,
				  OutboxWorkerState state, const char *last_error)
{
	OutboxWorkerSlot *slot;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	slotno = obx_claim_slot(slotno, dboid, datname);
	if (slotno >= 0)
	{
		slot = &obx_shared->slots[slotno];
		slot->info.state = state;
		if (last_error != NULL)
			strlcpy(slot->info.last_error, last_error,
					sizeof(slot->info.last_error));
	}
	LWLockRelease(obx_shared->lock);

	return slotno;
}

/*
 * Make ready the slot of a database whose worker the launcher is about to
 * register (claiming one if slotno is -1): starting, for this generation,
 * and without its last error when clear_error.  Returns the slot; -1 with
 * *held_off set when a holdoff keeps the database free of workers, -1 alone
 * when all slots are taken.
 */
int
ShmemPrepareStart(int slotno, Oid dboid, const NameData *datname,
				  uint32 generation, bool clear_error, bool *held_off)
{
	OutboxWorkerSlot *slot;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	*held_off = obx_database_held_off(dboid);
	slotno = *held_off ? -1 : obx_claim_slot(slotno, dboid, datname);
	if (slotno >= 0)
	{
		slot = &obx_shared->slots[slotno];
		slot->info.state = OBX_WORKER_STARTING;
		slot->exit_reason = OBX_EXIT_NONE;
		slot->generation = generation;
		if (clear_error)
			slot->info.last_error[0] = '\0';
	}
	LWLockRelease(obx_shared->lock);

	return slotno;
}

/* Keep the database name of a slot current (ALTER DATABASE ... RENAME). */
void
ShmemSetSlotName(int slotno, const NameData *datname)
{
	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	obx_shared->slots[slotno].info.datname = *datname;
	LWLockRelease(obx_shared->lock);
}

/*
 * Why the worker of a slot exited, once the postmaster reports it stopped.
 * A worker that never got as far as its loop is counted as failed.
 */
OutboxWorkerExit
ShmemReapSlot(int slotno)
{
	OutboxWorkerSlot *slot;
	OutboxWorkerExit reason;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	slot = &obx_shared->slots[slotno];
	reason = slot->exit_reason;
	if (slot->info.state == OBX_WORKER_STARTING)
	{
		slot->info.state = OBX_WORKER_STOPPED;
		reason = OBX_EXIT_ERROR;
	}
	LWLockRelease(obx_shared->lock);

	return reason;
}

/* Give a slot back (its worker has exited). */
void
ShmemFreeSlot(int slotno)
{
	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	memset(&obx_shared->slots[slotno], 0, sizeof(OutboxWorkerSlot));
	LWLockRelease(obx_shared->lock);
}

/*
 * Publish this worker's pid and latch in the slot the launcher gave it, and
 * start its counters afresh.  Returns false when the slot is no longer its
 * own (a new launcher has taken over).  Sets *held_off when the database
 * must be left alone.
 */
bool
ShmemWorkerAttach(int slotno, Oid dboid, uint32 generation, bool *held_off)
{
	OutboxWorkerSlot *slot;

	*held_off = false;
	if (obx_shared == NULL || slotno < 0 || slotno >= obx_shared->nslots)
		return false;

	slot = &obx_shared->slots[slotno];
	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	if (slot->dboid != dboid || slot->generation != generation ||
		slot->info.pid != 0)
	{
		LWLockRelease(obx_shared->lock);
		return false;
	}
	slot->info.pid = MyProcPid;
	pg_atomic_init_u32(&slot->wake, 0);
	slot->latch = MyLatch;
	slot->info.state = OBX_WORKER_STARTING;
	slot->exit_reason = OBX_EXIT_NONE;
	slot->info.started_at = GetCurrentTimestamp();
	slot->info.last_round_at = 0;
	slot->info.delivered = 0;
	slot->info.failed = 0;
	*held_off = obx_database_held_off(dboid);
	obx_my_slot = slot;
	LWLockRelease(obx_shared->lock);

	return true;
}

/*
 * Withdraw this worker's pid and latch, and leave the reason of its exit
 * for the launcher: reason, unless that is OBX_EXIT_NONE; else held off if
 * a holdoff made it leave; else failed, with error as its last error, if
 * error is not NULL; else terminated.
 */
void
ShmemWorkerDetach(OutboxWorkerExit reason, const char *error)
{
	OutboxWorkerSlot *slot = obx_my_slot;

	if (slot == NULL)
		return;

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	if (slot->info.pid == MyProcPid)
	{
		/* terminated to make way for DROP DATABASE and the like? */
		if (reason == OBX_EXIT_NONE && obx_database_held_off(slot->dboid))
			reason = OBX_EXIT_HELD_OFF;
		if (reason == OBX_EXIT_NONE && error != NULL)
		{
			reason = OBX_EXIT_ERROR;
			strlcpy(slot->info.last_error, error,
					sizeof(slot->info.last_error));
		}

		slot->info.pid = 0;
		slot->latch = NULL;
		slot->exit_reason = (reason == OBX_EXIT_NONE) ?
			OBX_EXIT_TERMINATED : reason;
		slot->info.state = (reason == OBX_EXIT_NO_EXTENSION) ?
			OBX_WORKER_NO_EXTENSION : OBX_WORKER_STOPPED;
	}
	LWLockRelease(obx_shared->lock);
	obx_my_slot = NULL;
}

/*
 * Whether a round of this worker was asked for (ShmemWakeWorker) since the
 * last call; the request is taken.  A latch set without one comes from
 * PostgreSQL itself (a catch-up of invalidations, a barrier) and asks for
 * no round.
 */
bool
ShmemWorkerTakeWake(void)
{
	return obx_my_slot != NULL && pg_atomic_exchange_u32(&obx_my_slot->wake, 0) != 0;
}

/* Show that a round of this worker is under way. */
void
ShmemWorkerRoundBegins(void)
{
	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	obx_my_slot->info.state = OBX_WORKER_RUNNING;
	LWLockRelease(obx_shared->lock);
}

/*
 * Record a finished round of this worker.  last_round_at and the counters
 * move only when the round ran: one that could not (tables locked or
 * missing) leaves last_round_at behind, which is what a monitor should see.
 */
void
ShmemWorkerRoundEnds(bool ran, int64 delivered, int64 failed)
{
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(obx_shared->lock, LW_EXCLUSIVE);
	obx_my_slot->info.state = OBX_WORKER_SLEEPING;
	if (ran)
	{
		obx_my_slot->info.last_round_at = now;
		obx_my_slot->info.delivered += delivered;
		obx_my_slot->info.failed += failed;
	}
	LWLockRelease(obx_shared->lock);
}

/*
 * For worker_status(): a copy, taken under the lock, of every slot in use,
 * palloc'd in the current memory context.  Returns how many, or -1 when
 * there is no shared state (the library is not preloaded).
 */
int
ShmemWorkerSnapshot(OutboxWorkerInfo **infos)
{
	int			n = 0;
	int			i;

	*infos = NULL;
	if (obx_shared == NULL)
		return -1;

	*infos = palloc(sizeof(OutboxWorkerInfo) * obx_shared->nslots);
	LWLockAcquire(obx_shared->lock, LW_SHARED);
	for (i = 0; i < obx_shared->nslots; i++)
	{
		if (obx_shared->slots[i].dboid != InvalidOid)
			(*infos)[n++] = obx_shared->slots[i].info;
	}
	LWLockRelease(obx_shared->lock);

	return n;
}

/*
 * Whether some backend keeps this database free of workers; the caller holds
 * the lock.  An entry whose backend has gone away no longer counts (its
 * transaction ended without clearing it, which only a crash could do).
 */
static bool
obx_database_held_off(Oid dboid)
{
	int			i;

	for (i = 0; i < OBX_MAX_HOLDOFFS; i++)
	{
		OutboxHoldoff *h = &obx_shared->holdoffs[i];

		if (h->dboid == dboid && BackendPidGetProc(h->requester) != NULL)
			return true;
	}
	return false;
}
