/*-------------------------------------------------------------------------
 *
 * outbox_worker.c
 *		The drain worker: one background process per database that delivers
 *		its routed messages.
 *
 * The launcher (outbox_launcher.c) registers a drain worker through
 * WorkerStart() and gives it a slot in shared memory (outbox_shmem.c).  The
 * worker publishes its pid and latch there, connects to its database and
 * loops: check in a short transaction that the extension exists, run
 * DrainDatabaseRound() (outbox_drain.c), wait on its latch until the next
 * due time (at most outbox.worker_naptime_ms) or until a committing
 * transaction wakes it (outbox_wakeup.c).  The wait also serves the remote
 * calls that the rounds leave in flight (DrainWait, outbox_drain_wait.c).
 * In a database without the
 * extension it leaves at once, saying so in its slot, so that no connection
 * lingers there.  When it exits, it leaves the reason in its slot for the
 * launcher, which decides when to start it again.
 *
 * This file also holds the wait at the head of the launcher's and the drain
 * worker's loops, and how both take their signals.
 *
 * Signals.  SIGTERM (a fast shutdown, the launcher stopping a worker, a
 * statement on the database, pg_terminate_backend) only sets a flag and the
 * latch while the process sleeps (at the head of its loop, or in the wait
 * between rounds), and the process then exits with a LOG line rather than
 * die()'s FATAL.  Everywhere else it is die(), so that a statement, a row
 * lock wait or a remote call in progress stops at once, landings of remote
 * batches included, except while a transaction commits: the commit of a
 * claim may wait for a synchronous standby (SyncRepWaitForLSN), and a die()
 * there would cut the wait short and let the transaction's notifications
 * go out, and the round go on, for messages the standby may never have
 * received.  A termination request during the commit waits for it, and
 * takes effect after it.
 *
 * SIGINT is a cancel, as in a session, while a step of a round runs in its
 * transaction (DrainStepRunning): pg_cancel_backend, statement_timeout (in
 * force for each step when set for the worker's role or database, or in
 * postgresql.conf) and lock_timeout end the step with an ERROR, which the
 * round records on the route (its last_failure and a pause) and goes on.
 * A cancel that comes while the process sleeps, between steps or during a
 * commit is ignored: there is nothing to cancel, and a commit's wait for a
 * synchronous standby must not be cut short; one pending when a commit
 * begins ends that transaction before it commits.
 *
 * Glossary:
 *	round		one call of DrainDatabaseRound(): passes over the routed
 *				topics, with the routes read afresh, for at most about
 *				100 ms while messages remain
 *	naptime		the longest sleep between two rounds
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/extension.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_shmem.h"
#include "outbox_worker.h"

#define OBX_WORKER_TYPE			"krizaka_outbox worker"
#define OBX_MIN_SLEEP_MS		50		/* something due but nothing done */

/* What the launcher tells a worker it registers, in bgw_extra */
typedef struct OutboxWorkerArgs
{
	Oid			dboid;
	Oid			roleid;			/* InvalidOid: the bootstrap superuser */
	uint32		generation;
	NameData	datname;		/* for the log */
} OutboxWorkerArgs;

StaticAssertDecl(sizeof(OutboxWorkerArgs) <= BGW_EXTRALEN,
				 "OutboxWorkerArgs does not fit in bgw_extra");

/* SIGTERM: whether it came, and whether it may be die() now (see above) */
static volatile sig_atomic_t obx_stop_requested = false;
static volatile sig_atomic_t obx_waiting = false;
static volatile sig_atomic_t obx_committing = false;
static NameData obx_datname;	/* of a drain worker; empty in the launcher */

static OutboxWorkerExit obx_my_exit = OBX_EXIT_NONE;
static emit_log_hook_type prev_emit_log_hook = NULL;
static char obx_error_message[OUTBOX_WORKER_ERROR_BYTES];	/* last ERROR/FATAL */
static int	obx_error_code = 0;

