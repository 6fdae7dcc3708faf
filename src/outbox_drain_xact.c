/*-------------------------------------------------------------------------
 *
 * outbox_drain_xact.c
 *		The drain worker's transactions: each step of a round and each
 *		landing of a remote batch runs in one of its own, and an error in
 *		it ends that transaction and nothing more.
 *
 * A step begins with the outbox tables locked without waiting (a DROP
 * EXTENSION, an ALTER TABLE or a VACUUM FULL holding them makes the step
 * give up for now, never wait) and, when statement_timeout is set for the
 * worker's role or database, under that timeout, as a statement of a
 * session would be; lock_timeout applies to the row locks it may wait
 * for.  An ERROR raised in a step (a user trigger on outbox.message, a
 * full NOTIFY queue at commit, a TOAST value removed under a batch in
 * flight, a cancel or a timeout) is caught by the caller, which hands it
 * to DrainCatch: the error is logged, the transaction aborted, and the
 * caller records it on the messages or the route (outbox_drain.c,
 * outbox_drain_wait.c) and goes on with the other topics, as pg_cron does
 * with a failing job.  A FATAL (a termination) is never caught.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#include "outbox.h"
#include "outbox_drain_int.h"

volatile sig_atomic_t DrainStepRunning = false;

/* whether the worker's transaction is committing (an error then is the commit's) */
static bool obx_committing = false;

static void obx_begin(const char *activity);

/* Start a transaction of the worker, with a snapshot and its timeout. */
static void
obx_begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	DrainStepRunning = true;
	if (StatementTimeout > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, StatementTimeout);
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * Start a transaction of the worker and take the tables' locks without
 * waiting, in memory context cxt; on false the transaction is already over
 * (the tables are gone or locked, and the caller gives up for now).
 */
bool
DrainBeginLocked(const char *activity, MemoryContext cxt)
{
	obx_begin(activity);
	MemoryContextSwitchTo(cxt);
	if (IdentityTryLockTables())
		return true;
	DrainCommit();
	return false;
}

/*
 * Commit a transaction of the worker.  The timeout ends first: the commit
 * is not a statement, and nothing may cut it short (outbox_worker.c).
 */
void
DrainCommit(void)
{
	if (get_timeout_active(STATEMENT_TIMEOUT))
		disable_timeout(STATEMENT_TIMEOUT, false);
	PopActiveSnapshot();
	obx_committing = true;
	CommitTransactionCommand();
	obx_committing = false;
	DrainStepRunning = false;
	QueryCancelPending = false;	/* none can come during the commit */
	pgstat_report_stat(false);
}

/*
 * In the PG_CATCH of a worker's transaction: take the error, log it, abort
 * the transaction and clear the error state.  Returns a copy of the error
 * in memory context cxt, which is current afterwards; *at_commit says
 * whether the commit raised it (a deferred trigger, a full NOTIFY queue)
 * rather than a statement of the step.
 */
ErrorData *
DrainCatch(MemoryContext cxt, bool *at_commit)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	*at_commit = obx_committing;
	obx_committing = false;

	HOLD_INTERRUPTS();
	EmitErrorReport();
	AbortCurrentTransaction();
	FlushErrorState();
	if (get_timeout_active(STATEMENT_TIMEOUT))
		disable_timeout(STATEMENT_TIMEOUT, false);
	DrainStepRunning = false;
	QueryCancelPending = false; /* it has ended the step it came for */
	RESUME_INTERRUPTS();

	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(cxt);
	return edata;
}

/*
 * The text an error caught in a step leaves in last_error or
 * routes.last_failure: "SQLSTATE: message", with its detail and hint, as
 * the failures of delivery read (OutboxErrorText).
 */
char *
DrainErrorText(const ErrorData *edata)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s: %s", unpack_sql_state(edata->sqlerrcode),
					 edata->message ? edata->message : "(no message)");
	if (edata->detail != NULL)
		appendStringInfo(&buf, "\nDETAIL: %s", edata->detail);
	if (edata->hint != NULL)
		appendStringInfo(&buf, "\nHINT: %s", edata->hint);
	return buf.data;
}

/*
 * Whether an error caught in a step can be the fault of the messages it
 * handled, rather than of the moment or the setup: a cancel, a timeout, a
 * lock or resource shortage, a conflict, a shutdown, a missing object or
 * privilege says nothing about them, and must not use up their attempts.
 */
bool
DrainErrorIsMessages(const ErrorData *edata)
{
	switch (ERRCODE_TO_CATEGORY(edata->sqlerrcode))
	{
		case ERRCODE_CONNECTION_EXCEPTION:	/* 08 */
		case ERRCODE_INVALID_TRANSACTION_STATE: /* 25 */
		case ERRCODE_INVALID_CATALOG_NAME:	/* 3D */
		case ERRCODE_INVALID_SCHEMA_NAME:	/* 3F */
		case ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION: /* 42 */
		case ERRCODE_TRANSACTION_ROLLBACK:	/* 40: deadlock, serialization */
		case ERRCODE_INSUFFICIENT_RESOURCES:	/* 53 */
		case ERRCODE_PROGRAM_LIMIT_EXCEEDED:	/* 54: a full NOTIFY queue */
		case ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE:	/* 55: locks */
		case ERRCODE_OPERATOR_INTERVENTION: /* 57: cancel, shutdown */
		case ERRCODE_SYSTEM_ERROR:	/* 58 */
			return false;
		default:
			return true;
	}
}
