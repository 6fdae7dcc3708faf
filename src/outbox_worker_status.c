/*-------------------------------------------------------------------------
 *
 * outbox_worker_status.c
 *		outbox.worker_status(): what the drain workers are doing.
 *
 * One row per database the launcher serves, read from a copy of the
 * workers' slots in shared memory (outbox_shmem.c), and one in the state
 * "no such database" for each name outbox.worker_databases lists that no
 * database has.  Only a preloaded
 * library has workers; elsewhere the function explains what is missing.
 * On a server in recovery no launcher runs (it starts when recovery ends):
 * the rows are then the databases it would serve, from pg_database, each
 * with state standby.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "outbox.h"
#include "outbox_shmem.h"

#define OBX_STATUS_COLUMNS		8

PG_FUNCTION_INFO_V1(outbox_worker_status);

static const char *obx_state_name(OutboxWorkerState state);
static bool obx_waits_for_standby(pid_t pid);
static int	obx_compare_infos(const void *a, const void *b);
static int	obx_compare_names(const ListCell *a, const ListCell *b);
static List *obx_missing_databases(void);
static void obx_missing_row(ReturnSetInfo *rsinfo, const char *name);
static void obx_standby_rows(ReturnSetInfo *rsinfo, bool see_all,
							 const char *here);

/* The name worker_status() shows for a state. */
static const char *
obx_state_name(OutboxWorkerState state)
{
	switch (state)
	{
		case OBX_WORKER_STARTING:
			return "starting";
		case OBX_WORKER_RUNNING:
			return "running";
		case OBX_WORKER_SLEEPING:
			return "sleeping";
		case OBX_WORKER_NO_EXTENSION:
			return "no extension";
		case OBX_WORKER_STOPPED:
		case OBX_WORKER_FREE:
			break;
	}
	return "stopped";
}

/*
 * Whether the process pid waits for a synchronous standby to confirm its
 * commit: its wait event, read as pg_stat_activity reads it.
 */
static bool
obx_waits_for_standby(pid_t pid)
{
	PGPROC	   *proc = BackendPidGetProc(pid);

	return proc != NULL &&
		*((volatile uint32 *) &proc->wait_event_info) == WAIT_EVENT_SYNC_REP;
}

/* qsort comparator: slots by database name. */
static int
obx_compare_infos(const void *a, const void *b)
{
	return strcmp(NameStr(((const OutboxWorkerInfo *) a)->datname),
				  NameStr(((const OutboxWorkerInfo *) b)->datname));
}

/*
 * outbox.worker_status(): one row per database the launcher serves, from a
 * copy of the slots taken under the lock, ordered by database name.
 *
 * The rows of other databases (their names, counters and errors) are shown
 * only to roles with the privileges of pg_read_all_stats, as
 * pg_stat_activity shows other sessions' queries; everybody else sees the
 * row of the database it is connected to.
 */
