/*-------------------------------------------------------------------------
 *
 * outbox.h
 *		Declarations shared between the source files of krizaka_outbox.
 *
 * Glossary:
 *	message		a row of outbox.message
 *	due			neither delivered nor dead, available_at reached, no valid lease
 *	lease		the right of one owner to deliver a claimed message until
 *				leased_until
 *	dead		attempts exhausted; kept with its last error until revived or
 *				purged
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_H
#define OUTBOX_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

/* Limits that are part of the SQL contract */
#define OUTBOX_NAME_MAX_CHARS	200		/* topic, type, owner, consumer, channel */
#define OUTBOX_ERROR_MAX_BYTES	4096	/* last_error, cut on a character boundary */

/* settings (outbox_guc.c) */
extern int	outbox_batch_size;
extern int	outbox_lease_seconds;
extern int	outbox_max_attempts;
extern int	outbox_backoff_seconds;
extern int	outbox_backoff_max_seconds;
extern int	outbox_retention_days;

#define OUTBOX_BATCH_SIZE_MIN		1
#define OUTBOX_BATCH_SIZE_MAX		500
#define OUTBOX_LEASE_SECONDS_MIN	10
#define OUTBOX_LEASE_SECONDS_MAX	3600

extern void OutboxGucInit(void);

/* argument checks (outbox_validate.c) */
extern text *CheckName(Datum value, bool isnull, const char *what);
extern void CheckNotNull(bool isnull, const char *what);
extern int	CheckBatchSize(Datum value, bool isnull);
extern int	CheckLeaseSeconds(Datum value, bool isnull);
extern text *ClipErrorText(const char *str, int len);

/* identifiers (outbox_uuid.c) */
extern void GenerateUuidV7(pg_uuid_t *uuid);

/* backoff (outbox_backoff.c) */
extern int64 BackoffDelaySeconds(int attempts, int base_seconds, int max_seconds);

/* envelope (outbox_envelope.h) */
#include "outbox_envelope.h"

/* the message store (outbox_store.c) */
typedef struct ClaimRequest
{
	text	   *owner;
	text	   *topic;			/* NULL: every topic */
	int			batch_size;
	int			lease_seconds;
	int			max_attempts;
	TimestampTz now;
} ClaimRequest;

extern void StoreAppend(text *topic, text *event_type, Jsonb *payload,
						pg_uuid_t *id, bool is_new, TimestampTz available_at);
extern void StoreAppendBatch(text *topic, text *event_type, Datum ids,
							 Datum payloads, TimestampTz available_at);
/* what delivery needs of a claimed message */
typedef struct ClaimedMessage
{
	pg_uuid_t	id;
	text	   *topic;
	text	   *event_type;
	TimestampTz created_at;
	Jsonb	   *payload;
	int			attempts;
	TimestampTz leased_until;
} ClaimedMessage;

/* a row of outbox.routes */
typedef struct OutboxRoute
{
	char	   *topic;
	bool		remote;			/* remote command, else NOTIFY */
	char	   *channel;
	char	   *server;
	char	   *command;
	char	   *created_by;
} OutboxRoute;

#define OUTBOX_MESSAGE_MAX_COLS	32

extern int	StoreClaim(const ClaimRequest *req, TupleDesc tupdesc,
					   Tuplestorestate *store, List **messages);
extern int64 StoreComplete(Datum ids, bool many, text *owner,
						   TimestampTz now);
extern bool StoreFail(pg_uuid_t *id, text *owner, text *error, TimestampTz now);
extern bool StoreExtend(pg_uuid_t *id, text *owner, int lease_seconds,
						TimestampTz now);
extern int64 StoreRetryDead(pg_uuid_t *id, text *topic, TimestampTz now);
extern int64 StorePurge(TimestampTz horizon, int64 max_rows);
extern bool StoreConsumeOnce(text *consumer, pg_uuid_t *message_id,
							 TimestampTz now);
extern Jsonb *StoreEnvelopeById(pg_uuid_t *id);
extern int64 StoreRelease(Datum ids, text *owner);
extern int	StoreClaimDelivered(const ClaimRequest *req, List **messages);
extern void StoreUndeliver(pg_uuid_t *id, text *owner, TimestampTz lease_end);
extern TimestampTz StoreNextDue(text *topic, TimestampTz now);
extern void StoreRouteSet(text *topic, const char *target, text *channel,
						  const char *server, text *command, Oid creator);
