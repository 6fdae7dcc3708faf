/*-------------------------------------------------------------------------
 *
 * outbox_launcher.c
 *		The launcher: one background process that starts and stops a drain
 *		worker per database it serves.
 *
 * With the library in shared_preload_libraries, the postmaster starts one
 * launcher.  It is connected to no database: it reads pg_database to find
 * the databases that outbox.worker_databases names (or all of them for
 * '*'), and pg_authid to resolve outbox.worker_role (outbox_launcher_dbs.c).
 * For each database it serves it registers one dynamic drain worker
 * (outbox_worker.c), and it watches them: a worker that failed is restarted
 * after a pause, one whose database it no longer serves (or whose role
 * changed) is stopped.  A drain worker in a database without the extension
 * leaves at once; the launcher looks again when CREATE EXTENSION commits
 * there, and once a minute in case that notice was missed.
 *
 * Glossary:
 *	wanted		a database the launcher serves: named in
 *				outbox.worker_databases (or any, for '*'), not a template,
 *				accepting connections
 *	pass		one iteration of the launcher's loop: reap exited workers,
 *				scan pg_database, start or stop workers to match
 *	slot		a drain worker's entry in shared memory (outbox_shmem.c),
 *				known here by its number
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_launcher_int.h"
#include "outbox_shmem.h"
#include "outbox_worker.h"

#define OBX_LAUNCHER_TYPE		"krizaka_outbox launcher"

#define OBX_LAUNCHER_RESTART_S	5		/* postmaster restarts a failed launcher */
#define OBX_LAUNCHER_NAPTIME_MS 10000	/* longest launcher sleep: pg_database rescan */
#define OBX_ORPHAN_WAIT_MS		5000	/* a new launcher waits this long for old workers */
#define OBX_ORPHAN_POLL_MS		10		/* how often it looks meanwhile */
#define OBX_RESTART_MS			1000	/* restart after a worker was terminated */
#define OBX_ERROR_RESTART_MS	5000	/* restart after a worker failed */
#define OBX_START_RETRY_MS		1000	/* retry when no worker could be registered */
#define OBX_PROBE_INTERVAL_MS	60000	/* look again for a missing extension */

static HTAB *obx_dbs = NULL;
static MemoryContext obx_launcher_cxt = NULL;
static uint32 obx_generation = 0;
static bool obx_logged_no_bgworker = false;

static void obx_launcher_attach(void);
static void obx_launcher_detach(int code, Datum arg);
static long obx_launcher_pass(void);
static void obx_settings_changed(void);
static void obx_take_probe_requests(void);
static void obx_reap_workers(void);
static void obx_start_worker(LauncherDb *db, Oid roleid, TimestampTz now);
static void obx_keep_slot(LauncherDb *db);
static void obx_release_slot(LauncherDb *db);
static void obx_show_problem(LauncherDb *db, const char *problem, bool star);

/* Register the launcher with the postmaster; called from _PG_init. */
void
OutboxLauncherRegister(void)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = OBX_LAUNCHER_RESTART_S;
	strlcpy(bgw.bgw_library_name, OUTBOX_EXTENSION_NAME, BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "OutboxLauncherMain", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, OBX_LAUNCHER_TYPE, BGW_MAXLEN);
	strlcpy(bgw.bgw_type, OBX_LAUNCHER_TYPE, BGW_MAXLEN);
	RegisterBackgroundWorker(&bgw);
}

/* Entry point of the launcher. */
void
OutboxLauncherMain(Datum main_arg)
{
	MemoryContext pass_cxt;
	HASHCTL		ctl;
	long		timeout = 0;

	/* handlers first, then unblock: no signal may find a default handler */
	WorkerSetSignals(false);
	BackgroundWorkerUnblockSignals();

	/* no database: the launcher reads only the shared catalogs */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	SetConfigOption("application_name", OBX_LAUNCHER_TYPE,
					PGC_USERSET, PGC_S_SESSION);

	obx_launcher_cxt = AllocSetContextCreate(TopMemoryContext,
											 "krizaka_outbox launcher",
											 ALLOCSET_DEFAULT_SIZES);
	pass_cxt = AllocSetContextCreate(obx_launcher_cxt,
									 "krizaka_outbox launcher pass",
									 ALLOCSET_DEFAULT_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LauncherDb);
	ctl.hcxt = obx_launcher_cxt;
	obx_dbs = hash_create("krizaka_outbox launcher databases", 16, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	obx_launcher_attach();
	ereport(LOG, (errmsg("krizaka_outbox launcher started")));

	for (;;)
	{
		MemoryContext old;

		if (WorkerWaitForWork(timeout))
			obx_settings_changed();

		MemoryContextReset(pass_cxt);
		old = MemoryContextSwitchTo(pass_cxt);
		timeout = obx_launcher_pass();
		MemoryContextSwitchTo(old);
		pgstat_report_activity(STATE_IDLE, NULL);
	}
}

/*
 * Publish the launcher's latch and take over the slots.  Workers left by a
 * previous launcher (which failed; its handles are lost with it) are
 * terminated and waited for, so that no database ever has two.
 */
static void
obx_launcher_attach(void)
{
	TimestampTz deadline;

	/*
	 * NB: before_shmem_exit, not on_shmem_exit: the published latch belongs
	 * to our PGPROC, which ProcKill (an on_shmem_exit callback) hands back;
	 * it must be withdrawn while it is still ours.
	 */
	before_shmem_exit(obx_launcher_detach, (Datum) 0);

	obx_generation = ShmemLauncherAttach();

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   OBX_ORPHAN_WAIT_MS);
	while (ShmemClearExitedSlots() && GetCurrentTimestamp() < deadline)
		WorkerWait(OBX_ORPHAN_POLL_MS);
}

