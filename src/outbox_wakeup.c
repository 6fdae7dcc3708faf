/*-------------------------------------------------------------------------
 *
 * outbox_wakeup.c
 *		What ordinary backends do to the background workers: wake the drain
 *		worker of their database when a transaction that appended messages
 *		commits, tell the launcher about CREATE EXTENSION and new databases,
 *		and move a worker out of the way of DROP DATABASE and friends.
 *
 * Waking is a backend-local flag set on the hot path (append) and acted on
 * once by a transaction callback at commit: the worker's latch is set only
 * when the data it should deliver is visible.  An abort drops the flag.  A
 * subtransaction abort keeps it: a spurious wake-up costs one empty round,
 * a lost one delays delivery until the next due time.
 *
 * Only appends to a routed topic ask for a wake-up: the worker has nothing
 * to do for the others, which pull workers take.  Each backend keeps the
 * list of routed topics of its database and reloads it when the routes'
 * generation in shared memory moved, which the route functions bump when
 * they commit.  (A route written into outbox.routes by hand is delivered
 * from the next round on, but does not wake the worker by itself.)
 *
 * Two-phase commit: PREPARE TRANSACTION drops the request, since nothing is
 * visible yet; COMMIT PREPARED (which PostgreSQL runs in the database where
 * the transaction was prepared) always requests a wake-up at its own
 * commit, so messages appended in a prepared transaction are delivered as
 * promptly as any others.
 *
 * The utility hook watches statements that cannot run while another session
 * is connected to their database: DROP DATABASE, ALTER DATABASE ... RENAME
 * and SET TABLESPACE, and CREATE DATABASE ... TEMPLATE.  Before they run it
 * keeps that database free of workers until the statement's transaction
 * ends, terminates the worker and waits (a few seconds at most) for it to
 * exit.  Only the owner of the database (or a superuser) gets this, so that
 * nobody else can keep a worker away by issuing statements that then fail.
 *
 * DROP EXTENSION and ALTER EXTENSION krizaka_outbox wake the worker at
 * commit too, so that it notices at once; CREATE EXTENSION tells the
 * launcher, which starts a worker there.
 *
 * Everything here is installed only when the library is preloaded; loaded
 * in a single session the functions are no-ops.
 *
 * Glossary:
 *	wake-up request	a flag for the commit of the current transaction
 *	holdoff			a database kept free of workers until the transaction
 *					that asked for it ends (outbox_shmem.c)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_shmem.h"
#include "outbox_stream.h"
#include "outbox_worker.h"

/* How long DROP DATABASE and friends wait for a worker to leave */
#define OBX_STOP_TIMEOUT_MS		5000
#define OBX_STOP_POLL_MS		10

/* Requests for the commit of the current transaction */
static bool wake_worker_pending = false;	/* messages appended */
static bool probe_pending = false;	/* CREATE EXTENSION krizaka_outbox ran */
static bool wake_launcher_pending = false;	/* databases created or changed */
static bool holding_off = false;	/* this transaction keeps workers away */
static bool routes_changed_pending = false;	/* routes were set or removed */

/* The routed topics of this database, as of routes_generation_seen */
static List *routed_topics = NIL;
static MemoryContext routed_cxt = NULL;
static uint64 routes_generation_seen = PG_UINT64_MAX;

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

static void obx_xact_callback(XactEvent event, void *arg);
static void obx_process_utility(PlannedStmt *pstmt, const char *queryString,
								bool readOnlyTree,
								ProcessUtilityContext context,
								ParamListInfo params,
								QueryEnvironment *queryEnv,
								DestReceiver *dest, QueryCompletion *qc);
static const char *obx_database_to_clear(Node *parsetree);
static void obx_clear_database(const char *dbname);
static bool obx_stop_worker(Oid dboid, int timeout_ms);
static bool obx_names_extension(List *objects);
static bool obx_topic_routed(text *topic);

/*
 * Install the per-backend callbacks; called once from _PG_init, only when
 * preloaded.  One transaction callback serves the whole life of the backend.
 */
