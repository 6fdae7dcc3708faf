/*-------------------------------------------------------------------------
 *
 * outbox_worker_status.c
 *		outbox.worker_status(): what the drain workers are doing.
 *
 * One row per database the launcher serves, read from a copy of the
 * workers' slots in shared memory (outbox_shmem.c).  Only a preloaded
 * library has workers; elsewhere the function explains what is missing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_shmem.h"

#define OBX_STATUS_COLUMNS		8

PG_FUNCTION_INFO_V1(outbox_worker_status);

static const char *obx_state_name(OutboxWorkerState state);
static int	obx_compare_infos(const void *a, const void *b);

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

	qsort(infos, n, sizeof(OutboxWorkerInfo), obx_compare_infos);

	for (i = 0; i < n; i++)
	{
		OutboxWorkerInfo *info = &infos[i];
		Datum		values[OBX_STATUS_COLUMNS];
		bool		nulls[OBX_STATUS_COLUMNS];

		if (!see_all && (here == NULL || strcmp(NameStr(info->datname), here) != 0))
			continue;

		memset(nulls, 0, sizeof(nulls));
		values[0] = NameGetDatum(&info->datname);
		values[1] = Int32GetDatum(info->pid);
		nulls[1] = (info->pid == 0);
		values[2] = CStringGetTextDatum(obx_state_name(info->state));
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

	return (Datum) 0;
}