/* Withdraw the launcher's latch at exit. */
static void
obx_launcher_detach(int code, Datum arg)
{
	ShmemLauncherDetach();
}

/* After a reload: messages logged once may be logged again. */
static void
obx_settings_changed(void)
{
	LauncherForgetLogged();
	obx_logged_no_bgworker = false;
}

/*
 * One pass of the launcher: account for exited workers, find the databases
 * it serves, then start or stop workers to match.  Returns how long to
 * sleep, in ms.
 */
static long
obx_launcher_pass(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDb *db;
	Oid			roleid;
	char	   *role_problem;
	TimestampTz now;
	long		timeout = OBX_LAUNCHER_NAPTIME_MS;
	bool		star;

	obx_reap_workers();
	star = LauncherScanDatabases(obx_dbs, obx_launcher_cxt, &roleid,
								 &role_problem);
	obx_take_probe_requests();

	now = GetCurrentTimestamp();
	hash_seq_init(&seq, obx_dbs);
	while ((db = (LauncherDb *) hash_seq_search(&seq)) != NULL)
	{
		if (db->handle != NULL)
		{
			/* running: stop it when no longer wanted, or to change its role */
			if (!db->stopping && (!db->wanted || db->roleid != roleid))
			{
				TerminateBackgroundWorker(db->handle);
				db->stopping = true;
			}
			continue;
		}

		if (!db->wanted)
		{
			obx_release_slot(db);
			(void) hash_search(obx_dbs, &db->dboid, HASH_REMOVE, NULL);
			continue;
		}

		/*
		 * Every listed database has a row in worker_status(); with '*', only
		 * those that have the extension.
		 */
		if (!star)
			obx_keep_slot(db);
		else if (db->no_extension)
			obx_release_slot(db);

		if (role_problem != NULL)
		{
			obx_show_problem(db, role_problem, star);
			continue;
		}

		if (db->start_after > now)
		{
			timeout = Min(timeout,
						  TimestampDifferenceMilliseconds(now, db->start_after));
			continue;
		}

		obx_start_worker(db, roleid, now);
		if (db->handle == NULL && db->start_after > now)
			timeout = Min(timeout,
						  TimestampDifferenceMilliseconds(now, db->start_after));
	}

	return timeout;
}

/*
 * Take the databases where CREATE EXTENSION committed: start their worker
 * now rather than at the next periodic look.
 */
static void
obx_take_probe_requests(void)
{
	Oid			probes[OUTBOX_MAX_PROBES];
	int			nprobes;
	bool		probe_all;
	int			i;
	HASH_SEQ_STATUS seq;
	LauncherDb *db;

	nprobes = ShmemTakeProbes(probes, &probe_all);

	hash_seq_init(&seq, obx_dbs);
	while ((db = (LauncherDb *) hash_seq_search(&seq)) != NULL)
	{
		bool		requested = probe_all;

		for (i = 0; i < nprobes; i++)
			requested |= (probes[i] == db->dboid);
		if (!requested)
			continue;

		/*
		 * A worker still running may have looked before the extension
		 * existed; the flag makes its exit restart it at once.
		 */
		db->probe_requested = true;
		if (db->handle == NULL)
			db->start_after = 0;
	}
}

/*
 * Account for workers that have exited, and decide when each comes back,
 * from the reason it left in its slot.
 */