void
OutboxWakeupInit(void)
{
	RegisterXactCallback(obx_xact_callback, NULL);

	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = obx_process_utility;
}

/*
 * Ask for the worker of this database to be woken when this transaction
 * commits.  Called for every append, so it only sets a flag.
 */
void
WakeWorkerAtCommit(void)
{
	if (outbox_preloaded)
		wake_worker_pending = true;
}

/*
 * Ask for the worker to be woken at commit if topic is routed in this
 * database.  The list of routed topics is reloaded only when routes
 * changed somewhere.
 */
void
WakeWorkerForTopic(text *topic)
{
	if (!outbox_preloaded || wake_worker_pending)
		return;
	if (obx_topic_routed(topic))
		wake_worker_pending = true;
}

/* Routes were set or removed: tell every backend, and the worker, at commit. */
void
RoutesChangedAtCommit(void)
{
	if (outbox_preloaded)
	{
		/* a topic unrouted is claimed across all topics again */
		StreamAcrossForget();
		routes_changed_pending = true;
		wake_worker_pending = true;
	}
}

/* Whether topic has a route in this database, from the cached list. */
static bool
obx_topic_routed(text *topic)
{
	uint64		generation = ShmemRoutesGeneration();
	ListCell   *lc;
	const char *name = VARDATA_ANY(topic);
	int			len = VARSIZE_ANY_EXHDR(topic);

	if (generation != routes_generation_seen)
	{
		MemoryContext old;

		if (routed_cxt == NULL)
			routed_cxt = AllocSetContextCreate(TopMemoryContext,
											   "outbox routed topics",
											   ALLOCSET_SMALL_SIZES);
		MemoryContextReset(routed_cxt);
		routed_topics = NIL;
		old = MemoryContextSwitchTo(routed_cxt);
		routed_topics = StoreRoutedTopics();
		MemoryContextSwitchTo(old);
		routes_generation_seen = generation;
	}

	foreach(lc, routed_topics)
	{
		const char *t = (const char *) lfirst(lc);

		if ((int) strlen(t) == len && memcmp(t, name, len) == 0)
			return true;
	}
	return false;
}

/*
 * Act on the requests at commit; forget them on abort and prepare.
 * Holdoffs end with the transaction either way.  Nothing here may throw:
 * at XACT_EVENT_COMMIT the transaction has already committed.  Every
 * transaction of every backend passes through here, so shared memory is
 * touched only when this backend asked for something.
 */
static void
obx_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (routes_changed_pending)
				ShmemBumpRoutesGeneration();
			if (wake_worker_pending)
				ShmemWakeWorker(MyDatabaseId);
			if (probe_pending)
				ShmemRequestProbe(MyDatabaseId);
			if (wake_launcher_pending)
				ShmemWakeLauncher();
			break;

		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			break;

		default:
			/* the PRE_ events: the transaction may still fail */
			return;
	}

	wake_worker_pending = false;
	routes_changed_pending = false;
	probe_pending = false;
	wake_launcher_pending = false;
	if (holding_off)
	{
		holding_off = false;
		(void) ShmemReleaseHoldoffs(MyProcPid);
	}
}

/*
 * The database a statement needs free of other sessions, when the current
 * user could run it; NULL for every other statement.
 */
static const char *
obx_database_to_clear(Node *parsetree)
{
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			return ((DropdbStmt *) parsetree)->dbname;

		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				return ((RenameStmt *) parsetree)->subname;
			return NULL;

		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
			{
				DefElem    *opt = lfirst_node(DefElem, lc);

				if (strcmp(opt->defname, "tablespace") == 0)
					return ((AlterDatabaseStmt *) parsetree)->dbname;
			}
			return NULL;

		case T_CreatedbStmt:
			foreach(lc, ((CreatedbStmt *) parsetree)->options)
			{
				DefElem    *opt = lfirst_node(DefElem, lc);

				if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
					return defGetString(opt);
			}
			return NULL;

		default:
			return NULL;
	}
}

/*
 * Move the drain worker out of a database's way for the rest of this
 * transaction.  Does nothing for a database that does not exist or that the
 * current user does not own: the statement then fails on its own.
 */