static void obx_sigterm(SIGNAL_ARGS);
static void obx_sigint(SIGNAL_ARGS);
static void obx_exit_if_asked(int code);
static void obx_worker_xact_callback(XactEvent event, void *arg);
static void obx_worker_detach(int code, Datum arg);
static ObxNoreturn void obx_worker_loop(void);
static bool obx_extension_installed(void);
static bool obx_round_wanted(void);
static long obx_worker_sleep_ms(bool ran, TimestampTz next_wake, int64 done);
static void obx_worker_log_hook(ErrorData *edata);

/*
 * Wait on this process's latch for at most timeout_ms, then take any
 * interrupt.  The launcher and the drain workers never sleep otherwise, nor
 * does a backend waiting for a worker to exit.
 */
void
WorkerWait(long timeout_ms)
{
	(void) WaitLatch(MyLatch,
					 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, PG_WAIT_EXTENSION);

	/*
	 * Reset before the work that follows: a commit that wakes us during it
	 * sets the latch again, and the next wait returns at once.
	 */
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * The head of the launcher's loop: wait, then reload the configuration file
 * if SIGHUP asked for it.  Returns whether it was reloaded.  A termination
 * request ends the launcher here, with exit code 1 so that the postmaster
 * starts it again unless it is shutting down.
 */
bool
WorkerWaitForWork(long timeout_ms)
{
	obx_exit_if_asked(1);
	obx_waiting = true;
	WorkerWait(timeout_ms);
	obx_waiting = false;
	obx_exit_if_asked(1);
	return WorkerReloadIfAsked();
}

/*
 * Install the signal handlers of the launcher or a drain worker, before
 * signals are unblocked: SIGHUP reloads, SIGTERM stops, and SIGINT is a
 * cancel of a drain worker's step (see the head comment); the launcher
 * ignores it.
 */
void
WorkerSetSignals(bool drain_worker)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, obx_sigterm);
	pqsignal(SIGINT, drain_worker ? obx_sigint : SIG_IGN);
}

/*
 * SIGTERM handler of the launcher and the drain workers: remember the
 * request and wake the process; where nothing may be cut short (sleeping,
 * committing) that is all, elsewhere it is die().
 */
static void
obx_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	obx_stop_requested = true;
	if (!obx_waiting && !obx_committing)
		die(postgres_signal_arg);
	SetLatch(MyLatch);

	errno = save_errno;
}

/*
 * SIGINT handler of a drain worker: a cancel of the step in progress, as
 * StatementCancelHandler is in a session; ignored outside a step and
 * during a commit.
 */
static void
obx_sigint(SIGNAL_ARGS)
{
	if (DrainStepRunning && !obx_committing && !obx_waiting)
		StatementCancelHandler(postgres_signal_arg);
}

/*
 * Leave, at LOG, if a termination was requested: the routine way out of a
 * fast shutdown, a reload that stops the process, DROP DATABASE and the
 * like.
 */
static void
obx_exit_if_asked(int code)
{
	if (!obx_stop_requested)
		return;
	if (NameStr(obx_datname)[0] != '\0')
		ereport(LOG,
				(errmsg("krizaka_outbox worker for database \"%s\" stopping on request",
						NameStr(obx_datname))));
	else
		ereport(LOG,
				(errmsg("krizaka_outbox launcher stopping on request")));
	proc_exit(code);
}

/*
 * Transaction callback of a drain worker: no termination request or cancel
 * may cut a commit short (its wait for a synchronous standby).  One that
 * came before the commit ends the transaction before it commits; a
 * termination that comes during it is held, and is die() once it is done.
 */
static void
obx_worker_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			/* NB: set first, so that a SIGTERM from now on only sets the flag */
			obx_committing = true;
			if (ProcDiePending || QueryCancelPending)
				CHECK_FOR_INTERRUPTS();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
			obx_committing = false;
			if (obx_stop_requested && !obx_waiting)
				die(SIGTERM);
			break;
		default:
			break;
	}
}

