/*-------------------------------------------------------------------------
 *
 * outbox_spi.c
 *		How the statements of the store run: saved plans, the planner
 *		settings they are planned under, and the checks of what SPI answers.
 *
 * Every statement is a SavedStatement: prepared on first use and kept for
 * the life of the backend with SPI_keepplan; the plan cache re-plans it if
 * the tables change.  A run checks that SPI answered with the exact SPI_OK_*
 * code the statement declares, so a statement that did something else (a
 * rule, a changed table) stops with an error instead of being misread.
 *
 * Every statement is planned and run with search_path pinned to the one
 * of the SECURITY DEFINER functions: outbox.append, SECURITY INVOKER for
 * speed (outbox_identity.c), calls in with its caller's (the worker sets
 * the pinned one for its session, so that it pays nothing per statement).
 * The statements qualify every name anyway; the pin covers what they run
 * that is not theirs (an operator's triggers), which runs as the owner of
 * the tables and must not look names up in a path its caller chose.  The
 * path has to stay pinned while the statement runs, triggers included:
 * the plan cache compares a saved plan's search path with the one in
 * effect when it is executed, and analyses the statement again under the
 * latter when they differ.  That is also why it does no harm to a
 * trigger's own plans: PL/pgSQL's plans are checked the same way, so a
 * plan a trigger made under the pinned path is made again under its
 * caller's.
 *
 * The planner settings below are different: they are not part of a plan's
 * identity, and a PL/pgSQL trigger would keep a plan made under them.  So
 * they are set only while the statement's plan is made or checked
 * (obx_ready: SPI_plan_get_cached_plan, which builds or revalidates the
 * generic plan), and the statement then runs under its caller's settings,
 * finding its plan ready.  Should the plan be invalidated in between (an
 * invalidation read by nothing but this very statement's start, which
 * holds its locks already), it would be made once without them; it would
 * still be right, and the next call makes it again under them.
 *
 * Plans are made without JIT compilation: a statement of the store reads a
 * few index pages, but on a large table the generic plan of one that reads
 * up to a window of rows can be estimated above jit_above_cost, and
 * compiling its expressions would then cost every execution milliseconds
 * (and load LLVM into the worker).
 *
 * Plans are made with sequential scans switched off, and bitmap scans too
 * except where a statement asks for them (purge).  A queue table is often
 * empty when a plan is made (after a TRUNCATE, or a VACUUM of a drained
 * queue), and the statistics of an empty table make a scan of the whole
 * table, or a bitmap scan and a sort, look cheapest; that plan would stay
 * until the next ANALYZE while the table grows, and every claim would read
 * every pending row.  The statements are written for their indexes, which
 * are right at any size.  Purge finds its rows through two indexes at once,
 * which takes a bitmap scan.  The single-row inserts have no plan to choose
 * and skip this.
 *
 * Glossary:
 *	run		connect, execute one statement, finish: SpiRun, SpiRunFirstRow
 *	execute	one statement inside a connection the caller opened with
 *			SpiConnect and closes with SpiFinish
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "jit/jit.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/plancache.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "outbox_identity.h"
#include "outbox_spi.h"

static SPIPlanPtr obx_plan(SavedStatement *stmt);
static SPIPlanPtr obx_ready(SavedStatement *stmt);
static int	obx_settings_begin(SavedStatementScans scans);
static void obx_settings_end(int nestlevel);
static uint64 obx_execute(SavedStatement *stmt, Datum *args,
						  const char *nulls, Snapshot snapshot,
						  bool read_only, long count);

/* Prepare a statement on first use and keep it for the backend's life. */
static SPIPlanPtr
obx_plan(SavedStatement *stmt)
{
	if (stmt->plan == NULL)
	{
		SPIPlanPtr	plan;

		/*
		 * A generic plan, chosen once: the statements are short and run
		 * often, and re-planning them for each set of values would cost more
		 * than running them.
		 */
		plan = SPI_prepare_cursor(stmt->sql, stmt->nargs, stmt->argtypes,
								  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 stmt->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		stmt->plan = plan;
	}
	return stmt->plan;
}

/*
 * The planner settings of a statement's planning (the search path is
 * pinned by the caller, for the planning and the run): JIT off, and the
 * scans that scans excludes switched off.  JIT is left alone when it is
 * off already (the worker sets it once for its session).  Returns the GUC
 * nest level to pass to obx_settings_end, or 0 when nothing was changed;
 * an error unwinds the settings with the (sub)transaction.
 */
static int
obx_settings_begin(SavedStatementScans scans)
{
	int			nestlevel = 0;

	if (jit_enabled || scans != OBX_SCANS_ANY)
		nestlevel = NewGUCNestLevel();
	if (jit_enabled)
		(void) set_config_option("jit", "off", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (scans == OBX_SCANS_ANY)
		return nestlevel;
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (scans == OBX_SCANS_INDEX)
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

/* Restore the settings changed by obx_settings_begin, if it changed any. */
static void
obx_settings_end(int nestlevel)
{
	if (nestlevel > 0)
		AtEOXact_GUC(true, nestlevel);
}

/*
 * The statement's plan, prepared on first use, and its generic plan built
 * or revalidated now under the planner settings of the statement (which
 * are restored before it returns).  Needs an SPI connection, and the
 * search path pinned.
 */
static SPIPlanPtr
obx_ready(SavedStatement *stmt)
{
	int			nestlevel = obx_settings_begin(stmt->scans);
	SPIPlanPtr	plan = obx_plan(stmt);
	CachedPlan *cplan;

	cplan = SPI_plan_get_cached_plan(plan);
	if (cplan != NULL)
		ReleaseCachedPlan(cplan, CurrentResourceOwner);
	obx_settings_end(nestlevel);
	return plan;
}

/* Open a connection to SPI for the statements that follow. */
void
SpiConnect(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/* Close the connection opened by SpiConnect; frees what SPI allocated. */
void
SpiFinish(void)
{
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * Execute a saved statement in the current connection, under the planner
 * settings it asks for, with the given snapshot (InvalidSnapshot: the
 * usual one).  Returns the number of rows it processed; the rows it
 * returned are in SPI_tuptable.
 */
static uint64
obx_execute(SavedStatement *stmt, Datum *args, const char *nulls,
			Snapshot snapshot, bool read_only, long count)
{
	int			nestlevel = IdentityPinSearchPath();
	SPIPlanPtr	plan = obx_ready(stmt);
	int			ret;

	if (snapshot == InvalidSnapshot)
		ret = SPI_execute_plan(plan, args, nulls, read_only, count);
	else
		ret = SPI_execute_snapshot(plan, args, nulls, snapshot,
								   InvalidSnapshot, read_only, false, count);
	IdentityUnpinSearchPath(nestlevel);
	if (ret != stmt->expect)
		elog(ERROR, "%s failed for \"%s\": %s",
			 snapshot == InvalidSnapshot ? "SPI_execute_plan" : "SPI_execute_snapshot",
			 stmt->sql, SPI_result_code_string(ret));
	return SPI_processed;
}

/*
 * Execute a saved statement in the current connection.  Returns the number
 * of rows it processed; the rows it returned are in SPI_tuptable.
 */
uint64
SpiExecute(SavedStatement *stmt, Datum *args, const char *nulls,
		   bool read_only, long count)
{
	return obx_execute(stmt, args, nulls, InvalidSnapshot, read_only, count);
}

/*
 * Run stmt, a query of one boolean column, with no null argument: its
 * value in the first row (false when there is none, or it is null).
 */
bool
SpiExecuteBool(SavedStatement *stmt, Datum *args)
{
	bool		isnull = true;
	Datum		d = (Datum) 0;

	if (SpiExecute(stmt, args, NULL, false, 1) > 0)
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_freetuptable(SPI_tuptable);
	return !isnull && DatumGetBool(d);
}

/*
 * Execute a read-only saved statement with the latest snapshot instead of
 * the transaction's, to see what committed after it began.
 */
uint64
SpiExecuteLatest(SavedStatement *stmt, Datum *args, const char *nulls)
{
	return obx_execute(stmt, args, nulls, GetLatestSnapshot(), true, 0);
}

/*
 * Execute a read-only saved statement in committed state: the latest
 * snapshot, without the changes of this very transaction (its command
 * counter set back to the first command), so that what the statement finds
 * cannot be undone by a rollback of this transaction.
 */
uint64
SpiExecuteCommitted(SavedStatement *stmt, Datum *args, const char *nulls,
					long count)
{
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	uint64		processed;

	snap->curcid = FirstCommandId;
	processed = obx_execute(stmt, args, nulls, snap, true, count);
	UnregisterSnapshot(snap);
	return processed;
}

/* Open a read-only cursor over a saved query, planned as it asks for. */
Portal
SpiOpenCursor(SavedStatement *stmt, Datum *args, const char *nulls)
{
	int			nestlevel = IdentityPinSearchPath();
	SPIPlanPtr	plan = obx_ready(stmt);
	Portal		portal;

	portal = SPI_cursor_open(NULL, plan, args, nulls, true);
	IdentityUnpinSearchPath(nestlevel);
	return portal;
}

/*
 * Run one statement that changes rows in a connection of its own.  Returns
 * the number of rows it processed.
 */
uint64
SpiRun(SavedStatement *stmt, Datum *args, const char *nulls)
{
	uint64		processed;

	SpiConnect();
	processed = SpiExecute(stmt, args, nulls, false, 0);
	SpiFinish();
	return processed;
}

/*
 * Run one read-only query in a connection of its own and copy the first
 * ncols columns of its first row into row and rownulls, detoasted and in
 * the caller's memory context.  Returns false, setting nothing, when the
 * query found no row.
 */
bool
SpiRunFirstRow(SavedStatement *stmt, Datum *args, const char *nulls,
			   Datum *row, bool *rownulls, int ncols)
{
	MemoryContext caller = CurrentMemoryContext;
	bool		found;

	SpiConnect();
	found = (SpiExecute(stmt, args, nulls, true, 1) > 0);
	if (found)
	{
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(caller);
		int			i;

		Assert(ncols <= desc->natts);
		for (i = 0; i < ncols; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], desc, i + 1,
										  &rownulls[i]);

			if (rownulls[i])
				row[i] = (Datum) 0;
			else if (att->attlen == -1)
				row[i] = PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
			else
				row[i] = datumCopy(d, att->attbyval, att->attlen);
		}
		MemoryContextSwitchTo(spi);
	}
	SpiFinish();
	return found;
}

/*
 * The generic plan of stmt, prepared anew (not kept) and planned under its
 * planner settings and the pinned search path, as its runs are: for the
 * checks of outbox_spi_check.c.  Needs an SPI connection; the caller
 * releases the plan with ReleaseCachedPlan(plan, NULL).
 */
CachedPlan *
SpiCheckPlan(SavedStatement *stmt)
{
	int			pinned = IdentityPinSearchPath();
	int			nestlevel = obx_settings_begin(stmt->scans);
	SPIPlanPtr	plan;
	CachedPlan *cplan;

	plan = SPI_prepare_cursor(stmt->sql, stmt->nargs, stmt->argtypes,
							  CURSOR_OPT_GENERIC_PLAN);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	cplan = SPI_plan_get_cached_plan(plan);
	obx_settings_end(nestlevel);
	IdentityUnpinSearchPath(pinned);
	return cplan;
}