static void
obx_clear_database(const char *dbname)
{
	Oid			dboid = get_database_oid(dbname, true);

	if (!OidIsValid(dboid) || !ObxDatabaseOwnercheck(dboid, GetUserId()))
		return;

	holding_off = true;
	if (!ShmemHoldOffDatabase(dboid))
		ereport(LOG,
				(errmsg("too many databases are being dropped or altered at once to keep the krizaka_outbox worker away from \"%s\"",
						dbname)));

	if (!obx_stop_worker(dboid, OBX_STOP_TIMEOUT_MS))
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("the krizaka_outbox worker of database \"%s\" did not exit in time",
						dbname)));
}

/*
 * Terminate the drain worker of a database and wait, at most timeout_ms, for
 * it to exit.  The caller has put a holdoff on the database first, so the
 * launcher starts no new one meanwhile, and a worker that was only starting
 * leaves by itself when it sees the holdoff.  Returns whether the database
 * is free of workers.
 */
static bool
obx_stop_worker(Oid dboid, int timeout_ms)
{
	TimestampTz deadline;
	pid_t		signalled = 0;
	pid_t		pid;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	while (ShmemWorkerPresent(dboid, &pid))
	{
		if (pid != 0 && pid != signalled)
		{
			/* the same signal as pg_terminate_backend() */
			if (kill(pid, SIGTERM) == 0)
				signalled = pid;
		}
		if (GetCurrentTimestamp() >= deadline)
			return false;

		WorkerWait(OBX_STOP_POLL_MS);
	}

	/*
	 * The slot is cleared a moment before the process leaves the proc array
	 * (ProcKill runs last), and the proc array is what DROP DATABASE checks.
	 */
	while (signalled != 0 && BackendPidGetProc(signalled) != NULL)
	{
		if (GetCurrentTimestamp() >= deadline)
			return false;
		WorkerWait(OBX_STOP_POLL_MS);
	}
	return true;
}

/* Whether a DROP EXTENSION names this extension. */
static bool
obx_names_extension(List *objects)
{
	ListCell   *lc;

	foreach(lc, objects)
	{
		if (strcmp(strVal(lfirst(lc)), OUTBOX_EXTENSION_NAME) == 0)
			return true;
	}
	return false;
}

/*
 * Utility hook: clear the way before database-level statements, and note
 * at which commit the launcher or the worker should look again.
 */
static void
obx_process_utility(PlannedStmt *pstmt, const char *queryString,
					bool readOnlyTree, ProcessUtilityContext context,
					ParamListInfo params, QueryEnvironment *queryEnv,
					DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	const char *clear = obx_database_to_clear(parsetree);

	if (clear != NULL)
		obx_clear_database(clear);

	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
							params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	/* the statement succeeded: note what to do at commit */
	switch (nodeTag(parsetree))
	{
		case T_CreateExtensionStmt:
			if (strcmp(((CreateExtensionStmt *) parsetree)->extname,
					   OUTBOX_EXTENSION_NAME) == 0)
				probe_pending = true;
			break;

		case T_DropStmt:
			/* the worker notices the missing extension and leaves */
			if (((DropStmt *) parsetree)->removeType == OBJECT_EXTENSION &&
				obx_names_extension(((DropStmt *) parsetree)->objects))
				wake_worker_pending = true;
			break;

		case T_AlterExtensionStmt:
			if (strcmp(((AlterExtensionStmt *) parsetree)->extname,
					   OUTBOX_EXTENSION_NAME) == 0)
				wake_worker_pending = true;
			break;

		case T_TransactionStmt:
			if (((TransactionStmt *) parsetree)->kind ==
				TRANS_STMT_COMMIT_PREPARED)
			{
				wake_worker_pending = true;
				StreamAcrossForget();	/* its topics are not known here */
			}
			break;

		case T_CreatedbStmt:
		case T_DropdbStmt:
		case T_AlterDatabaseStmt:
			wake_launcher_pending = true;
			break;

		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				wake_launcher_pending = true;
			break;

		default:
			break;
	}
}