Datum
outbox_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo;
	OutboxWorkerInfo *infos;
	int			n;
	int			i;
	bool		see_all;
	char	   *here;
	List	   *missing;
	ListCell   *lc;

	n = ShmemWorkerSnapshot(&infos);
	if (!outbox_preloaded || n < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("krizaka_outbox is not preloaded"),
				 errdetail("The background worker runs only when the library is loaded at server start."),
				 errhint("Add %s to %s and restart the server.",
						 OUTBOX_EXTENSION_NAME, "shared_preload_libraries")));

	see_all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	here = get_database_name(MyDatabaseId);

	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (RecoveryInProgress())
	{
		obx_standby_rows(rsinfo, see_all, here);
		return (Datum) 0;
	}

	qsort(infos, n, sizeof(OutboxWorkerInfo), obx_compare_infos);
	missing = see_all ? obx_missing_databases() : NIL;

	for (i = 0; i < n; i++)
	{
		OutboxWorkerInfo *info = &infos[i];
		Datum		values[OBX_STATUS_COLUMNS];
		bool		nulls[OBX_STATUS_COLUMNS];

		/* the databases that do not exist, in their place in the order */
		while (missing != NIL &&
			   strcmp((char *) linitial(missing), NameStr(info->datname)) < 0)
		{
			obx_missing_row(rsinfo, (char *) linitial(missing));
			missing = list_delete_first(missing);
		}

		if (!see_all && (here == NULL || strcmp(NameStr(info->datname), here) != 0))
			continue;

		memset(nulls, 0, sizeof(nulls));
		values[0] = NameGetDatum(&info->datname);
		values[1] = Int32GetDatum(info->pid);
		nulls[1] = (info->pid == 0);
		values[2] = CStringGetTextDatum(info->pid != 0 &&
										obx_waits_for_standby(info->pid) ?
										"waiting for replication" :
										obx_state_name(info->state));
		values[3] = TimestampTzGetDatum(info->started_at);
		nulls[3] = (info->started_at == 0);
		values[4] = TimestampTzGetDatum(info->last_round_at);
		nulls[4] = (info->last_round_at == 0);
		values[5] = Int64GetDatum(info->delivered);
		values[6] = Int64GetDatum(info->failed);
		values[7] = CStringGetTextDatum(info->last_error);
		nulls[7] = (info->last_error[0] == '\0');

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	foreach(lc, missing)
		obx_missing_row(rsinfo, (char *) lfirst(lc));

	return (Datum) 0;
}

/*
 * The names outbox.worker_databases lists that no database has, sorted:
 * the launcher serves them once they are created (and logs once that they
 * do not exist).  None with '*'.
 */
static List *
obx_missing_databases(void)
{
	List	   *missing = NIL;
	ListCell   *lc;
	bool		star;
	List	   *names = LauncherDatabaseNames(&star);

	if (star)
		return NIL;
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);

		if (!OidIsValid(get_database_oid(name, true)) &&
			!LauncherListed(missing, false, name))
			missing = lappend(missing, name);
	}
	list_sort(missing, obx_compare_names);
	return missing;
}

/* The row of a listed database that does not exist: no process, no counts. */
static void
obx_missing_row(ReturnSetInfo *rsinfo, const char *name)
{
	NameData	datname;
	Datum		values[OBX_STATUS_COLUMNS];
	bool		nulls[OBX_STATUS_COLUMNS];

	namestrcpy(&datname, name);
	memset(nulls, true, sizeof(nulls));
	values[0] = NameGetDatum(&datname);
	nulls[0] = false;
	values[2] = CStringGetTextDatum("no such database");
	nulls[2] = false;
	values[5] = Int64GetDatum(0);
	nulls[5] = false;
	values[6] = Int64GetDatum(0);
	nulls[6] = false;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* list_sort comparator: database names. */
static int
obx_compare_names(const ListCell *a, const ListCell *b)
{
	return strcmp((const char *) lfirst(a), (const char *) lfirst(b));
}

/*
 * The rows of a server in recovery: every database the launcher would
 * serve once recovery ends (with '*', every database it could connect to:
 * whether the others have the extension cannot be seen from here), in the
 * state standby, without a process.
 */
static void
obx_standby_rows(ReturnSetInfo *rsinfo, bool see_all, const char *here)
{
	List	   *names;
	List	   *serve = NIL;
	ListCell   *lc;
	bool		star;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;

	names = LauncherDatabaseNames(&star);
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tup);
		const char *datname = NameStr(form->datname);

		if (LauncherListed(names, star, datname) && LauncherCanConnect(form) &&
			(see_all || (here != NULL && strcmp(datname, here) == 0)))
			serve = lappend(serve, pstrdup(datname));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	list_sort(serve, obx_compare_names);
	foreach(lc, serve)
	{
		NameData	datname;
		Datum		values[OBX_STATUS_COLUMNS];
		bool		nulls[OBX_STATUS_COLUMNS];

		namestrcpy(&datname, (char *) lfirst(lc));
		memset(nulls, true, sizeof(nulls));
		values[0] = NameGetDatum(&datname);
		nulls[0] = false;
		values[2] = CStringGetTextDatum("standby");
		nulls[2] = false;
		values[5] = Int64GetDatum(0);
		nulls[5] = false;
		values[6] = Int64GetDatum(0);
		nulls[6] = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}
