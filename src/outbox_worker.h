/*-------------------------------------------------------------------------
 *
 * outbox_worker.h
 *		The background processes: the launcher (outbox_launcher.c) and the
 *		per-database drain workers (outbox_worker.c).
 *
 * Glossary:
 *	launcher	the one process, started by the postmaster, that starts and
 *				stops a drain worker per database it serves
 *	drain worker	the process that delivers the routed messages of one
 *				database, one round after the other
 *	round		one call of DrainDatabaseRound(): every routed topic once
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_WORKER_H
#define OUTBOX_WORKER_H

#include "catalog/pg_database.h"
#include "nodes/pg_list.h"
#include "postmaster/bgworker.h"

#define OUTBOX_WORKER_ERROR_BYTES	1024	/* last_error kept per worker */

/* What a drain worker slot is doing, as worker_status() shows it */
typedef enum OutboxWorkerState
{
	OBX_WORKER_FREE = 0,		/* slot unused */
	OBX_WORKER_STARTING,		/* registered, not yet running its loop */
	OBX_WORKER_RUNNING,			/* in a delivery round */
	OBX_WORKER_SLEEPING,		/* waiting for a wake-up or the next due time */
	OBX_WORKER_NO_EXTENSION,	/* database without krizaka_outbox; not connected */
	OBX_WORKER_STOPPED			/* exited; the launcher restarts it when due */
} OutboxWorkerState;

/* Why a drain worker exited, for the launcher */
typedef enum OutboxWorkerExit
{
	OBX_EXIT_NONE = 0,			/* still running, or never started */
	OBX_EXIT_TERMINATED,		/* SIGTERM or postmaster request */
	OBX_EXIT_ERROR,				/* an ERROR ended it; last_error says which */
	OBX_EXIT_NO_EXTENSION,		/* the database has no krizaka_outbox */
	OBX_EXIT_HELD_OFF			/* a DROP/ALTER DATABASE asked it to stay away */
} OutboxWorkerExit;

/* the launcher (outbox_launcher.c) */
extern void OutboxLauncherRegister(void);
extern PGDLLEXPORT void OutboxLauncherMain(Datum main_arg);

/* the databases it serves (outbox_launcher_dbs.c) */
extern List *LauncherDatabaseNames(bool *star);
extern bool LauncherListed(List *names, bool star, const char *datname);
extern bool LauncherCanConnect(Form_pg_database form);

/* a drain worker (outbox_worker.c) */
extern bool WorkerStart(int slotno, Oid dboid, const char *datname,
						Oid roleid, uint32 generation,
						BackgroundWorkerHandle **handle);
extern PGDLLEXPORT void OutboxWorkerMain(Datum main_arg);

/* signals, and waiting on the latch (outbox_worker.c) */
extern void WorkerSetSignals(bool drain_worker);
extern void WorkerWait(long timeout_ms);
extern bool WorkerWaitForWork(long timeout_ms);
extern bool WorkerReloadIfAsked(void);

#endif							/* OUTBOX_WORKER_H */
