/*-------------------------------------------------------------------------
 *
 * outbox_shmem_int.h
 *		The shared state itself, private to the files of shared memory:
 *		nothing else includes this header, and nothing else takes its lock.
 *
 *	outbox_shmem.c			the struct made at start-up; the worker slots, as
 *							the launcher, the drain workers and
 *							worker_status() use them
 *	outbox_shmem_backend.c	what ordinary backends do through it: wake the
 *							launcher or a worker, probes, holdoffs, the
 *							routes generation
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_INT_H
#define OUTBOX_SHMEM_INT_H

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "outbox_shmem.h"

#define OBX_MAX_HOLDOFFS	32		/* databases kept off at once */

/*
 * One drain worker.  The launcher assigns a slot to a database and frees
 * it; the worker fills in its pid, latch and counters.  Every field is read
 * and written under obx_shared->lock.
 */
typedef struct OutboxWorkerSlot
{
	Oid			dboid;			/* InvalidOid: slot free */
	uint32		generation;		/* launcher generation that started it */
	OutboxWorkerExit exit_reason;
	Latch	   *latch;			/* the worker's PGPROC latch, or NULL */
	pg_atomic_uint32 wake;		/* 1: a round was asked for since the last */
	OutboxWorkerInfo info;		/* what worker_status() shows */
} OutboxWorkerSlot;

/* A database that a DROP/ALTER/CREATE DATABASE keeps free of workers */
typedef struct OutboxHoldoff
{
	Oid			dboid;			/* InvalidOid: entry free */
	pid_t		requester;		/* backend whose transaction holds it */
} OutboxHoldoff;

typedef struct OutboxShared
{
	LWLock	   *lock;
	uint32		launcher_generation;	/* bumped on each launcher start */
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	int			nprobes;		/* databases where CREATE EXTENSION committed */
	bool		probe_all;		/* probes[] overflowed: re-probe every one */
	Oid			probes[OUTBOX_MAX_PROBES];
	OutboxHoldoff holdoffs[OBX_MAX_HOLDOFFS];
	pg_atomic_uint64 routes_generation; /* bumped when routes change */
	int			nslots;
	OutboxWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} OutboxShared;

/* the struct, once attached (outbox_shmem.c); NULL unless preloaded */
extern OutboxShared *obx_shared;

#endif							/* OUTBOX_SHMEM_INT_H */