static void
obx_reap_workers(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDb *db;

	hash_seq_init(&seq, obx_dbs);
	while ((db = (LauncherDb *) hash_seq_search(&seq)) != NULL)
	{
		OutboxWorkerExit reason;
		BgwHandleStatus status;
		TimestampTz now;
		pid_t		pid;

		if (db->handle == NULL)
			continue;

		status = GetBackgroundWorkerPid(db->handle, &pid);
		if (status == BGWH_POSTMASTER_DIED)
			proc_exit(1);
		if (status != BGWH_STOPPED)
			continue;

		pfree(db->handle);
		db->handle = NULL;

		reason = ShmemReapSlot(db->slotno);

		now = GetCurrentTimestamp();
		db->no_extension = (reason == OBX_EXIT_NO_EXTENSION);
		switch (reason)
		{
			case OBX_EXIT_NO_EXTENSION:
				db->start_after = db->probe_requested ? now :
					TimestampTzPlusMilliseconds(now, OBX_PROBE_INTERVAL_MS);
				break;
			case OBX_EXIT_HELD_OFF:
				db->start_after = now;	/* once the holdoff ends */
				break;
			case OBX_EXIT_ERROR:
				db->start_after = TimestampTzPlusMilliseconds(now, OBX_ERROR_RESTART_MS);
				break;
			default:
				db->start_after = db->stopping ? now :
					TimestampTzPlusMilliseconds(now, OBX_RESTART_MS);
				break;
		}
		db->stopping = false;
		db->probe_requested = false;
	}
}

/* Start the worker of a database, unless something keeps it away. */
static void
obx_start_worker(LauncherDb *db, Oid roleid, TimestampTz now)
{
	MemoryContext old;
	Oid			connect_as;
	int			slotno;
	bool		held_off;
	bool		registered;

	slotno = ShmemPrepareStart(db->slotno, db->dboid, &db->datname,
							   obx_generation, db->showing_problem,
							   &held_off);
	if (held_off)
		return;					/* the holdoff's end wakes the launcher */
	if (slotno < 0)
	{
		db->start_after = TimestampTzPlusMilliseconds(now, OBX_START_RETRY_MS);
		if (!obx_logged_no_bgworker)
			ereport(LOG,
					(errmsg("no free slot for a krizaka_outbox worker for database \"%s\"",
							NameStr(db->datname)),
					 errhint("Name fewer databases in %s or raise %s.",
							 "outbox.worker_databases", "max_worker_processes")));
		obx_logged_no_bgworker = true;
		return;
	}
	db->slotno = slotno;
	db->showing_problem = false;

	/* InvalidOid: the bootstrap superuser, whatever its name */
	connect_as = (roleid == BOOTSTRAP_SUPERUSERID &&
				  outbox_worker_role[0] == '\0') ? InvalidOid : roleid;

	/* the handle must outlive this pass */
	old = MemoryContextSwitchTo(obx_launcher_cxt);
	registered = WorkerStart(slotno, db->dboid, NameStr(db->datname),
							 connect_as, obx_generation, &db->handle);
	MemoryContextSwitchTo(old);

	if (!registered)
	{
		db->handle = NULL;
		(void) ShmemSetSlotState(slotno, db->dboid, &db->datname,
								 OBX_WORKER_STOPPED, NULL);
		db->start_after = TimestampTzPlusMilliseconds(now, OBX_START_RETRY_MS);
		if (!obx_logged_no_bgworker)
			ereport(LOG,
					(errmsg("could not start a krizaka_outbox worker for database \"%s\"",
							NameStr(db->datname)),
					 errdetail("All background worker slots are in use."),
					 errhint("Raise %s.", "max_worker_processes")));
		obx_logged_no_bgworker = true;
		return;
	}

	obx_logged_no_bgworker = false;
	db->roleid = roleid;
	db->stopping = false;
	db->probe_requested = false;
}

/*
 * Give a listed database a slot even while no worker runs, so that
 * worker_status() shows it.
 */
static void
obx_keep_slot(LauncherDb *db)
{
	if (db->slotno >= 0)
		return;

	db->slotno = ShmemSetSlotState(-1, db->dboid, &db->datname,
								   db->no_extension ?
								   OBX_WORKER_NO_EXTENSION : OBX_WORKER_STOPPED,
								   NULL);
}

/* Give a database's slot back (its worker has exited). */
static void
obx_release_slot(LauncherDb *db)
{
	if (db->slotno < 0)
		return;

	ShmemFreeSlot(db->slotno);
	db->slotno = -1;
}

/*
 * Show why no worker runs (a role that cannot be used) in the database's
 * slot.  A listed database gets a slot for it; with '*', only databases
 * known to have the extension (they have a slot already) show it.
 */
static void
obx_show_problem(LauncherDb *db, const char *problem, bool star)
{
	int			slotno;

	if (star && db->slotno < 0)
		return;

	slotno = ShmemSetSlotState(db->slotno, db->dboid, &db->datname,
							   OBX_WORKER_STOPPED, problem);
	if (slotno < 0)
		return;
	db->slotno = slotno;
	db->showing_problem = true;
}