/*
 * Reload the configuration file if SIGHUP asked for it, after a wait of
 * the launcher or a drain worker.  Returns whether it was reloaded.
 */
bool
WorkerReloadIfAsked(void)
{
	if (!ConfigReloadPending)
		return false;
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	return true;
}

/*
 * Register the drain worker of a database, for the launcher: it is to take
 * slot slotno of this launcher generation and connect as roleid.  Returns
 * whether the postmaster had room for it; *handle is allocated in the
 * current memory context.
 */
bool
WorkerStart(int slotno, Oid dboid, const char *datname, Oid roleid,
			uint32 generation, BackgroundWorkerHandle **handle)
{
	BackgroundWorker bgw;
	OutboxWorkerArgs args;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;	/* the launcher decides */
	strlcpy(bgw.bgw_library_name, OUTBOX_EXTENSION_NAME, BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "OutboxWorkerMain", BGW_MAXLEN);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "%s for database %s",
			 OBX_WORKER_TYPE, datname);
	strlcpy(bgw.bgw_type, OBX_WORKER_TYPE, BGW_MAXLEN);
	bgw.bgw_main_arg = Int32GetDatum(slotno);
	bgw.bgw_notify_pid = MyProcPid;

	args.dboid = dboid;
	args.roleid = roleid;
	args.generation = generation;
	namestrcpy(&args.datname, datname);
	memcpy(bgw.bgw_extra, &args, sizeof(args));

	return RegisterDynamicBackgroundWorker(&bgw, handle);
}

/* Entry point of a drain worker. */
void
OutboxWorkerMain(Datum main_arg)
{
	OutboxWorkerArgs args;
	bool		held_off;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	obx_datname = args.datname;

	/* handlers first, then unblock, then connect (which may wait on locks) */
	WorkerSetSignals(true);
	BackgroundWorkerUnblockSignals();

	/*
	 * Publish our pid and latch in the slot the launcher gave us.
	 *
	 * NB: the exit callback is a before_shmem_exit one, not on_shmem_exit:
	 * the published latch belongs to our PGPROC, which ProcKill (an
	 * on_shmem_exit callback) hands back, and it must be withdrawn while it
	 * is still ours.  It also runs after the transaction abort of
	 * ShutdownPostgres (registered later, run earlier), and before the
	 * postmaster tells the launcher we are gone, so the launcher always
	 * finds the exit reason in the slot.
	 */
	before_shmem_exit(obx_worker_detach, (Datum) 0);
	if (!ShmemWorkerAttach(DatumGetInt32(main_arg), args.dboid,
						   args.generation, &held_off))
		proc_exit(0);			/* registered by an earlier launcher */

	/*
	 * Whatever ends the worker with an error, from a failed connection to an
	 * ERROR in a round (which the bgworker error handler turns into exit
	 * code 1), passes through this hook on its way to the log.
	 */
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = obx_worker_log_hook;

	/*
	 * A DROP/ALTER/CREATE DATABASE that began after the launcher registered
	 * us: connecting now would make it fail.
	 */
	if (held_off)
	{
		obx_my_exit = OBX_EXIT_HELD_OFF;
		proc_exit(0);
	}

	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.roleid, 0);
	RegisterXactCallback(obx_worker_xact_callback, NULL);
	SetConfigOption("application_name", OBX_WORKER_TYPE,
					PGC_USERSET, PGC_S_SESSION);
	/*
	 * The path and JIT setting every statement of the store runs with
	 * (outbox_spi.c): set once for the session, not per statement.
	 */
	SetConfigOption("search_path", IDENTITY_SEARCH_PATH,
					PGC_USERSET, PGC_S_SESSION);
	SetConfigOption("jit", "off", PGC_USERSET, PGC_S_SESSION);
	pgstat_report_activity(STATE_IDLE, NULL);
	ereport(DEBUG1,
			(errmsg_internal("krizaka_outbox worker started in database %u",
							 args.dboid)));

	obx_worker_loop();
}