extern bool StoreRouteDelete(text *topic);
extern List *StoreRouteList(text *topic);
extern List *StoreRoutedTopics(void);

typedef struct StoreIdentity
{
	Oid			userid;
	int			sec_context;
} StoreIdentity;

extern bool StoreTryLock(void);
extern void StoreBecomeOwner(StoreIdentity *save);
extern void StoreRestoreIdentity(const StoreIdentity *save);

/* delivery: drain, NOTIFY and remote routes (outbox_delivery.h) */
#include "outbox_delivery.h"

/* background worker and launcher (outbox_worker.c, outbox_shmem.c) */
#define OUTBOX_EXTENSION_NAME		"krizaka_outbox"
#define OUTBOX_WORKER_ERROR_BYTES	1024	/* last_error kept per worker */
#define OUTBOX_MAX_HOLDOFFS			32		/* databases kept off at once */
#define OUTBOX_MAX_PROBES			16		/* pending CREATE EXTENSION notices */

extern bool outbox_preloaded;
extern char *outbox_worker_databases;
extern char *outbox_worker_role;
extern int	outbox_worker_naptime_ms;

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

/*
 * One drain worker, in shared memory.  The launcher assigns a slot to a
 * database and frees it; the worker fills in its pid, latch and counters.
 * Every field is read and written under OutboxShmem->lock.
 */
typedef struct OutboxWorkerSlot
{
	Oid			dboid;			/* InvalidOid: slot free */
	NameData	datname;
	uint32		generation;		/* launcher generation that started it */
	OutboxWorkerState state;
	OutboxWorkerExit exit_reason;
	pid_t		pid;			/* 0 when no process runs */
	struct Latch *latch;		/* the worker's PGPROC latch, or NULL */
	TimestampTz started_at;
	TimestampTz last_round_at;
	int64		delivered;		/* totals since the worker started */
	int64		failed;
	char		last_error[OUTBOX_WORKER_ERROR_BYTES];
} OutboxWorkerSlot;

/* A database that a DROP/ALTER/CREATE DATABASE keeps free of workers */
typedef struct OutboxHoldoff
{
	Oid			dboid;			/* InvalidOid: entry free */
	pid_t		requester;		/* backend whose transaction holds it */
} OutboxHoldoff;

typedef struct OutboxShared
{
	struct LWLock *lock;
	uint32		launcher_generation;	/* bumped on each launcher start */
	pid_t		launcher_pid;
	struct Latch *launcher_latch;
	int			nprobes;		/* databases where CREATE EXTENSION committed */
	bool		probe_all;		/* probes[] overflowed: re-probe every one */
	Oid			probes[OUTBOX_MAX_PROBES];
	OutboxHoldoff holdoffs[OUTBOX_MAX_HOLDOFFS];
	pg_atomic_uint64 routes_generation; /* bumped when routes change */
	int			nslots;
	OutboxWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} OutboxShared;

extern OutboxShared *OutboxShmem;

extern void OutboxWorkerInit(void);
extern PGDLLEXPORT void OutboxLauncherMain(Datum main_arg);
extern PGDLLEXPORT void OutboxWorkerMain(Datum main_arg);

/* shared state (outbox_shmem.c) */
extern void OutboxShmemInit(void);
extern bool ShmemDatabaseHeldOff(Oid dboid);
extern void ShmemWakeLauncher(void);
extern void ShmemWakeWorker(Oid dboid);
extern void ShmemRequestProbe(Oid dboid);
extern bool ShmemHoldOffDatabase(Oid dboid);
extern bool ShmemReleaseHoldoffs(pid_t requester);
extern bool ShmemStopWorker(Oid dboid, int timeout_ms);
extern uint64 ShmemRoutesGeneration(void);
extern void ShmemBumpRoutesGeneration(void);

/* waking the worker at commit (outbox_wakeup.c) */
extern void OutboxWakeupInit(void);
extern void WakeWorkerAtCommit(void);
extern void WakeWorkerForTopic(text *topic);
extern void RoutesChangedAtCommit(void);

#endif							/* OUTBOX_H */
