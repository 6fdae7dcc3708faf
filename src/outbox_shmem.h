/*-------------------------------------------------------------------------
 *
 * outbox_shmem.h
 *		The shared state of the launcher, the drain workers and the backends
 *		that wake or stop them (outbox_shmem.c).
 *
 * The state itself is private to outbox_shmem.c and outbox_shmem_backend.c
 * (outbox_shmem_int.h); these functions are the only way to it.  The
 * launcher knows the slots of the drain workers by number (-1: none); a
 * drain worker knows only its own slot.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

#include "datatype/timestamp.h"

#include "outbox_worker.h"

#define OUTBOX_MAX_PROBES			16	/* pending CREATE EXTENSION notices */

/* What worker_status() shows of a drain worker's slot */
typedef struct OutboxWorkerInfo
{
	NameData	datname;
	pid_t		pid;			/* 0 when no process runs */
	OutboxWorkerState state;
	TimestampTz started_at;
	TimestampTz last_round_at;
	int64		delivered;		/* totals since the worker started */
	int64		failed;
	char		last_error[OUTBOX_WORKER_ERROR_BYTES];
} OutboxWorkerInfo;

/* start-up: install the shared memory hooks */
extern void OutboxShmemInit(void);

/* the launcher */
extern uint32 ShmemLauncherAttach(void);
extern bool ShmemClearExitedSlots(void);
extern void ShmemLauncherDetach(void);
extern int	ShmemTakeProbes(Oid *probes, bool *probe_all);
extern int	ShmemSetSlotState(int slotno, Oid dboid, const NameData *datname,
							  OutboxWorkerState state, const char *last_error);
extern int	ShmemPrepareStart(int slotno, Oid dboid, const NameData *datname,
							  uint32 generation, bool clear_error,
							  bool *held_off);
extern void ShmemSetSlotName(int slotno, const NameData *datname);
extern OutboxWorkerExit ShmemReapSlot(int slotno);
extern void ShmemFreeSlot(int slotno);

/* a drain worker, about its own slot */
extern bool ShmemWorkerAttach(int slotno, Oid dboid, uint32 generation,
							  bool *held_off);
extern void ShmemWorkerDetach(OutboxWorkerExit reason, const char *error);
extern bool ShmemWorkerTakeWake(void);
extern void ShmemWorkerRoundBegins(void);
extern void ShmemWorkerRoundEnds(bool ran, int64 delivered, int64 failed);

/* worker_status() */
extern int	ShmemWorkerSnapshot(OutboxWorkerInfo **infos);

/* backends: waking, probes, holdoffs, routes (outbox_shmem_backend.c) */
extern void ShmemWakeLauncher(void);
extern void ShmemWakeWorker(Oid dboid);
extern void ShmemRequestProbe(Oid dboid);
extern bool ShmemHoldOffDatabase(Oid dboid);
extern bool ShmemReleaseHoldoffs(pid_t requester);
extern bool ShmemWorkerPresent(Oid dboid, pid_t *pid);
extern uint64 ShmemRoutesGeneration(void);
extern void ShmemBumpRoutesGeneration(void);

#endif							/* OUTBOX_SHMEM_H */