/*
 * Exit callback: withdraw our pid and latch, and leave the exit reason for
 * the launcher.  A failing exit whose last error is not the termination
 * request (SIGTERM's FATAL) was caused by that error.
 */
static void
obx_worker_detach(int code, Datum arg)
{
	bool		failed = (code != 0 && obx_error_message[0] != '\0' &&
						  obx_error_code != ERRCODE_ADMIN_SHUTDOWN);

	ShmemWorkerDetach(obx_my_exit, failed ? obx_error_message : NULL);
}

/*
 * The worker's loop: wait, then one round.  The first wait has no timeout,
 * so the first round runs at once.  The round keeps what it allocates in a
 * memory context of its own, which it deletes; the remote batches it leaves
 * in flight keep theirs until they are through.
 */
static void
obx_worker_loop(void)
{
	Oid			delivering_role = GetUserId();
	long		timeout = 0;

	for (;;)
	{
		TimestampTz next_wake = DT_NOEND;
		int64		delivered = 0;
		int64		failed = 0;
		bool		ran;

		obx_exit_if_asked(0);
		DrainWait(timeout, &obx_waiting, &obx_stop_requested, obx_round_wanted);
		obx_exit_if_asked(0);
		(void) WorkerReloadIfAsked();
		MemoryContextSwitchTo(TopMemoryContext);

		if (!obx_extension_installed())
		{
			/* no connection may linger here: the launcher looks again later */
			obx_my_exit = OBX_EXIT_NO_EXTENSION;
			proc_exit(0);
		}

		ShmemWorkerRoundBegins();
		ran = DrainDatabaseRound(delivering_role, &next_wake,
								 &delivered, &failed);

		timeout = obx_worker_sleep_ms(ran, next_wake, delivered + failed);
		ShmemWorkerRoundEnds(ran, delivered, failed);
		pgstat_report_activity(STATE_IDLE, NULL);
	}
}

/*
 * Whether the extension exists in this database, looked up in a short
 * transaction of its own.  pg_extension is only read, so this never waits
 * for a DROP EXTENSION.
 */
static bool
obx_extension_installed(void)
{
	bool		installed;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	installed = OidIsValid(ObxExtensionOid(OUTBOX_EXTENSION_NAME));
	CommitTransactionCommand();

	return installed;
}

/*
 * Whether the latch that ended the drain worker's wait asks for a round: a
 * commit woke it (outbox_wakeup.c), or the configuration is to be
 * reloaded.
 */
static bool
obx_round_wanted(void)
{
	return ShmemWorkerTakeWake() || ConfigReloadPending;
}

/*
 * How long to sleep after a round: until the next due time, at most the
 * naptime.  Something already due after a round that did nothing (rows
 * locked by another claimer) gets a short pause instead of a busy loop.  A
 * round that could not run (a DROP EXTENSION holds the tables) sleeps the
 * naptime: the commit of that DROP wakes the worker anyway.
 */
static long
obx_worker_sleep_ms(bool ran, TimestampTz next_wake, int64 done)
{
	long		ms;

	if (!ran || next_wake == DT_NOEND)
		return outbox_worker_naptime_ms;

	ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), next_wake);
	if (ms <= 0 && done == 0)
		ms = OBX_MIN_SLEEP_MS;
	return Min(ms, outbox_worker_naptime_ms);
}

/*
 * emit_log_hook of a drain worker: remember the last error reported, which
 * becomes last_error if it ends the worker.  Only a static buffer is written
 * here; shared memory is touched by the exit callback.
 */
static void
obx_worker_log_hook(ErrorData *edata)
{
	if (edata->elevel >= ERROR && edata->message != NULL)
	{
		int			len = pg_mbcliplen(edata->message, strlen(edata->message),
									   OUTBOX_WORKER_ERROR_BYTES - 1);

		memcpy(obx_error_message, edata->message, len);
		obx_error_message[len] = '\0';
		obx_error_code = edata->sqlerrcode;
	}

	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}
